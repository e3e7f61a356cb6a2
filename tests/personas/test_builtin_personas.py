"""The eight built-in personas in agents/ and the sample user agent in etc/agents/."""

from __future__ import annotations

import re

import attrs
import pytest

from ongridd.personas import (
    AgentRegistry,
    SkillRegistry,
    agent_catalog,
    builtin_agents_dir,
    parse_persona_text,
    persona_to_text,
)

BUILTINS = ["default", "incident-investigator", "reviewer", "specialist-compute", "specialist-disk",
            "specialist-network", "specialist-ops", "specialist-sre"]
COORDINATOR_TOOLS = ("query_knowledge", "get_active_incidents", "query_incidents", "get_incident_detail",
                     "query_alert_rules", "query_devices", "query_change_events", "find_topology_node",
                     "expand_topology")
WRITE_TOOLS = {"ack_incident", "host_restart_service"}


@pytest.fixture
def builtins(known_tools):
    registry = AgentRegistry(builtin_agents_dir())
    report = registry.load([], known_tools=known_tools, known_skills=set())
    return registry, report


def test_builtins_load_with_zero_warnings(builtins):
    registry, report = builtins
    assert report.warnings == ()
    assert (report.loaded, report.skipped) == (8, 0)
    assert list(registry.snapshot()) == BUILTINS


def test_every_builtin_file_is_named_after_its_persona(builtins):
    registry, _ = builtins
    for persona in registry.snapshot().values():
        assert persona.source.endswith(f"/{persona.name}.md")


def test_coordinator(builtins):
    registry, _ = builtins
    default = registry.by_name("default")
    assert default.tools == COORDINATOR_TOOLS
    assert default.read_only
    for phrase in ("one or two", "5+", "several hosts", "never trivia", "incident id", "the user's own words"):
        assert phrase in default.body + (default.critical_reminder or ""), phrase


def test_incident_investigator(builtins):
    registry, _ = builtins
    p = registry.by_name("incident-investigator")
    assert p.tool_budget == 18 and p.read_only
    assert "patient zero" in p.body
    assert "fails or returns nothing twice, change direction" in (p.critical_reminder or "")
    for section in ("## Root cause", "## Causal chain", "## Symptoms", "## Confidence and how to verify"):
        assert section in p.body


def test_reviewer(builtins):
    registry, _ = builtins
    p = registry.by_name("reviewer")
    assert set(p.tools) == {"query_knowledge", "get_active_incidents", "get_incident_detail",
                            "query_change_events", "query_promql"}
    assert p.read_only
    text = p.body + (p.critical_reminder or "")
    assert "Decision: approve" in text and "Decision: reject" in text
    assert "Reject by default" in text
    for gate in ("runbook", "parallel operation", "rollback"):
        assert gate in text


def test_specialists_are_read_only_except_ops(builtins):
    registry, _ = builtins
    for p in registry.snapshot().values():
        if p.name == "specialist-ops":
            assert p.permission_mode == "default"
            assert {"host_restart_service", "host_bash"} <= set(p.tools)
            assert "review gate" in p.body
        else:
            assert p.read_only, p.name
            assert not WRITE_TOOLS & set(p.tools), p.name


def test_workers_never_list_control_tools_and_every_persona_says_when_to_use(builtins):
    registry, _ = builtins
    for p in registry.snapshot().values():
        assert p.when_to_use and len(p.when_to_use) > 20, p.name
        assert "\n" not in p.description
        assert p.tool_budget is not None and p.tool_budget <= 18
        if p.name != "default":
            assert not {"AgentTool", "SendMessage", "TaskStop"} & set(p.tools)


def test_no_builtin_mentions_an_async_dispatch_flag(repo):
    for path in sorted((repo / "agents").glob("*.md")) + sorted((repo / "etc").rglob("*.md")):
        assert not re.search(r"\bbackground\b", path.read_text(encoding="utf-8"), re.IGNORECASE), path


def test_catalog_of_builtins(builtins):
    registry, _ = builtins
    catalog = agent_catalog(registry.snapshot().values())
    names = re.findall(r"^- \*\*([^*]+)\*\* — ", catalog, re.MULTILINE)
    assert names == ["incident-investigator", "specialist-compute", "specialist-disk", "specialist-network",
                     "specialist-ops", "specialist-sre"]
    assert all(" When to use: " in line for line in catalog.splitlines())


def test_builtins_round_trip_through_persona_to_text(builtins, known_tools):
    registry, _ = builtins
    for p in registry.snapshot().values():
        again, warnings = parse_persona_text(persona_to_text(p), "x.md", known_tools=known_tools)
        assert warnings == [] and again == attrs.evolve(p, source="x.md"), p.name


def test_sample_user_agent_adds_a_persona_and_uses_the_sample_skill(repo, known_tools):
    skills = SkillRegistry()
    assert skills.load([repo / "etc" / "skills"]).warnings == ()
    registry = AgentRegistry(builtin_agents_dir())
    report = registry.load([repo / "etc" / "agents"], known_tools=known_tools,
                           known_skills=set(skills.snapshot()))
    assert report.warnings == () and report.skipped == 0
    p = registry.by_name("specialist-postgres")
    assert p.read_only and p.skills == ("cite-runbooks",) and p.metadata["owner"] == "dba-team"
    assert len(registry.snapshot()) == 9
