"""Helpers for the runtime tests: the real daemon (in-process, real HTTP and
websocket, real SQLite) on the scripted model, a test plugin registered like
any marketplace plugin, test personas, a websocket client, and the row
invariants checked after every test.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

HERE = Path(__file__).resolve().parent
PLUGIN_DIR = HERE / "rtplugin"
if str(PLUGIN_DIR) not in sys.path:
    sys.path.insert(0, str(PLUGIN_DIR))

import ongrid_rt_testtools as rtt  # the test plugin: tests share its events

from ongridd.config import structure
from ongridd.fakellm import open_fake_llm

__all__ = ["rtt"]

PLUGIN_NAME = "rt_testtools"
TERMINAL = ("completed", "failed", "killed")
ACTIVE = ("pending", "running")

#: every database a test opened; the autouse fixture checks them after the test
OPENED_DBS: list[Path] = []

_WORKER_TOOLS = "[rt_wait, rt_sleep, rt_raise, rt_echo, rt_touch, rt_shell]"
PERSONAS = {
    "rt-worker": f"""---
name: rt-worker
description: Runtime-test worker with harmless test tools.
when_to_use: Runtime tests only.
tools: {_WORKER_TOOLS}
max_turns: 6
---
You are a test worker. Use your tools and answer briefly.
""",
    "rt-other": f"""---
name: rt-other
description: A second runtime-test worker.
when_to_use: Runtime tests only.
tools: {_WORKER_TOOLS}
max_turns: 6
---
You are another test worker.
""",
    "rt-readonly": """---
name: rt-readonly
description: A read-only runtime-test worker.
when_to_use: Runtime tests only.
tools: [rt_echo, rt_touch, rt_shell, host_bash]
permission_mode: read-only
max_turns: 6
---
You only look.
""",
}


# ---- state dir preparation -------------------------------------------------


def install_test_plugin(state_dir: Path) -> Path:
    """Install the test plugin as a marketplace plugin folder
    ``<state_dir>/plugins/rt_testtools`` (module + dist-info with an
    ``ongrid`` entry point), exactly what the plugin manager loads."""
    folder = state_dir / "plugins" / PLUGIN_NAME
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(PLUGIN_DIR / "ongrid_rt_testtools.py", folder / "ongrid_rt_testtools.py")
    dist = folder / "ongrid_rt_testtools-0.1.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ongrid-rt-testtools\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[ongrid]\n{PLUGIN_NAME} = ongrid_rt_testtools\n")
    return folder


def write_agents(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in PERSONAS.items():
        (folder / f"{name}.md").write_text(text, encoding="utf-8")
    return folder


def prepare(root: Path, *, limits: Mapping[str, Any] | None = None, llm: Mapping[str, Any] | None = None,
            server: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A config mapping for a daemon in ``root`` (state, agents, marker dir)."""
    state = root / "state"
    state.mkdir(parents=True, exist_ok=True)
    install_test_plugin(state)
    agents = write_agents(root / "agents")
    markers = root / "markers"
    markers.mkdir(exist_ok=True)
    OPENED_DBS.append(state / "ongrid.db")
    return {
        "server": {"listen": "127.0.0.1:0", **(server or {})},
        "state_dir": str(state),
        "llm": {"model": "scripted", "max_retries": 0, "timeout_s": 30, **(llm or {})},
        "limits": {"worker_timeout_s": 30, "reviewer_timeout_s": 20, **(limits or {})},
        "agents": {"user_dirs": [str(agents)]},
        "plugins": {"settings": {PLUGIN_NAME: {"marker_dir": str(markers)}}},
    }


# ---- invariants --------------------------------------------------------------


def db_rows(db: Path, sql: str, params: tuple = ()) -> list[dict]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        con.row_factory = sqlite3.Row
        return [dict(r) for r in con.execute(sql, params)]
    finally:
        con.close()


def check_invariants(db: Path, *, stopped: bool) -> None:
    """No terminal row without ``closed_at``; with ``stopped`` (the daemon
    is down after a graceful stop, or up again after the start-up recovery),
    no worker/reviewer row still pending or running and no message still
    held for a turn (``pending_messages``)."""
    if not db.exists():
        return
    bad = db_rows(db, "SELECT id, agent_id, status FROM chat_sessions WHERE status IN "
                      "('completed','failed','killed') AND closed_at IS NULL")
    assert not bad, f"terminal rows without closed_at: {bad}"
    if stopped:
        still = db_rows(db, "SELECT id, agent_id, status FROM chat_sessions WHERE status IN ('pending','running')")
        assert not still, f"rows still open after the daemon stopped: {still}"
        held = db_rows(db, "SELECT session_id, content FROM pending_messages")
        assert not held, f"messages still held after the daemon stopped: {held}"


# ---- the scripted model's environment ----------------------------------------


