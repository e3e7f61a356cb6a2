"""Parsing and validating tool-call arguments (docs/architecture.md §8)."""

from __future__ import annotations

import pytest

from ongridd.errors import ToolArgumentsError
from ongridd.tools.args import canonical_json, parse_arguments, validate_arguments

AGENT_SCHEMA = {
    "type": "object",
    "properties": {
        "description": {"type": "string"},
        "subagent_type": {"type": "string"},
        "prompt": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1},
        "filters": {"type": "object", "properties": {"labels": {"type": "array", "items": {"type": "string"}},
                                                     "since": {"type": "string"}}},
    },
    "required": ["description", "subagent_type", "prompt"],
    "additionalProperties": False,
}


def err(fn, *args) -> str:
    with pytest.raises(ToolArgumentsError) as info:
        fn(*args)
    return str(info.value)


@pytest.mark.parametrize("raw", ["", "   ", "\n\t", None])
def test_empty_arguments_are_an_empty_object(raw):
    assert parse_arguments("cluster_health", raw) == {}


def test_unterminated_string_names_tool_and_problem_with_bounded_preview():
    raw = '{"subagent_type": "specialist-sre", "description": "502s", "prompt": "Check nginx 502 rate on web-1' + "x" * 1000
    message = err(parse_arguments, "AgentTool", raw)
    assert message.startswith("invalid JSON arguments for AgentTool: Unterminated string starting at: line 1 column 70")
    assert f"({len(raw):,} chars)" in message
    assert len(message) < 400


@pytest.mark.parametrize("raw, kind", [("[1, 2]", "array"), ('"text"', "string"), ("3", "integer"),
                                       ("true", "boolean"), ("null", "null"), ("1.5", "number")])
def test_non_object_json_is_refused_with_its_type(raw, kind):
    assert err(parse_arguments, "AgentTool", raw) == (
        f"invalid arguments for AgentTool: arguments must be a JSON object, got {kind}")


@pytest.mark.parametrize("raw", ['{"a": 1,}', "{'a': 1}", '{"a": NaN}', '{"a": Infinity}', "{", '{"a" 1}'])
def test_invalid_json_variants(raw):
    assert err(parse_arguments, "query_promql", raw).startswith("invalid JSON arguments for query_promql: ")


def test_deep_nesting_is_an_error_not_a_crash():
    raw = "[" * 100_000 + "]" * 100_000
    assert "query_promql" in err(parse_arguments, "query_promql", raw)


def test_missing_required_fields_listed_together():
    message = err(validate_arguments, "AgentTool", AGENT_SCHEMA, {"subagent_type": "specialist-sre"})
    assert message == "invalid arguments for AgentTool: missing required field(s): description, prompt"


def test_wrong_types_named_by_field_path():
    args = {"description": "d", "subagent_type": 7, "prompt": "p", "limit": "3",
            "filters": {"labels": ["a", 2]}}
    message = err(validate_arguments, "AgentTool", AGENT_SCHEMA, args)
    assert "field 'subagent_type': expected string, got integer" in message
    assert "field 'limit': expected integer, got string" in message
    assert "field 'filters.labels[1]': expected string, got integer" in message


def test_other_constraints_and_extra_keys():
    args = {"description": "d", "subagent_type": "s", "prompt": "p", "limit": 0, "background": True}
    message = err(validate_arguments, "AgentTool", AGENT_SCHEMA, args)
    assert "field 'limit': 0 is less than the minimum of 1" in message
    assert "'background' was unexpected" in message


def test_null_for_optional_parameter_counts_as_absent():
    args = {"description": "d", "subagent_type": "s", "prompt": "p", "limit": None,
            "filters": {"since": None, "labels": ["x"]}}
    assert validate_arguments("AgentTool", AGENT_SCHEMA, args) == {
        "description": "d", "subagent_type": "s", "prompt": "p", "filters": {"labels": ["x"]}}


def test_null_for_required_parameter_is_a_type_error():
    args = {"description": None, "subagent_type": "s", "prompt": "p"}
    assert "field 'description': expected string, got null" in err(validate_arguments, "AgentTool", AGENT_SCHEMA, args)


def test_many_problems_are_bounded():
    schema = {"type": "object", "properties": {f"f{i}": {"type": "integer"} for i in range(20)}}
    message = err(validate_arguments, "t", schema, {f"f{i}": "x" for i in range(20)})
    assert message.endswith("; and 15 more")


def test_canonical_json_ignores_key_order_and_spacing():
    assert canonical_json({"b": 1, "a": "é"}) == canonical_json({"a": "é", "b": 1}) == '{"a":"é","b":1}'
