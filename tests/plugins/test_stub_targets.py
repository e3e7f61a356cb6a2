"""Redirect stubs are checked when the registries are built: a stub whose
persona does not carry the stubbed tool is dropped with a warning."""

from __future__ import annotations

from ongridd.config import Config
from ongridd.plugins import manager
from ongridd.plugins.build import RegistryBuilder
from ongridd.tools.spec import RedirectStub


def test_stubs_point_only_at_personas_that_carry_the_tool(tmp_path):
    result = RegistryBuilder(config=Config(state_dir=str(tmp_path / "state"))).build_sync(extra_paths=[])
    kept = {s.tool: s.persona for s in result.registries.stubs}
    assert kept["query_logql"] == kept["query_traceql"] == kept["query_promql"] == "incident-investigator"
    assert kept["host_bash"] == "specialist-compute"  # read-only, never the persona that changes things
    snapshot = result.registries.agents.snapshot()
    for tool, persona in kept.items():
        assert tool in snapshot[persona].tools, (tool, persona)
    assert not any("redirect stub" in w for w in result.warnings)  # the default stubs all point right
    tools = result.registries.tools
    for name in ("search_logs", "query_logql", "query_traceql", "find_topology_node", "expand_topology"):
        assert name in tools and tools[name].tool_class == "read"


def test_a_stub_whose_persona_lacks_the_tool_is_dropped_with_a_warning(tmp_path, monkeypatch):
    made_up = RedirectStub(tool="made_up_correlator", persona="incident-investigator", reason="test stub")
    unknown = RedirectStub(tool="made_up_other", persona="no-such-persona", reason="test stub")
    monkeypatch.setattr(manager, "DEFAULT_STUBS", manager.DEFAULT_STUBS + (made_up, unknown))
    result = RegistryBuilder(config=Config(state_dir=str(tmp_path / "state"))).build_sync(extra_paths=[])
    kept = {s.tool for s in result.registries.stubs}
    # no plugin registers made_up_correlator, so the investigator cannot run it: dropped, with a warning
    assert "made_up_correlator" not in kept and "made_up_other" not in kept
    assert "query_logql" in kept
    assert any("'made_up_correlator'" in w and "does not carry that tool" in w for w in result.warnings)
    assert any("'made_up_other'" in w and "unknown persona" in w for w in result.warnings)