class LiveEnv(Mapping[str, str]):
    """``${NAME}`` values for the scripted model, resolved when a step is
    answered: a value may be a string or a zero-argument callable (e.g. the
    id of a worker that only exists once the turn runs)."""

    def __init__(self) -> None:
        self.values: dict[str, str | Callable[[], str]] = {}

    def __setitem__(self, key: str, value: str | Callable[[], str]) -> None:
        self.values[key] = value

    def __getitem__(self, key: str) -> str:
        value = self.values[key]
        return value() if callable(value) else value

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


# ---- websocket client --------------------------------------------------------


class WsClient:
    """A chat-socket client over trio-websocket; every frame received is kept
    in ``frames``."""

    def __init__(self, conn: Any):
        self.conn = conn
        self.frames: list[dict] = []
        self.session: dict | None = None

    @property
    def session_id(self) -> str:
        assert self.session is not None
        return self.session["session_id"]

    async def send(self, frame: Any) -> None:
        await self.conn.send_message(frame if isinstance(frame, str) else json.dumps(frame))

    async def recv(self, timeout: float = 15) -> dict:
        with trio.fail_after(timeout):
            frame = json.loads(await self.conn.get_message())
        self.frames.append(frame)
        return frame

    async def until(self, pred: Callable[[dict], bool], timeout: float = 15) -> dict:
        """Receive until a frame matches ``pred``; returns it."""
        with trio.fail_after(timeout):
            while True:
                frame = await self.recv(timeout=timeout)
                if pred(frame):
                    return frame

    async def until_type(self, *types: str, timeout: float = 15) -> dict:
        return await self.until(lambda f: f.get("type") in types, timeout)

    async def tile(self, status: str, subagent_type: str | None = None, timeout: float = 15) -> dict:
        return await self.until(lambda f: f.get("type") == "agent_tile" and f["status"] == status
                                and (subagent_type is None or f["subagent_type"] == subagent_type), timeout)

    async def ask(self, text: str, timeout: float = 30) -> dict:
        """Send a user message and return the turn's ``final`` or ``error`` frame."""
        await self.send({"type": "user_message", "text": text})
        return await self.until_type("final", "error", timeout=timeout)

    def of_type(self, kind: str) -> list[dict]:
        return [f for f in self.frames if f.get("type") == kind]


# ---- the daemon ----------------------------------------------------------------


@attrs.define
class Daemon:
    handle: Any
    fake: Any
    env: LiveEnv
    root: Path

    @property
    def runtime(self) -> Any:
        return self.handle.services.runtime

    @property
    def store(self) -> Any:
        return self.handle.services.store

    @property
    def base_url(self) -> str:
        return self.handle.base_url

    @property
    def ws_url(self) -> str:
        return self.handle.base_url.replace("http://", "ws://") + "/ws"

    @property
    def db(self) -> Path:
        return self.root / "state" / "ongrid.db"

    @property
    def markers(self) -> Path:
        return self.root / "markers"

    def use_script(self, script: Mapping[str, Any]) -> None:
        """Give the scripted model a new script; sessions that already took
        steps keep their place, new sessions start at step 0."""
        from ongridd.fakellm.script import coerce_script

        self.fake.script = coerce_script(dict(script))

    def task_ids(self, persona: str) -> list[str]:
        """Ids of the workers of ``persona`` this daemon started, in spawn order."""
        return [t.task_id for t in self.runtime.workers.tasks.values() if t.persona == persona]

    def task_id(self, persona: str, index: int = 0) -> str:
        ids = self.task_ids(persona)
        if len(ids) <= index:
            return f"(no {persona} worker #{index} yet)"
        return ids[index]

    def rows(self, sql: str = "SELECT * FROM chat_sessions ORDER BY created_at", params: tuple = ()) -> list[dict]:
        return db_rows(self.db, sql, params)

    def workers(self, persona: str | None = None) -> list[dict]:
        rows = self.rows("SELECT * FROM chat_sessions WHERE parent_session_id IS NOT NULL ORDER BY created_at")
        return [r for r in rows if persona is None or r["agent_id"] == persona]

    def row(self, session_id: str) -> dict:
        rows = self.rows("SELECT * FROM chat_sessions WHERE id = ?", (session_id,))
        assert rows, f"no session row {session_id}"
        return rows[0]

    def audit(self, session_id: str | None = None) -> list[dict]:
        if session_id is None:
            return self.rows("SELECT a.*, s.agent_id FROM audit_logs a JOIN chat_sessions s ON s.id = a.session_id "
                             "ORDER BY a.created_at")
        return self.rows("SELECT * FROM audit_logs WHERE session_id = ? ORDER BY created_at", (session_id,))

    def requests(self, persona: str) -> list[Any]:
        """The scripted model's recorded requests of ``persona``, in arrival order."""
        return [r for r in self.fake.requests if r.agent == persona]

    @asynccontextmanager
    async def ws(self, thread: str | None = "main", *, token: str | None = None,
                 locale: str | None = None) -> AsyncIterator[WsClient]:
        """A connected client; with ``thread`` it sends hello and reads the
        ``session`` frame (``client.session``)."""
        from trio_websocket import open_websocket_url

        async with open_websocket_url(self.ws_url) as conn:
            client = WsClient(conn)
            if thread is not None:
                hello: dict[str, Any] = {"type": "hello", "thread": thread}
                if token is not None:
                    hello["token"] = token
                if locale is not None:
                    hello["locale"] = locale
                await client.send(hello)
                frame = await client.recv()
                assert frame["type"] == "session", frame
                client.session = frame
            yield client


