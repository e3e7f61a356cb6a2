"""Redirect stubs are checked when the registries are built: a stub whose
persona does not carry the stubbed tool is dropped with a warning."""

from __future__ import annotations

from ongridd.config import Config
from ongridd.plugins.build import RegistryBuilder


def test_stubs_point_only_at_personas_that_carry_the_tool(tmp_path):
    result = RegistryBuilder(config=Config(state_dir=str(tmp_path / "state"))).build_sync(extra_paths=[])
    kept = {s.tool: s.persona for s in result.registries.stubs}
    assert kept["query_logql"] == kept["query_traceql"] == kept["query_promql"] == "incident-investigator"
    assert kept["host_bash"] == "specialist-compute"  # read-only, never the persona that changes things
    snapshot = result.registries.agents.snapshot()
    for tool, persona in kept.items():
        assert tool in snapshot[persona].tools, (tool, persona)
    # no plugin registers correlate_incident, so the investigator cannot run it: dropped, with a warning
    assert "correlate_incident" not in kept
    assert any("'correlate_incident'" in w and "does not carry that tool" in w for w in result.warnings)
    tools = result.registries.tools
    for name in ("search_logs", "query_logql", "query_traceql", "find_topology_node", "expand_topology"):
        assert name in tools and tools[name].tool_class == "read"
