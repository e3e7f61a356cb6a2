"""Real Prometheus, node exporter and Alertmanager processes for the telemetry tests.

Each service runs from Debian's binaries on a free loopback port with a
temporary data folder and is stopped at the end (terminate, then kill).
A missing binary skips the test with the install command — except in CI
(``CI=true``), where it fails (``tests.conftest.need``): CI must install
``prometheus``, ``prometheus-node-exporter`` and ``prometheus-alertmanager``.

Readiness is polled (``/-/ready`` or the metrics page) with a bounded
deadline: an external process gives no event to wait on.
"""

from __future__ import annotations

import functools
import json
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import attrs
import httpx2
import pytest
import trio

from ongridd.plugins.api import PluginRequest
from tests.conftest import need

READY_DEADLINE_S = 30.0
POLL_INTERVAL_S = 0.05

_PACKAGES = {
    "prometheus": "prometheus",
    "prometheus-node-exporter": "prometheus-node-exporter",
    "prometheus-alertmanager": "prometheus-alertmanager",
}


def require_binary(name: str) -> str:
    """The path of ``name``; skip (or, in CI, fail) when it is not installed."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    need(path is not None, f"{name} is not installed (apt-get install -y {_PACKAGES.get(name, name)})")
    return path


def free_port() -> int:
    """A loopback TCP port the kernel gave to a port-0 bind (closed again at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@attrs.define
class Service:
    """A running external process: ``url`` is its ``http://127.0.0.1:PORT``."""

    name: str
    url: str
    port: int
    proc: subprocess.Popen
    log_path: Path

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "<no log>"

    def stop(self) -> None:
        """Terminate (then kill after 10 s); idempotent."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start_service(name: str, argv_for_port: Callable[[int], list[str]], ready_path: str, log_path: Path,
                  *, attempts: int = 3) -> Service:
    """Start ``argv_for_port(port)`` and wait until ``GET ready_path`` answers 200.

    Retries with a new port when the process exits early (another process
    took the port between the probe and the bind).  Fails the test with the
    log tail when the service never becomes ready.
    """
    last_error = ""
    for _ in range(attempts):
        port = free_port()
        with log_path.open("ab") as log:
            proc = subprocess.Popen(argv_for_port(port), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        service = Service(name=name, url=f"http://127.0.0.1:{port}", port=port, proc=proc, log_path=log_path)
        deadline = time.monotonic() + READY_DEADLINE_S
        with httpx2.Client(timeout=2.0) as http:
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    last_error = f"{name} exited with {proc.returncode}:\n{service.log_tail()}"
                    break
                try:
                    if http.get(service.url + ready_path).status_code == 200:
                        return service
                except httpx2.HTTPError:
                    pass
                time.sleep(POLL_INTERVAL_S)
            else:
                service.stop()
                pytest.fail(f"{name} not ready within {READY_DEADLINE_S:g} s:\n{service.log_tail()}", pytrace=False)
    pytest.fail(f"{name} did not start: {last_error}", pytrace=False)


@pytest.fixture(scope="session")
def services() -> Iterator[list[Service]]:
    """Every service started in this session, stopped at its end."""
    started: list[Service] = []
    yield started
    for service in reversed(started):
        service.stop()


@pytest.fixture(scope="session")
def node_exporter(services: list[Service], tmp_path_factory: pytest.TempPathFactory) -> Service:
    """``prometheus-node-exporter`` with a few cheap collectors, on a loopback port."""
    binary = require_binary("prometheus-node-exporter")
    folder = tmp_path_factory.mktemp("node_exporter")
    service = start_service(
        "node_exporter",
        lambda port: [binary, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                      "--collector.loadavg", "--collector.meminfo", "--collector.cpu", "--collector.filesystem",
                      "--collector.uname"],
        "/metrics", folder / "node_exporter.log")
    services.append(service)
    return service


TEST_RULES = """\
groups:
  - name: ongrid-test
    interval: 1s
    rules:
      - alert: OngridTestAlwaysFiring
        expr: vector(1) > 0
        for: 0s
        labels: {severity: warning, team: ops}
        annotations: {summary: "always firing, for tests"}
      - alert: OngridTestNeverFires
        expr: vector(0) > 1
        for: 5m
        labels: {severity: critical}
        annotations: {summary: "never fires"}
      - record: ongrid:up:sum
        expr: sum(up)
"""


@pytest.fixture(scope="session")
def start_prometheus(services: list[Service], tmp_path_factory: pytest.TempPathFactory,
                     ) -> Callable[..., Service]:
    """A factory: ``start_prometheus(scrape_targets=[...], rules=TEXT, alertmanagers=[...])``.

    ``scrape_targets``: ``host:port`` of node exporters (job ``node``);
    ``rules``: a rules file's text; ``alertmanagers``: ``host:port`` list.
    Scrape and rule evaluation every second.
    """
    binary = require_binary("prometheus")

    def start(*, scrape_targets: list[str] = (), rules: str | None = None,
              alertmanagers: list[str] = ()) -> Service:
        folder = tmp_path_factory.mktemp("prometheus")
        lines = ["global: {scrape_interval: 1s, evaluation_interval: 1s}", "scrape_configs:"]
        if scrape_targets:
            lines += ["  - job_name: node", f"    static_configs: [{{targets: {list(scrape_targets)!r}}}]"]
        else:
            lines[-1] = "scrape_configs: []"
        if rules is not None:
            (folder / "rules.yml").write_text(rules)
            lines += ["rule_files: [rules.yml]"]
        if alertmanagers:
            lines += ["alerting:", "  alertmanagers:",
                      f"    - static_configs: [{{targets: {list(alertmanagers)!r}}}]"]
        (folder / "prometheus.yml").write_text("\n".join(lines) + "\n")
        service = start_service(
            "prometheus",
            lambda port: [binary, f"--config.file={folder / 'prometheus.yml'}",
                          f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                          "--rules.alert.resend-delay=1s"],
            "/-/ready", folder / "prometheus.log")
        services.append(service)
        return service

    return start


@pytest.fixture(scope="session")
def prometheus(start_prometheus: Callable[..., Service], node_exporter: Service) -> Service:
    """A Prometheus scraping the node exporter (job ``node``) with :data:`TEST_RULES`."""
    return start_prometheus(scrape_targets=[f"127.0.0.1:{node_exporter.port}"], rules=TEST_RULES)


@pytest.fixture
def start_alertmanager(tmp_path: Path) -> Iterator[Callable[[str], Service]]:
    """A factory: ``start_alertmanager(webhook_url)`` → an Alertmanager that sends
    every alert at once (group_wait 0s, group_interval 1s) to ``webhook_url``,
    resolved notifications included."""
    binary = require_binary("prometheus-alertmanager")
    mine: list[Service] = []

    def start(webhook_url: str) -> Service:
        folder = tmp_path / "alertmanager"
        folder.mkdir(exist_ok=True)
        (folder / "alertmanager.yml").write_text(
            "route:\n"
            "  receiver: ongrid\n"
            "  group_by: [alertname]\n"
            "  group_wait: 0s\n"
            "  group_interval: 1s\n"
            "  repeat_interval: 1h\n"
            "receivers:\n"
            "  - name: ongrid\n"
            "    webhook_configs:\n"
            f"      - url: {webhook_url!r}\n"
            "        send_resolved: true\n"
        )
        service = start_service(
            "alertmanager",
            lambda port: [binary, f"--config.file={folder / 'alertmanager.yml'}",
                          f"--storage.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                          "--cluster.listen-address="],
            "/-/ready", folder / "alertmanager.log")
        mine.append(service)
        return service

    yield start
    for service in mine:
        service.stop()


# ---- an Alertmanager webhook receiver running the incidents plugin's route ----


@attrs.define
class AlertSink:
    """A loopback HTTP server whose ``POST /api/alerts/alertmanager`` is the
    incidents plugin's route handler, storing into ``store``.

    ``deliveries``: ``(json body, PluginResponse)`` per call.  ``tools``: the
    plugin's tools on the same store.
    """

    url: str
    store: Any
    tools: dict[str, Any]
    deliveries: list[tuple[Any, Any]] = attrs.field(factory=list)
    _changed: trio.Event = attrs.field(factory=trio.Event)

    @property
    def webhook_url(self) -> str:
        return self.url + "/api/alerts/alertmanager"

    def _delivered(self, body: Any, response: Any) -> None:
        self.deliveries.append((body, response))
        changed, self._changed = self._changed, trio.Event()
        changed.set()

    async def wait_until(self, predicate: Callable[[], Awaitable[bool]]) -> None:
        """Return once ``await predicate()`` is true, re-checking after each delivery.

        Unbounded: wrap it in ``trio.fail_after``.
        """
        while True:
            changed = self._changed
            if await predicate():
                return
            await changed.wait()


def _asgi_app(routes: dict[tuple[str, str], Any], sink_ref: list[AlertSink]) -> Any:
    async def app(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        handler = routes.get((scope["method"], scope["path"]))
        if handler is None:
            status, answer = 404, {"error": "not found"}
        else:
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                parsed = None
            request = PluginRequest(method=scope["method"], path=scope["path"],
                                    headers={k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]},
                                    query=dict(parse_qsl(scope["query_string"].decode("latin-1"))),
                                    json=parsed, user="alertmanager")
            response = await handler(request)
            status, answer = response.status, response.body
            sink_ref[0]._delivered(parsed, response)
        data = json.dumps(answer).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})

    return app


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Any]:
    """A real Store on a temporary SQLite file."""
    from ongridd.store import open_store

    async with open_store(f"sqlite:///{tmp_path / 'ongrid.db'}") as opened:
        yield opened


def incidents_plugin(plugin_store: Any, prometheus_url: str | None = None,
                     ) -> tuple[dict[str, Any], dict[tuple[str, str], Any]]:
    """The incidents plugin's (tools, routes), registered through its hooks."""
    import ongrid_incidents

    from ongridd.config import Config, PrometheusConfig
    from ongridd.plugins.api import PluginContext

    context = PluginContext(config=Config(prometheus=PrometheusConfig(url=prometheus_url)),
                            plugin_name="ongrid_incidents", store=plugin_store)
    tools: dict[str, Any] = {}
    routes: dict[tuple[str, str], Any] = {}
    ongrid_incidents.ongrid_register_tools(register=lambda t: tools.__setitem__(t.name, t), context=context)
    ongrid_incidents.ongrid_register_routes(register=lambda m, p, h: routes.__setitem__((m, p), h), context=context)
    return tools, routes


@pytest.fixture
async def alert_sink(nursery: trio.Nursery, store: Any) -> AsyncIterator[AlertSink]:
    """An :class:`AlertSink` served by hypercorn on a port-0 loopback socket."""
    from hypercorn.config import Config as HypercornConfig
    from hypercorn.trio import serve

    tools, routes = incidents_plugin(store.plugin_store)
    sink_ref: list[AlertSink] = []
    config = HypercornConfig()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 1.0
    config.accesslog = None
    stop = trio.Event()
    binds = await nursery.start(functools.partial(serve, _asgi_app(routes, sink_ref), config,
                                                  shutdown_trigger=stop.wait))
    sink = AlertSink(url=binds[0].rstrip("/"), store=store, tools=tools)
    sink_ref.append(sink)
    yield sink
    stop.set()


@pytest.fixture
def make_incidents_plugin() -> Callable[..., tuple[dict[str, Any], dict[tuple[str, str], Any]]]:
    """:func:`incidents_plugin` as a fixture: ``make_incidents_plugin(store, prometheus_url)``."""
    return incidents_plugin
