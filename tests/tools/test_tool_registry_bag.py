"""Tool registry validation and the tool bags of docs/architecture.md §8."""

from __future__ import annotations

import json

import attrs
import pytest

from ongridd.errors import ToolRegistrationError
from ongridd.tools.bag import ToolBag, coordinator_bag, worker_bag, wrap_tools
from ongridd.tools.registry import ToolRegistry, validate_tool
from ongridd.tools.spec import Proposal, RedirectStub, Tool
from ongridd.tools.stubs import DEFAULT_STUBS, redirect_payload


async def _noop(args, ctx):
    return "ok"


def tool(name, tool_class="read", *, reason=None, describe=True, classify=None, plugin="p1", **kw):
    params = kw.pop("parameters", None) or {"type": "object", "properties": {}}
    params = json.loads(json.dumps(params))
    if reason in ("optional", "required"):
        params["properties"]["reason"] = {"type": "string"}
        if reason == "required":
            params["required"] = ["reason"]
    return Tool(name=name, description=f"{name} tool", parameters=params, handler=_noop, tool_class=tool_class,
                classify=classify, describe=(lambda a: Proposal(action=name, target="x")) if describe else None,
                plugin=plugin, **kw)


@attrs.define
class P:
    name: str
    tools: tuple = ()
    disallowed_tools: tuple = ()
    permission_mode: str = "default"

    @property
    def read_only(self):
        return self.permission_mode == "read-only"


REGISTRY = ToolRegistry([
    tool("query_knowledge"), tool("get_active_incidents"), tool("query_devices"),
    tool("host_du_summary"), tool("host_find_large_files"),
    tool("host_restart_service", "write", reason="required"),
    tool("host_kill_all", "destructive", reason="required"),
    tool("host_bash", "read", reason="optional", classify=lambda a: "read" if a.get("cmd") == "uptime" else "write"),
])
CONTROL = [tool("AgentTool", "control"), tool("SendMessage", "control"), tool("TaskStop", "control")]


# ---- registry ---------------------------------------------------------------

def test_registry_is_an_immutable_mapping():
    assert REGISTRY["host_du_summary"].plugin == "p1"
    assert len(REGISTRY) == 8 and "query_devices" in REGISTRY
    with pytest.raises(TypeError):
        REGISTRY["x"] = tool("x")  # type: ignore[index]
    more = REGISTRY.with_tools([tool("extra", plugin="p2")])
    assert "extra" in more and "extra" not in REGISTRY
    assert "extra" not in more.without_plugin("p2")
    assert more.by_plugin()["p2"] == ["extra"]


def test_duplicate_name_names_both_plugins():
    with pytest.raises(ToolRegistrationError, match="registered by plugin p1 and by plugin p2"):
        REGISTRY.with_tools([tool("query_devices", plugin="p2")])


@pytest.mark.parametrize("bad, message", [
    (dict(name="w", tool_class="write", reason=None), "needs a 'reason' parameter"),
    (dict(name="w", tool_class="write", reason="optional"), "'reason' must be required for a write tool"),
    (dict(name="w", tool_class="destructive", reason="required", describe=False), "needs describe"),
    (dict(name="b", tool_class="read", classify=lambda a: "write", reason=None), "needs a 'reason' parameter"),
    (dict(name="b", tool_class="read", classify=lambda a: "write", reason="optional", describe=False), "needs describe"),
    (dict(name="spawn", tool_class="control"), "reserved for AgentTool, SendMessage, TaskStop"),
    (dict(name="AgentTool", tool_class="read"), "AgentTool must have class 'control'"),
    (dict(name="t", timeout_s=0), "timeout_s must be a positive number"),
    (dict(name="t", timeout_s=float("inf")), "timeout_s must be a positive number"),
    (dict(name="t", parameters={"type": "array"}), "must have \"type\": \"object\""),
    (dict(name="t", parameters={"type": "object", "properties": {"a": {"type": "strin"}}}), "not a valid JSON schema"),
])
def test_invalid_tools_are_refused(bad, message):
    name = bad.pop("name")
    tool_class = bad.pop("tool_class", "read")
    with pytest.raises(ToolRegistrationError, match=message):
        validate_tool(tool(name, tool_class, **bad))


def test_classify_tool_may_have_optional_reason():
    validate_tool(tool("host_bash", "read", reason="optional", classify=lambda a: "read"))


# ---- bags -------------------------------------------------------------------

def test_worker_bag_filters_as_designed():
    persona = P("specialist-ops", tools=("host_du_summary", "host_restart_service", "host_bash", "AgentTool",
                                         "not_registered", "host_find_large_files"),
                disallowed_tools=("host_find_*",))
    bag = worker_bag(persona, REGISTRY)
    assert bag.names() == ("host_du_summary", "host_restart_service", "host_bash")
    assert bag.stubs == {}


