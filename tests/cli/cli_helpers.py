"""Helpers for the CLI tests: a real ``ongridd serve`` subprocess, a plain
HTTP server that is not a daemon, and the ``ongrid`` CLI as a subprocess."""

from __future__ import annotations

import http.server
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.e2e.e2e_helpers import env, free_port, ongridd, wait_healthy
from tests.e2e.e2e_helpers import ongrid as ongrid_cmd

__all__ = ["free_port", "not_a_daemon", "ongrid", "serve_daemon"]


def ongrid(*args: str, timeout: float = 30, cwd: Path | None = None) -> tuple[int, str, str, float]:
    """Run ``ongrid ARGS``; returns (exit code, stdout, stderr, seconds)."""
    started = time.monotonic()
    proc = subprocess.run(ongrid_cmd(*args), capture_output=True, text=True, timeout=timeout, env=env(), cwd=cwd)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started


@contextmanager
def serve_daemon(tmp: Path, *args: str, extra_env: dict[str, str] | None = None
                 ) -> Iterator[tuple[str, subprocess.Popen]]:
    """A real ``ongridd serve`` (working directory ``tmp``, ``extra_env`` added to its
    environment) on a free loopback port; yields (base URL, process).  After the block the process has
    stopped and ``proc.stderr_text`` holds its log."""
    port = free_port()
    proc = subprocess.Popen(ongridd("serve", "--state-dir", str(tmp / "state"), "--listen", f"127.0.0.1:{port}",
                                    *args), cwd=tmp, env=env(**(extra_env or {})), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr_text = proc.stderr.read()  # the daemon's log lines, for tests after the block


class _NotADaemon(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = b"<html><body><h1>Not Found</h1></body></html>"
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def not_a_daemon() -> Iterator[str]:
    """A plain HTTP server answering 404 HTML everywhere; yields its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotADaemon)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
