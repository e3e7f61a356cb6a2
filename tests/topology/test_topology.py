"""The topology tools on real files: the shipped example, overrides by a
later file, the host inventory, Prometheus targets from a local double of
``/api/v1/targets``, bounds and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import trio

import ongrid_topology
from ongrid_topology import tools as topo_tools
from ongridd.config import Config, HostConfig, PrometheusConfig, TopologyConfig
from ongridd.errors import ToolError
from ongridd.plugins.api import PluginContext

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "etc" / "topology.yaml"
HOSTS = (HOSTS_LOCAL := HostConfig(name="local"),
         HostConfig(name="web-1", address="10.0.0.11", labels={"role": "web"}),
         HostConfig(name="db-2", address="10.0.0.22", labels={"role": "db"}))


def tools_for(files, hosts=HOSTS, prometheus=None):
    cfg = Config(topology=TopologyConfig(files=tuple(str(f) for f in files)),
                 prometheus=PrometheusConfig(url=prometheus))
    ctx = PluginContext(config=cfg, plugin_name="ongrid_topology", hosts=hosts)
    registered = []
    ongrid_topology.ongrid_register_tools(register=registered.append, context=ctx)
    by_name = {t.name: t for t in registered}

    async def call(name, **args):
        jsonschema.Draft202012Validator(by_name[name].parameters).validate(args)
        return await by_name[name].handler(args, None)

    return call


async def test_expand_down_follows_dependencies_to_hosts():
    call = tools_for([EXAMPLE])
    out = await call("expand_topology", node="checkout", direction="down", depth=1)
    assert [n["name"] for n in out["nodes"]] == ["checkout", "host:web-1", "host:web-2", "payments-api",
                                                 "postgres-main", "redis-sessions"]
    assert {"from": "checkout", "to": "postgres-main"} in out["edges"] and out["truncated"] is False
    web1 = next(n for n in out["nodes"] if n["name"] == "host:web-1")
    assert web1 == {"name": "host:web-1", "kind": "host", "labels": {"role": "web"}, "hosts": ["web-1"]}
    deeper = await call("expand_topology", node="checkout", direction="down", depth=2)
    assert "host:db-2" in [n["name"] for n in deeper["nodes"]]


async def test_expand_up_finds_dependents_and_host_names_resolve():
    call = tools_for([EXAMPLE])
    up = await call("expand_topology", node="postgres-main", direction="up", depth=2)
    assert [n["name"] for n in up["nodes"]] == ["postgres-main", "checkout", "payments-api", "edge-lb"]
    host = await call("expand_topology", node="db-2", direction="up", depth=1)
    assert host["root"] == "host:db-2" and [n["name"] for n in host["nodes"]] == ["host:db-2", "postgres-main"]
    with pytest.raises(ToolError, match="closest: checkout"):
        await call("expand_topology", node="checkuot")


async def test_find_by_name_label_and_host():
    call = tools_for([EXAMPLE])
    assert [n["name"] for n in (await call("find_topology_node", query="checkout"))["nodes"]] == ["checkout"]
    team = await call("find_topology_node", query="team=payments")
    assert [n["name"] for n in team["nodes"]] == ["checkout", "payments-api"]
    assert team["edges"] == [{"from": "checkout", "to": "payments-api"}]
    by_host = await call("find_topology_node", query="web-2")
    assert [n["name"] for n in by_host["nodes"]][:1] == ["host:web-2"]
    assert {"checkout", "payments-api"} <= {n["name"] for n in by_host["nodes"]}
    none = await call("find_topology_node", query="nothing-like-this")
    assert none["nodes"] == [] and "no node matches" in none["note"]


async def test_later_file_overrides_node_by_node_and_bad_files_are_named(tmp_path):
    override = tmp_path / "override.yaml"
    override.write_text("nodes:\n  - {name: checkout, kind: service, labels: {team: checkout-team}, hosts: [web-9]}\n"
                        "edges:\n  - {from: checkout, to: ledger}\n")
    call = tools_for([EXAMPLE, override])
    out = await call("expand_topology", node="checkout", direction="down", depth=1)
    names = [n["name"] for n in out["nodes"]]
    assert names[0] == "checkout" and "host:web-9" in names and "host:web-1" not in names
    assert out["nodes"][0]["labels"] == {"team": "checkout-team"}
    assert "ledger" in names and any("ledger" in w for w in out["warnings"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  - {name: x, colour: red}\n")
    with pytest.raises(ToolError, match=r"bad.yaml: nodes\[0\]: unknown key 'colour'"):
        await tools_for([bad])("find_topology_node", query="x")
    with pytest.raises(ToolError, match="missing.yaml"):
        await tools_for([tmp_path / "missing.yaml"])("find_topology_node", query="x")


async def test_expansion_is_bounded(tmp_path, monkeypatch):
    big = tmp_path / "fan.yaml"
    big.write_text(json.dumps({"nodes": [{"name": "hub"}] + [{"name": f"leaf-{i}"} for i in range(300)],
                               "edges": [{"from": "hub", "to": f"leaf-{i}"} for i in range(300)]}))
    out = await tools_for([big], hosts=(HOSTS_LOCAL,))("expand_topology", node="hub", direction="down", depth=1)
    assert len(out["nodes"]) == topo_tools.MAX_EXPAND_NODES and out["truncated"] is True


async def _serve_targets(task_status=trio.TASK_STATUS_IGNORED):
    body = json.dumps({"status": "success", "data": {"activeTargets": [
        {"labels": {"job": "checkout", "instance": "10.0.0.22:9100"}},
        {"labels": {"job": "node", "instance": "web-1:9100"}}], "droppedTargets": []}}).encode()

    async def handle(stream):
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return
            request += chunk
        assert request.startswith(b"GET /api/v1/targets?state=active ")
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


async def test_prometheus_targets_link_jobs_to_hosts(nursery):
    port = await nursery.start(_serve_targets)
    call = tools_for([EXAMPLE], prometheus=f"http://127.0.0.1:{port}")
    out = await call("expand_topology", node="checkout", direction="down", depth=1)
    assert "host:db-2" in [n["name"] for n in out["nodes"]]  # job checkout, instance 10.0.0.22 = db-2
    node = await call("find_topology_node", query="node")
    job = next(n for n in node["nodes"] if n["name"] == "node")
    assert job["kind"] == "job" and job["hosts"] == ["web-1"]


async def test_unreachable_prometheus_is_a_warning_not_a_failure():
    call = tools_for([EXAMPLE], prometheus="http://127.0.0.1:9")
    out = await call("find_topology_node", query="checkout")
    assert [n["name"] for n in out["nodes"]] == ["checkout"]
    assert any("Prometheus targets not merged" in w for w in out["warnings"])
