"""The fixture registry (first match wins, equal values, 'no recording',
real handlers never called) and suite loading (bounded, strict, named errors)."""

from __future__ import annotations

import json

import pytest

from ongridd.errors import ToolError
from ongridd.evals import builtin_suite_dir
from ongridd.evals.fixtures import NO_RECORDING, fixture_tools, lookup
from ongridd.evals.suite import MAX_FILE_BYTES, Fixture, IncidentError, load_incident, load_suite
from ongridd.fakellm.script import load_script
from ongridd.tools.spec import Tool, ToolCallContext

CTX = ToolCallContext(session_id="s", agent="specialist-disk")
FIXTURES = (
    Fixture(tool="host_du_summary", match={"host": "db-2", "paths": ["/var"]}, result={"which": "db-2 /var"}),
    Fixture(tool="host_du_summary", match={"host": "db-2"}, result={"which": "db-2 any"}),
    Fixture(tool="host_du_summary", result="any host"),
    Fixture(tool="host_probe_dns", match={"server": "10.0.0.2"}, error="no answer from DNS server 10.0.0.2:53"),
    Fixture(tool="search_logs", match={"pattern": "OOM"}, result={"hits": []}),
)


def test_lookup_first_match_on_equal_values():
    assert lookup(FIXTURES, "host_du_summary", {"host": "db-2", "paths": ["/var"], "depth": 2}).result == {
        "which": "db-2 /var"}
    assert lookup(FIXTURES, "host_du_summary", {"host": "db-2", "paths": ["/srv"]}).result == {"which": "db-2 any"}
    assert lookup(FIXTURES, "host_du_summary", {"host": "db-20"}).result == "any host"
    assert lookup(FIXTURES, "search_logs", {"pattern": "oom"}) is None  # equal means equal
    assert lookup(FIXTURES, "host_stat_file", {}) is None


def _real_tool(name, touched, tool_class="read"):
    async def handler(args, ctx):
        touched.append(name)
        return "REAL"

    def classify(args):
        touched.append(f"classify {name}")
        return "read"

    return Tool(name=name, description=f"real {name}", handler=handler, tool_class=tool_class, classify=classify,
                parameters={"type": "object", "properties": {"host": {"type": "string"}}})


async def test_real_handlers_are_never_called_and_unrecorded_calls_error():
    touched = []
    real = {n: _real_tool(n, touched) for n in ("host_du_summary", "host_bash", "host_probe_dns")}
    tools = fixture_tools(real, FIXTURES)
    assert set(tools) == {"host_du_summary", "host_bash", "host_probe_dns", "search_logs"}
    assert tools["host_du_summary"].description == "real host_du_summary"  # what the model sees is unchanged
    assert tools["host_du_summary"].parameters == real["host_du_summary"].parameters
    assert tools["host_bash"].classify is None
    assert await tools["host_du_summary"].handler({"host": "db-2"}, CTX) == {"which": "db-2 any"}
    with pytest.raises(ToolError) as exc:
        await tools["host_bash"].handler({"host": "db-2", "cmd": "rm -rf /"}, CTX)
    assert str(exc.value).startswith(f"{NO_RECORDING} for host_bash with arguments ")
    assert '"cmd": "rm -rf /"' in str(exc.value) and "nothing was run" in str(exc.value)
    with pytest.raises(ToolError, match="no answer from DNS server"):
        await tools["host_probe_dns"].handler({"name": "x", "server": "10.0.0.2"}, CTX)
    assert await tools["search_logs"].handler({"pattern": "OOM", "limit": None}, CTX) == {"hits": []}
    assert touched == []


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


GOOD = """name: {name}
question: "why?"
fixtures:
  - {{tool: host_du_summary, match: {{host: db-2}}, result: {{a: 1}}}}
expected:
  root_cause: [db-2]
  max_tool_calls: 3
"""


def test_suite_loads_yaml_files_only_directly_in_the_folder(tmp_path):
    _write(tmp_path, "b.yaml", GOOD.format(name="b"))
    _write(tmp_path, "a.yaml", GOOD.format(name="a"))
    (tmp_path / "scripts").mkdir()
    _write(tmp_path / "scripts", "c.yaml", GOOD.format(name="c"))
    _write(tmp_path, "notes.txt", "not an incident")
    assert [i.name for i in load_suite(tmp_path)] == ["a", "b"]
    assert [i.name for i in load_suite(tmp_path, ["b"])] == ["b"]
    with pytest.raises(IncidentError, match="no incident named zz"):
        load_suite(tmp_path, ["zz"])


@pytest.mark.parametrize("text, message", [
    ("name: x\nquestion: q\nexpected: {root_cause: []}\n", "at least one entity"),
    ("name: 'bad name'\nquestion: q\nexpected: {root_cause: [a]}\n", "name must be"),
    ("name: x\nexpected: {root_cause: [a]}\n", "question"),
    ("name: x\nquestion: q\nexpected: {root_cause: [a], max_tool_calls: -1}\n", "max_tool_calls"),
    ("name: x\nquestion: q\nfixtures: [{tool: t}]\nexpected: {root_cause: [a]}\n", "exactly one of result or error"),
    ("name: x\nquestion: q\nscript: /etc/passwd\nexpected: {root_cause: [a]}\n", "relative"),
    ("name: x\nquestion: q\nexpected: {root_cause: [a]}\nextra: 1\n", "unknown keys"),
    ("name: x\nquestion: [\n", "invalid YAML"),
    ("- a list\n", "mapping"),
])
def test_bad_incidents_name_the_file(tmp_path, text, message):
    p = _write(tmp_path, "x.yaml", text)
    with pytest.raises(IncidentError, match=message) as exc:
        load_incident(p)
    assert str(p) in str(exc.value)


def test_oversized_and_duplicate(tmp_path):
    big = _write(tmp_path, "big.yaml", GOOD.format(name="big") + "#" * MAX_FILE_BYTES)
    with pytest.raises(IncidentError, match="is too large"):
        load_incident(big)
    big.unlink()
    _write(tmp_path, "one.yaml", GOOD.format(name="same"))
    _write(tmp_path, "two.yaml", GOOD.format(name="same"))
    with pytest.raises(IncidentError, match="also used by"):
        load_suite(tmp_path)


def test_builtin_suite_is_complete():
    incidents = load_suite(builtin_suite_dir())
    assert len(incidents) >= 30
    for inc in incidents:
        assert inc.script is not None and inc.script.is_file(), inc.name
        script = load_script(inc.script)
        assert "default" in script.personas, inc.name
        assert inc.fixtures and inc.max_tool_calls is not None, inc.name
        for f in inc.fixtures:
            json.dumps(f.result)  # plain JSON
    prefixes = {inc.name.split("-")[0] for inc in incidents}
    assert {"disk", "mem", "cpu", "net", "svc"} <= prefixes
