"""A local double of a chat platform's HTTP API, for the bridge tests.

:class:`PlatformDouble` listens on ``127.0.0.1`` port 0 (a thread of its
own), records every call (``Call``: method, path, query, headers, raw body,
parsed JSON payload) and answers through a ``responder(call) -> (status,
headers, json body)`` the test supplies.  ``inject(path_suffix, status,
headers)`` queues failures answered before the responder (a 429 with
``Retry-After``, a 500); :meth:`stop` / :meth:`start` take the port away and
bring it back (same port), for outage tests.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs


@attrs.define
class Call:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    payload: Any
    at: float
    status: int = 0
    response: Any = None  # the JSON body answered


Responder = Callable[[Call], tuple[int, dict[str, str], Any]]


class PlatformDouble:
    def __init__(self, responder: Responder):
        self.responder = responder
        self.calls: list[Call] = []
        self.failures: list[tuple[str, int, dict[str, str], Any]] = []
        self.lock = threading.Lock()
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.conns: set[Any] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def inject(self, path_suffix: str, status: int, headers: dict[str, str] | None = None,
               body: Any = None) -> None:
        with self.lock:
            self.failures.append((path_suffix, status, headers or {}, body))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with double.lock:
                    double.conns.add(self.connection)

            def finish(self) -> None:
                with double.lock:
                    double.conns.discard(self.connection)
                try:
                    super().finish()
                except OSError:
                    pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                try:
                    payload = json.loads(body) if body else None
                except ValueError:
                    payload = None
                parts = urlsplit(self.path)
                call = Call(self.command, parts.path, parse_qs(parts.query),
                            {k.lower(): v for k, v in self.headers.items()}, body, payload, time.monotonic())
                status, headers, out = 0, {}, None
                with double.lock:
                    double.calls.append(call)
                    for i, (suffix, st, hd, bd) in enumerate(double.failures):
                        if call.path.endswith(suffix):
                            status, headers, out = st, hd, bd or {"ok": False, "error": f"injected {st}"}
                            del double.failures[i]
                            break
                if not status:
                    status, headers, out = double.responder(call)
                call.status, call.response = status, out
                if double._server is None:  # taken away while this request waited
                    self.close_connection = True
                    return
                data = json.dumps(out).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except OSError:
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = _serve

        return Handler

    def start(self) -> PlatformDouble:
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the port and every open connection (an outage)."""
        import socket

        if self._server is not None:
            server, self._server = self._server, None
            server.shutdown()
            server.server_close()
            with self.lock:
                conns = list(self.conns)
            for conn in conns:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def find(self, suffix: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.path.endswith(suffix) and c.status and c.status < 400]

    def wait_for(self, predicate: Callable[[], Any], timeout_s: float = 60.0, what: str = "") -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = predicate()
            if got:
                return got
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what or predicate}; calls: "
                             f"{[(c.method, c.path, c.status) for c in self.calls]}")