@asynccontextmanager
async def open_daemon(root: Path, script: Mapping[str, Any], *, limits: Mapping[str, Any] | None = None,
                      llm: Mapping[str, Any] | None = None, server: Mapping[str, Any] | None = None,
                      env: LiveEnv | None = None) -> AsyncIterator[Daemon]:
    """The scripted model and the real daemon (in this process) for the block.

    On the way out the daemon is shut down (its stop is awaited) and the row
    invariants of the database are asserted.
    """
    from ongridd.daemon import run_daemon

    env = env if env is not None else LiveEnv()
    mapping = prepare(root, limits=limits, llm=llm, server=server)
    ok = False
    async with open_fake_llm(dict(script), env=env) as fake:
        mapping["llm"]["base_url"] = fake.base_url
        config = structure(mapping)
        async with trio.open_nursery() as nursery:
            handle = await nursery.start(partial(run_daemon, config, handle_signals=False))
            daemon = Daemon(handle=handle, fake=fake, env=env, root=root)
            try:
                yield daemon
                ok = True
            finally:
                handle.shutdown.set()
                with trio.move_on_after(20):
                    await handle.stopped.wait()
                nursery.cancel_scope.cancel()
    if ok:
        check_invariants(root / "state" / "ongrid.db", stopped=True)


# ---- scripted-model request inspection ------------------------------------------


def tool_messages(request: Any) -> list[dict]:
    """The ``role: tool`` messages of a recorded request, in order."""
    return [m for m in request.body["messages"] if m.get("role") == "tool"]


def tool_result(request: Any, call_id: str) -> Any:
    """The JSON (or text) result for ``call_id`` in a recorded request."""
    for m in tool_messages(request):
        if m.get("tool_call_id") == call_id:
            try:
                return json.loads(m["content"])
            except (TypeError, ValueError):
                return m["content"]
    raise AssertionError(f"no tool message for {call_id} in the request")


def tool_names(request: Any) -> list[str]:
    return [t["function"]["name"] for t in request.body.get("tools") or ()]


def agent_call(subagent_type: str, prompt: str, description: str = "test dispatch") -> dict:
    return {"name": "AgentTool", "arguments": {"description": description, "subagent_type": subagent_type,
                                               "prompt": prompt}}


def touch_script(name: str, reviewer_steps: list[dict], reason: str = "the test asks for it") -> dict:
    """A scripted turn in which ``rt-worker`` calls the write tool ``rt_touch``
    (marker ``name``, with ``reason``) and the reviewer answers with
    ``reviewer_steps``; the coordinator and the worker answer with the tool
    results they received."""
    return {
        "default": [{"tool_calls": [agent_call("rt-worker", f"create the marker {name}")]},
                    {"content_from_tool_results": True}],
        "rt-worker": [{"tool_calls": [{"name": "rt_touch", "arguments": {"name": name, "reason": reason}}]},
                      {"content_from_tool_results": True}],
        "reviewer": reviewer_steps,
    }


def ongrid_cmd(*args: str) -> list[str]:
    """The ``ongrid`` CLI as a subprocess command (works from a checkout)."""
    return [sys.executable, "-c", "from ongridd.cli import ongrid_main; ongrid_main()", *args]


def ongridd_cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", "from ongridd.cli import ongridd_main; ongridd_main()", *args]


def subprocess_env(**extra: str) -> dict[str, str]:
    root = HERE.parent.parent
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "plugins"), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    env.update(extra)
    return env


async def raw_chat_socket(base_url: str, *, buffer: tuple[int, int] | None = None) -> tuple[trio.SocketStream, Any]:
    """A websocket to the daemon's ``/ws`` on a raw TCP stream, its handshake done and nothing
    else sent (no hello: no token is needed to get this far), for clients that misbehave below
    the websocket library.  ``buffer``: ``(SO_SNDBUF or SO_RCVBUF, bytes)`` set before connecting.
    Returns the stream and its wsproto client connection."""
    import socket

    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, Request

    host = base_url.removeprefix("http://")
    sock = trio.socket.socket()
    if buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, buffer[0], buffer[1])
    await sock.connect(("127.0.0.1", int(host.rsplit(":", 1)[1])))
    stream = trio.SocketStream(sock)
    client = WSConnection(ConnectionType.CLIENT)
    await stream.send_all(client.send(Request(host=host, target="/ws")))
    with trio.fail_after(10):
        while not any(isinstance(e, AcceptConnection) for e in client.events()):
            client.receive_data(await stream.receive_some(4096))
    return stream, client