def test_read_only_worker_drops_fixed_write_tools_but_keeps_classified_ones():
    persona = P("specialist-disk", tools=("host_du_summary", "host_restart_service", "host_kill_all", "host_bash"),
                permission_mode="read-only")
    assert worker_bag(persona, REGISTRY).names() == ("host_du_summary", "host_bash")


def test_worker_with_no_tools_has_an_empty_bag():
    assert worker_bag(P("reviewer"), REGISTRY).names() == ()


def test_coordinator_bag_adds_control_tools_and_stubs_that_hide_nothing():
    persona = P("default", tools=("query_knowledge", "get_active_incidents", "query_devices", "host_du_summary"))
    stubs = [RedirectStub(tool="host_du_summary", persona="specialist-disk", reason="r"),
             RedirectStub(tool="get_host_load", persona="specialist-compute", reason="r"),
             RedirectStub(tool="get_host_load", persona="specialist-other", reason="second loses"),
             RedirectStub(tool="query_logql", persona="no-such-persona", reason="r")]
    bag = coordinator_bag(persona, REGISTRY, CONTROL, stubs,
                          personas={"specialist-disk", "specialist-compute", "specialist-other"})
    assert bag.names() == ("query_knowledge", "get_active_incidents", "query_devices", "host_du_summary",
                           "AgentTool", "SendMessage", "TaskStop")
    assert list(bag.stubs) == ["get_host_load"]  # no hiding, first wins, target must exist
    assert bag.stubs["get_host_load"].persona == "specialist-compute"
    names = [s["function"]["name"] for s in bag.schemas()]
    assert names[-1] == "get_host_load"
    stub_schema = bag.schemas()[-1]["function"]
    assert stub_schema["parameters"] == {"type": "object", "properties": {}, "additionalProperties": True}
    assert "specialist-compute" in stub_schema["description"]


def test_bag_refuses_stub_hiding_a_tool():
    with pytest.raises(ValueError, match="hide real tools: x"):
        ToolBag(agent="a", tools={"x": tool("x")}, stubs={"x": RedirectStub(tool="x", persona="p", reason="r")})


def test_wrap_tools_wraps_only_tools_that_may_mutate():
    persona = P("specialist-ops", tools=("host_du_summary", "host_restart_service", "host_bash"))
    wrapped = []

    def gate(t):
        wrapped.append(t.name)
        return attrs.evolve(t, timeout_s=75.0)

    bag = wrap_tools(worker_bag(persona, REGISTRY), gate)
    assert wrapped == ["host_restart_service", "host_bash"]
    assert bag.tools["host_restart_service"].timeout_s == 75.0
    assert bag.tools["host_du_summary"].timeout_s == 15.0
    with pytest.raises(ValueError, match="renamed"):
        wrap_tools(bag, lambda t: attrs.evolve(t, name="other"))


# ---- default stubs ----------------------------------------------------------

def test_default_stubs_cover_the_named_tools():
    table = {s.tool: s.persona for s in DEFAULT_STUBS}
    assert table == {
        "host_du_summary": "specialist-disk", "host_find_large_files": "specialist-disk",
        "host_stat_file": "specialist-disk",
        "get_host_load": "specialist-compute", "get_host_processes": "specialist-compute",
        "host_probe_http": "specialist-network", "host_probe_dns": "specialist-network",
        "host_probe_tcp": "specialist-network",
        "host_bash": "specialist-compute", "host_restart_service": "specialist-ops",
        "query_promql": "incident-investigator", "query_logql": "incident-investigator",
        "query_traceql": "incident-investigator",
    }
    assert all(s.reason for s in DEFAULT_STUBS)


def test_redirect_payload_shape():
    body = redirect_payload(DEFAULT_STUBS[0])
    assert list(body) == ["status", "hint", "reason", "suggested_call", "why_stub_exists"]
    assert body["status"] == "redirect"
    assert body["suggested_call"] == ('AgentTool(description="…", subagent_type="specialist-disk", '
                                      'prompt="<self-contained task>")')


def test_bags_accept_the_real_persona_type():
    from ongridd.personas.parse import Persona

    persona = Persona(name="specialist-disk", description="disk", tools=("host_du_summary", "host_restart_service",
                                                                          "host_bash"),
                      permission_mode="read-only", disallowed_tools=("host_b*",))
    assert worker_bag(persona, REGISTRY).names() == ("host_du_summary",)
    coordinator = Persona(name="default", description="coordinator", tools=("query_devices",))
    bag = coordinator_bag(coordinator, REGISTRY, CONTROL, DEFAULT_STUBS)
    assert bag.names() == ("query_devices", "AgentTool", "SendMessage", "TaskStop")
    assert len(bag.stubs) == len(DEFAULT_STUBS)
