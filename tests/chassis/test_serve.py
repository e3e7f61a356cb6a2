"""A real ``ongridd serve`` subprocess: /healthz, tables, SIGTERM → exit 0, bad start-ups."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLES = {"chat_sessions", "chat_messages", "audit_logs", "mutating_proposals", "incidents", "change_events"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONGRID_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "plugins"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def start(tmp_path: Path, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ongridd", "serve", *args], cwd=tmp_path,
                            env=env_for(tmp_path, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_healthy(proc: subprocess.Popen, url: str, timeout_s: float = 30.0, *,
                 stderr_tail: Callable[[], str] | None = None, poll_s: float = 0.1, path: str = "/healthz") -> dict:
    """The first 200 body of ``path`` (``/healthz``: live; ``/readyz``: fully
    up); AssertionError when the daemon exits first (with the end of its
    stderr: ``stderr_tail()``, default its pipe) or ``timeout_s`` passes."""
    import httpx2

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = stderr_tail() if stderr_tail is not None else proc.stderr.read()[-2000:]
            raise AssertionError(f"daemon exited {proc.returncode}: {tail}")
        try:
            resp = httpx2.get(url + path, timeout=1.0)
            if resp.status_code == 200:
                return resp.json()
        except httpx2.HTTPError:
            pass
        time.sleep(poll_s)
    raise AssertionError(f"daemon did not answer {path} in time")


@dataclass
class Serving:
    proc: subprocess.Popen
    url: str
    health: dict  # what /healthz answered


@contextmanager
def serving(tmp_path: Path, state: Path, *args: str, **env: str) -> Iterator[Serving]:
    """``ongridd serve --state-dir STATE ARGS…`` on a free loopback port (``env``:
    extra environment), healthy and ready for the block (AssertionError if
    it exits or does not answer /healthz and /readyz in 30 s); killed on the
    way out if it still runs.  Its stderr stays readable after the block."""
    port = free_port()
    proc = start(tmp_path, "--state-dir", str(state), "--listen", f"127.0.0.1:{port}", *args, **env)
    try:
        url = f"http://127.0.0.1:{port}"
        health = wait_healthy(proc, url)
        wait_healthy(proc, url, path="/readyz")  # plugins and registries loaded
        yield Serving(proc=proc, url=url, health=health)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_answers_healthz_creates_tables_and_stops_on_sigterm(tmp_path):
    import httpx2

    state = tmp_path / "state"
    umask = os.umask(0o022)  # the usual umask of a shell (the daemon inherits it)
    with serving(tmp_path, state) as d:
        os.umask(umask)
        assert d.health == {"status": "ok"}
        # the conversations are the owner's only: the state dir it made 0700, the database 0600
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        for name in ("ongrid.db", "ongrid.db-wal", "ongrid.db-shm"):
            if (state / name).exists():
                assert stat.S_IMODE((state / name).stat().st_mode) == 0o600, name
        metrics = httpx2.get(d.url + "/metrics", timeout=5).text
        assert "ongrid_turns_total" in metrics and "ongrid_websocket_clients" in metrics
        agents = httpx2.get(d.url + "/api/agents", timeout=5).json()
        assert {"default", "reviewer", "specialist-disk"} <= {a["name"] for a in agents}
        # up and serving, but no model is configured: readiness says turns will fail
        ready = httpx2.get(d.url + "/readyz", timeout=5).json()
        assert ready["status"] == "ready" and ready["model"] == "none" and "llm.base_url" in ready["hint"]
        db = state / "ongrid.db"
        tables = {r[0] for r in sqlite3.connect(db).execute("select name from sqlite_master where type='table'")}
        assert TABLES <= tables
        started = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=10) == 0
        assert time.monotonic() - started < 10
    err = d.proc.stderr.read()
    assert '"event": "daemon_ready"' in err and '"event": "daemon_stopped"' in err


def test_readyz_says_nothing_more_once_a_model_is_configured(tmp_path):
    import httpx2

    with serving(tmp_path, tmp_path / "s", ONGRID_LLM_BASE_URL="http://127.0.0.1:9/v1") as d:
        assert httpx2.get(d.url + "/readyz", timeout=5).json() == {"status": "ready"}


def test_non_loopback_without_tokens_refuses_to_start(tmp_path):
    proc = start(tmp_path, "--state-dir", str(tmp_path / "s"), "--listen", "0.0.0.0:0")
    assert proc.wait(timeout=30) == 2
    err = proc.stderr.read()
    assert "no tokens are configured" in err and "environment variable ONGRID_TOKENS" in err  # the variable, named
    assert not (tmp_path / "s" / "ongrid.db").exists()


def test_tokens_are_not_logged(tmp_path):
    import json

    import httpx2

    secret, guess = "tok-very-secret-123", "tok-guessed-wrong-456"
    with serving(tmp_path, tmp_path / "s", ONGRID_TOKENS=f"alice:{secret}") as d:
        assert httpx2.get(d.url + "/api/agents", timeout=5).status_code == 401
        ok = httpx2.get(d.url + "/api/agents", headers={"Authorization": f"Bearer {secret}"}, timeout=5)
        assert ok.status_code == 200
        # a refused token is on record (who, where, why; not the token), about once a second per reason
        time.sleep(1.1)
        with httpx2.Client(headers={"Authorization": f"Bearer {guess}"}, timeout=5) as guesser:
            for _ in range(20):
                assert guesser.get(d.url + "/api/sessions").status_code == 401
            time.sleep(1.1)
            assert guesser.get(d.url + "/metrics").status_code == 401
            time.sleep(1.1)
            basic = httpx2.get(d.url + "/api/agents", headers={"Authorization": "Basic YWxpY2U6eA=="}, timeout=5)
            assert basic.status_code == 401  # another scheme is named as such, not taken for no credentials
            assert basic.json()["error"]["message"] == "the Authorization header is not 'Bearer TOKEN'"
            # a path the router matches nowhere (a line break) is refused for the token as well: no 404
            # tells an anonymous client which route names exist
            for path in ("/api/nosuch/x%0A", "/api/agents/x%0A", "/static/../x"):
                assert httpx2.get(d.url + path, timeout=5).status_code == 401, path
            for path in ("/api/agents/x", "/api/nosuch"):  # nor OPTIONS, whose Allow differs by route
                assert httpx2.options(d.url + path, timeout=5).status_code == 401, path
            mine = httpx2.options(d.url + "/api/agents/x", headers={"Authorization": f"Bearer {secret}"},
                                  timeout=5)
            assert mine.status_code == 200 and "PUT" in mine.headers["allow"]
            # a stream of requests without a token does not hide a guess among them
            for n in range(10):
                assert httpx2.get(d.url + "/api/noise", timeout=5).status_code == 401
                if n == 5:
                    assert guesser.get(d.url + "/api/sessions").status_code == 401
        # a long path is redacted before it is cut: no piece of a token at the cut is written
        time.sleep(1.1)
        assert httpx2.get(d.url + "/" + "a" * 185 + secret, timeout=5).status_code == 401
        for _ in range(3):  # held back in the last window: told as the daemon stops
            assert httpx2.get(d.url + "/api/agents", timeout=5).status_code == 401
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=10) == 0
    err = d.proc.stderr.read()
    assert secret not in err and guess not in err and "tok-very-sec" not in err and "YWxp" not in err
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    refused = [line for line in lines if line["event"] == "request_unauthorized"]
    assert refused[0]["path"] == "/api/agents" and refused[0]["reason"] == "a token is required", refused
    assert refused[0]["peer"].startswith("127.0.0.1:") and refused[0]["level"] == "warning"
    guesses = [r for r in refused if r["reason"] == "invalid token"]
    assert [g["path"] for g in guesses] == ["/api/sessions", "/metrics", "/api/sessions"], guesses
    assert [g.get("not_logged", 0) for g in guesses] == [0, 19, 0], guesses  # the last: amid the stream
    (basic_line,) = [r for r in refused if r["reason"] == "the Authorization header is not 'Bearer TOKEN'"]
    anonymous = [r for r in refused if r["reason"] == "a token is required"]
    assert anonymous[-1]["path"].startswith("/aaaa") and anonymous[-1]["path"].endswith("…"), anonymous[-1]
    (at_stop,) = [line for line in lines if line["event"] == "lines_not_logged"]
    assert at_stop == {**at_stop, "request_unauthorized: a token is required": 3}, at_stop
    assert len(anonymous) + sum(r.get("not_logged", 0) for r in anonymous) + 3 == 20, anonymous


def test_bad_config_exits_2_naming_the_field(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("llm:\n  timeout_s: soon\n")
    proc = start(tmp_path, "--config", str(cfg))
    assert proc.wait(timeout=30) == 2
    assert "config.llm.timeout_s" in proc.stderr.read()


def test_state_dir_that_cannot_be_created_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    proc = start(tmp_path, "--state-dir", str(blocker / "state"), "--listen", "127.0.0.1:0")
    assert proc.wait(timeout=30) == 2
    assert "state dir" in proc.stderr.read()


def test_unreachable_database_is_a_clear_error(tmp_path):
    port = free_port()  # nothing listens there
    proc = start(tmp_path, "--state-dir", str(tmp_path / "s"), "--listen", "127.0.0.1:0",
                 ONGRID_DATABASE_URL=f"postgresql://ongrid:pw-secret@127.0.0.1:{port}/ongrid")
    assert proc.wait(timeout=60) == 1
    err = proc.stderr.read()
    assert "database" in err.lower() and "pw-secret" not in err


def test_a_second_sigterm_during_the_drain_is_ignored(tmp_path):
    with serving(tmp_path, tmp_path / "s") as d:
        d.proc.send_signal(signal.SIGTERM)
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=10) == 0
    assert '"event": "daemon_stopped"' in d.proc.stderr.read()


def _chat_socket(url: str, path: str = "/ws") -> socket.socket:
    """A raw TCP socket to ``url`` (``http://HOST:PORT``) after a chat-socket handshake (101) on ``path``
    (``/%77s``, an escaped ``/ws``: served by hypercorn, not by the front door)."""
    import base64

    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=20)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def _broken_socket(url: str, frame: bytes, path: str = "/ws") -> None:
    """A chat socket on ``url`` that sends ``frame`` (raw bytes), then reads the daemon's answer."""
    with _chat_socket(url, path) as sock:
        sock.sendall(frame)
        with contextlib.suppress(OSError):
            sock.recv(65536)  # the daemon's close frame: the failure was seen (and logged, or counted)


def test_a_flood_of_broken_sockets_writes_about_a_line_a_second(tmp_path):
    # a malformed frame or a message over the pre-hello limit is anyone's to send: the lines they make
    # are throttled like every refusal, and what was held back is told as the daemon stops
    import json

    mask = b"abcd"
    big = bytes(b ^ mask[i % 4] for i, b in enumerate(b"x" * 17_000))
    frames = {"websocket_failed": b"\x83\x80" + mask,  # opcode 3: reserved
              "websocket_message_too_big": b"\x81\xfe" + (17_000).to_bytes(2, "big") + mask + big}
    host_port = None
    with serving(tmp_path, tmp_path / "s", ONGRID_TOKENS="alice:tok-alice-0123456789abcdef") as d:
        for frame in frames.values():  # (with tokens, no socket is trusted before its hello)
            for n in range(20):  # half through the front door, half through hypercorn
                _broken_socket(d.url, frame, "/ws" if n % 2 else "/%77s")
        host_port = d.url.removeprefix("http://").split(":")
        for _ in range(20):  # a chunked body that does not parse: the connection ends in an error
            with socket.create_connection((host_port[0], int(host_port[1])), timeout=10) as sock:
                sock.sendall(b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n")
                with contextlib.suppress(OSError):
                    while sock.recv(65536):
                        pass
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=10) == 0
    lines = [json.loads(line) for line in d.proc.stderr.read().splitlines() if line.startswith("{")]
    (at_stop,) = [line for line in lines if line["event"] == "lines_not_logged"]
    for event in frames:
        written = [line for line in lines if line["event"] == event]
        assert 1 <= len(written) <= 10, (event, len(written))
        assert len(written) + sum(w.get("not_logged", 0) for w in written) + at_stop.get(event, 0) == 20, (
            event, written, at_stop)
    failed = [line for line in lines if line["event"] == "http_connection_failed"]
    assert len(failed) <= 10, len(failed)  # (not every such connection fails: it is a race in the server)


def test_sockets_that_never_say_hello_are_logged_about_once_a_second(tmp_path):
    import json

    with serving(tmp_path, tmp_path / "s", ONGRID_TOKENS="alice:tok-alice-0123456789abcdef") as d:
        idle = [_chat_socket(d.url) for _ in range(6)]
        try:
            for sock in idle:  # each is told, then closed, once the hello timeout (10 s) has passed
                with contextlib.suppress(OSError):
                    assert b"no accepted hello" in sock.recv(65536)
        finally:
            for sock in idle:
                sock.close()
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=10) == 0
    lines = [json.loads(line) for line in d.proc.stderr.read().splitlines() if line.startswith("{")]
    closed = [line for line in lines if line["event"] == "connection_closed"]
    (at_stop,) = [line for line in lines if line["event"] == "lines_not_logged"]
    assert 1 <= len(closed) <= 3 and closed[0]["reason"] == "no hello", closed
    assert len(closed) + sum(c.get("not_logged", 0) for c in closed) + at_stop.get("connection_closed", 0) == 6
