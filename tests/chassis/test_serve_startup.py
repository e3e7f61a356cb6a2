"""Start-up order: the server listens once the store is open and recovered;
``/healthz`` and ``/metrics`` answer at once, every other request and the
chat socket wait for the registries, plugins and runtime (then run, or get
503 / an ``error`` frame ``starting`` when the wait runs out); a start-up
that fails after the server listened still exits with its clear error."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import trio

from ongridd.config import Config
from ongridd.server.app import AppServices, create_app, serve_app
from ongridd.server.auth import Authenticator
from tests.chassis.asgi_socket import asgi_socket
from tests.chassis.test_serve import wait_healthy

ROOT = Path(__file__).resolve().parents[2]

# ---- in-process: the gate of the app ----------------------------------------


class FakeAgents:
    def list(self) -> list[dict]:
        return [{"name": "default"}]


TOKEN = "tok-startup-test-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def starting_app(wait_s: float) -> tuple[object, AppServices]:
    services = AppServices(config=Config(), auth=Authenticator({TOKEN: "alice"}), ready=trio.Event(),
                           startup_wait_s=wait_s)
    return create_app(services), services


async def test_healthz_and_metrics_answer_at_once_and_the_api_waits_for_ready():
    app, services = starting_app(wait_s=30)
    client = app.test_client()
    with trio.fail_after(5):
        health = await client.get("/healthz")
        assert health.status_code == 200 and await health.get_json() == {"status": "ok"}
        assert (await client.get("/metrics", headers=AUTH)).status_code == 200
        assert (await client.get("/")).status_code == 200  # the console's page needs no registry
        ready = await client.get("/readyz")  # readiness: answered at once, not ready yet
        assert ready.status_code == 503 and await ready.get_json() == {"status": "starting"}
    answers: list = []

    async def agents() -> None:
        answers.append(await client.get("/api/agents", headers=AUTH))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(agents)
        await trio.sleep(0.3)
        assert answers == []  # held: the registries are not there yet
        services.agents_api = FakeAgents()
        services.ready.set()
    assert answers[0].status_code == 200 and await answers[0].get_json() == [{"name": "default"}]
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and await ready.get_json() == {"status": "ready"}


async def test_a_request_that_waits_too_long_gets_503_starting():
    app, _ = starting_app(wait_s=0.2)
    resp = await app.test_client().get("/api/agents", headers=AUTH)
    assert resp.status_code == 503
    assert await resp.get_json() == {"error": "the daemon is still starting"}
    assert resp.headers["Retry-After"] == "1"


async def test_a_socket_that_waits_too_long_gets_an_error_frame_starting():
    _, services = starting_app(wait_s=0.2)
    async with asgi_socket(serve_app(services)) as ws:
        await ws.send({"type": "hello"})
        frame = await ws.frame()
        closed = await ws.event()
    assert frame["type"] == "error" and frame["code"] == "starting"
    assert "still starting" in frame["message"]
    assert closed["type"] == "websocket.close" and closed["code"] == 1013


# ---- a real ``ongridd serve`` -----------------------------------------------

SLOW_PLUGIN = '''
import os, time
from ongridd.plugins.api import hookimpl

@hookimpl
def ongrid_register_tools(register, context):
    release = os.environ["SLOWSTART_RELEASE_FILE"]
    deadline = time.monotonic() + 30
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.02)
'''

FAILING_BUILD = '''
from ongridd.errors import ConfigError
import ongridd.plugins.build as build

def _refuse(self, **kwargs):
    raise ConfigError("plugins: this test refuses to build the registries")

build.RegistryBuilder.build_sync = _refuse
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(tmp_path: Path, state: Path, port: int, *, pythonpath: tuple[Path, ...] = (), **extra: str
          ) -> tuple[subprocess.Popen, Path]:
    """``ongridd serve`` in the background; its stderr goes to a file (returned)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONGRID_")}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), str(ROOT), str(ROOT / "plugins"),
                                         env.get("PYTHONPATH", "")])
    env.update(extra)
    log = tmp_path / "stderr.log"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "ongridd", "serve", "--state-dir", str(state),
                                 "--listen", f"127.0.0.1:{port}"], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
    return proc, log


def healthz(proc: subprocess.Popen, url: str, log: Path) -> dict:
    return wait_healthy(proc, url, stderr_tail=lambda: log.read_text()[-2000:], poll_s=0.02)


