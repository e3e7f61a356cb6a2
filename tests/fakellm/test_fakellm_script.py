"""Loading and validating scripted-model scripts: clear errors naming the
file, the line, the persona and the step."""

from __future__ import annotations

import pytest

from ongridd.errors import ConfigError
from ongridd.fakellm.script import (
    Script,
    ScriptError,
    coerce_script,
    load_script,
    parse_script,
)

DESIGN_EXAMPLE = """\
default:
  - tool_calls: [{name: AgentTool, arguments: {description: "...", subagent_type: specialist-disk, prompt: "Look at ${DEMO_DIR}"}}]
  - content_from_tool_results: true
specialist-disk:
  - tool_calls: [{name: host_du_summary, arguments: {paths: ["${DEMO_DIR}"], depth: 1}}]
  - content: "final answer"
faults:
  - tool_calls: [{name: AgentTool, raw_arguments: '{"subagent_type": "specialist-disk",'}]  # not JSON
  - content: "checking"                  # text and tool calls in one message
    tool_calls: [{name: get_active_incidents, arguments: {}}]
  - finish_reason: length                # cut in the middle of a tool call
    tool_calls: [{name: get_active_incidents, raw_arguments: '{"lim'}]
  - delay_s: 2.5                         # wait before answering
    content: "late"
  - http_status: 500                     # answer with this HTTP error (the step is used up)
  - content: "<tool_call>{\\"name\\": \\"get_host_load\\"}</tool_call>"   # a tool call written as text
"""


def test_design_example_loads(tmp_path):
    path = tmp_path / "script.yaml"
    path.write_text(DESIGN_EXAMPLE, encoding="utf-8")
    script = load_script(path)
    assert script.source == str(path)
    assert {k: len(v) for k, v in script.personas.items()} == {"default": 2, "specialist-disk": 2, "faults": 6}
    agent_call = script.personas["default"][0].tool_calls[0]
    assert agent_call.name == "AgentTool" and agent_call.arguments["prompt"] == "Look at ${DEMO_DIR}"
    assert script.personas["default"][1].content_from_tool_results is True
    faults = script.personas["faults"]
    assert faults[0].tool_calls[0].raw_arguments == '{"subagent_type": "specialist-disk",'
    assert faults[1].content == "checking" and faults[1].tool_calls[0].arguments == {}
    assert faults[2].finish_reason == "length"
    assert faults[3].delay_s == 2.5 and type(faults[3].delay_s) is float
    assert faults[4].http_status == 500
    assert faults[5].content == '<tool_call>{"name": "get_host_load"}</tool_call>'
    assert script.variables() == {"DEMO_DIR"}
    assert [s.index for s in faults] == list(range(6))
    assert faults[2].line == 11  # 1-based line of the step in the file


def _error(text: str) -> str:
    with pytest.raises(ScriptError) as info:
        parse_script(text, source="s.yaml")
    assert isinstance(info.value, ConfigError)
    return str(info.value)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("default:\n  - content: ok\n  - contnet: typo\n", ["s.yaml:3", "persona 'default' step 1", "'contnet'"]),
        ("default:\n  - http_status: 500\n    content: x\n", ["s.yaml:2", "step 0", "http_status", "content"]),
        ("default:\n  - http_status: 200\n", ["step 0", "400..599"]),
        ("default:\n  - http_status: true\n", ["step 0", "http_status"]),
        ("default:\n  - delay_s: -1\n    content: x\n", ["step 0", "delay_s"]),
        ("default:\n  - delay_s: '2'\n    content: x\n", ["step 0", "delay_s"]),
        ("default:\n  - delay_s: 1\n", ["step 0", "needs content"]),
        ("default:\n  - finish_reason: lenght\n    content: x\n", ["step 0", "finish_reason", "'lenght'"]),
        ("default:\n  - content: 42\n", ["step 0", "content must be a string"]),
        ("default:\n  - content: x\n    content_from_tool_results: true\n", ["step 0", "cannot be used together"]),
        ("default:\n  - content_from_tool_results: 'yes'\n", ["step 0", "true, false, reports or markdown", "'yes'"]),
        ("default:\n  - tool_calls: []\n", ["step 0", "non-empty list"]),
        ("default:\n  - tool_calls: [{arguments: {}}]\n", ["step 0 tool_calls[0]", "name"]),
        ("default:\n  - tool_calls: [{name: a, arguments: {}, raw_arguments: '{}'}]\n", ["tool_calls[0]", "not both"]),
        ("default:\n  - tool_calls: [{name: a, raw_arguments: {x: 1}}]\n", ["tool_calls[0]", "raw_arguments must be a string"]),
        ("default:\n  - tool_calls: [{name: a, args: {}}]\n", ["tool_calls[0]", "'args'"]),
        ("default:\n  - tool_calls: [{name: a, arguments: {when: 2024-01-01}}]\n", ["tool_calls[0]", "JSON"]),
        ("default:\n  - just a string\n", ["step 0", "must be a mapping"]),
        ("default: {content: x}\n", ["s.yaml:1", "persona 'default'", "list of steps"]),
        ("default:\n", ["persona 'default'", "list of steps, got null"]),
        ("- content: x\n", ["s.yaml", "mapping of persona name"]),
        ("", ["s.yaml", "empty"]),
        ("default:\n  - content: 'unterminated\n", ["s.yaml:", "invalid YAML"]),
        ("default:\n  - content: a\ndefault:\n  - content: b\n", ["s.yaml:3", "invalid YAML"]),
        ("1:\n  - content: x\n", ["persona name must be a non-empty string"]),
    ],
)
def test_malformed_scripts_give_clear_errors(text, expected):
    message = _error(text)
    for part in expected:
        assert part in message, (part, message)


def test_every_problem_is_reported_at_once():
    message = _error(
        "default:\n  - content: ok\n  - contnet: x\nspecialist-disk:\n  - http_status: 99\n"
    )
    assert "persona 'default' step 1" in message and "persona 'specialist-disk' step 0" in message


def test_missing_and_undecodable_files(tmp_path):
    with pytest.raises(ScriptError, match="not found"):
        load_script(tmp_path / "nope.yaml")
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"default:\n  - content: caf\xe9\n")
    with pytest.raises(ScriptError, match="latin1.yaml"):
        load_script(bad)


def test_coerce_accepts_mapping_path_and_script(tmp_path):
    script = coerce_script({"default": [{"content": "x"}]})
    assert isinstance(script, Script) and coerce_script(script) is script
    path = tmp_path / "s.yaml"
    path.write_text("\ufeffdefault:\n  - content: bom ok\r\n", encoding="utf-8")
    assert coerce_script(str(path)).personas["default"][0].content == "bom ok"
    with pytest.raises(ScriptError, match="<mapping>"):
        coerce_script({"default": [{"nope": 1}]})


def test_yaml_1_2_strings_stay_strings():
    script = parse_script("default:\n  - content: yes\n  - content: 'no'\n")
    assert [s.content for s in script.personas["default"]] == ["yes", "no"]