def events(log: Path) -> list[dict]:
    out = []
    for line in log.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def slow_plugin_folder(state: Path) -> None:
    """A marketplace plugin whose registration waits for ``$SLOWSTART_RELEASE_FILE``."""
    folder = state / "plugins" / "slowstart"
    info = folder / "ongridtest_slowstart-1.0.dist-info"
    info.mkdir(parents=True)
    (folder / "ongridtest_slowstart.py").write_text(SLOW_PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ongridtest_slowstart\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[ongrid]\nongridtest_slowstart = ongridtest_slowstart\n")


async def test_healthz_answers_while_plugins_load_and_the_api_and_socket_are_served_once_ready(tmp_path):
    import httpx2
    from trio_websocket import open_websocket_url

    state, release, port = tmp_path / "state", tmp_path / "release", free_port()
    slow_plugin_folder(state)
    url = f"http://127.0.0.1:{port}"
    proc, log = serve(tmp_path, state, port, SLOWSTART_RELEASE_FILE=str(release))
    try:
        assert await trio.to_thread.run_sync(healthz, proc, url, log) == {"status": "ok"}
        assert not release.exists()  # the registries cannot be loaded yet
        answers: dict = {}

        async def agents() -> None:
            answers["agents"] = await trio.to_thread.run_sync(lambda: httpx2.get(url + "/api/agents", timeout=30))

        async def hello() -> None:
            async with open_websocket_url(f"ws://127.0.0.1:{port}/ws") as conn:
                await conn.send_message(json.dumps({"type": "hello", "thread": "during-start-up"}))
                answers["ws"] = json.loads(await conn.get_message())

        with trio.fail_after(40):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(agents)
                nursery.start_soon(hello)
                await trio.sleep(0.5)
                assert answers == {}  # both wait for the registries
                assert "daemon_ready" not in {e["event"] for e in events(log)}
                release.touch()
        assert answers["agents"].status_code == 200
        assert {"default", "reviewer"} <= {a["name"] for a in answers["agents"].json()}
        assert answers["ws"]["type"] == "session" and answers["ws"]["thread"] == "during-start-up"
        proc.send_signal(signal.SIGTERM)
        assert await trio.to_thread.run_sync(lambda: proc.wait(timeout=15)) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    order = [e["event"] for e in events(log) if e["event"] in ("recovery_sweep", "daemon_listening", "daemon_ready")
             or e.get("plugin") == "ongridtest_slowstart"]
    # it listens first; the store is opened and recovered while /healthz answers, before anything else is served
    assert order == ["daemon_listening", "recovery_sweep", "plugin_loaded", "daemon_ready"], order


async def test_a_sigterm_while_plugins_load_stops_the_daemon_at_once(tmp_path):
    """A plugin that never finishes loading does not hold a stop: SIGTERM
    during start-up ends it (exit 0) without waiting for the plugin, and
    the daemon never claims to be ready."""
    state, release, port = tmp_path / "state", tmp_path / "release", free_port()
    slow_plugin_folder(state)
    url = f"http://127.0.0.1:{port}"
    proc, log = serve(tmp_path, state, port, SLOWSTART_RELEASE_FILE=str(release))
    try:
        assert await trio.to_thread.run_sync(healthz, proc, url, log) == {"status": "ok"}
        proc.send_signal(signal.SIGTERM)
        assert await trio.to_thread.run_sync(lambda: proc.wait(timeout=10)) == 0
        assert not release.exists()  # the plugin was still loading
    finally:
        release.touch()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    seen = [e["event"] for e in events(log)]
    assert "daemon_stopped_during_startup" in seen and "daemon_ready" not in seen
    assert seen[-1] == "daemon_stopped"


def test_a_start_up_that_fails_after_listening_still_exits_2_with_its_error(tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FAILING_BUILD)  # imported at interpreter start
    proc, log = serve(tmp_path, tmp_path / "state", free_port(), pythonpath=(hook,))
    assert proc.wait(timeout=30) == 2
    err = log.read_text()
    assert "ongridd: plugins: this test refuses to build the registries" in err
    seen = [e["event"] for e in events(log)]
    assert "daemon_listening" in seen and "startup_failed" in seen and "daemon_ready" not in seen
    assert "daemon_stopped" in seen
