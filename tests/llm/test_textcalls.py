"""detect_text_tool_call: tool calls written as text by servers without a
tool parser are recognised; prose is not."""

from __future__ import annotations

import pytest

from ongridd.llm.textcalls import detect_text_tool_call

POSITIVE = [
    # the scripted model's fault step (docs/architecture.md §16)
    ('<tool_call>{"name": "get_host_load"}</tool_call>', "get_host_load"),
    # Hermes / Qwen
    ('<tool_call>\n{"name": "query_devices", "arguments": {"role": "web"}}\n</tool_call>', "query_devices"),
    ('Let me check.\n<tool_call>\n{"name": "get_active_incidents", "arguments": {}}\n</tool_call>', "get_active_incidents"),
    ('<tool_call>\n{"name": "AgentTool", "arguments": {"prompt": "unterminated', "AgentTool"),  # cut
    ("<tool_call>\n", "?"),
    # bare JSON as the whole content
    ('{"name": "host_du_summary", "arguments": {"paths": ["/var"]}}', "host_du_summary"),
    ('  {"type": "function", "name": "query_incidents", "parameters": {"status": "firing"}}  ', "query_incidents"),
    ('{"type": "function", "function": {"name": "query_alert_rules", "arguments": "{}"}}', "query_alert_rules"),
    ('{"tool_calls": [{"function": {"name": "query_devices", "arguments": "{}"}}]}', "query_devices"),
    ('[{"name": "a_tool", "arguments": {}}, {"name": "b_tool", "arguments": {}}]', "a_tool"),
    ('{"action": "query_knowledge", "action_input": "disk full runbook"}', "query_knowledge"),
    ('{"name": 42, "arguments": {}}', "?"),
    # fenced
    ('```json\n{"name": "query_change_events", "arguments": {"since": "1h"}}\n```', "query_change_events"),
    ('```\n{"name": "query_devices", "arguments": {}}\n```', "query_devices"),
    # special tokens
    ('<|tool_call|>{"name": "get_host_load", "arguments": {}}', "get_host_load"),
    ('<|python_tag|>{"name": "query_devices", "parameters": {"role": "db"}}', "query_devices"),
    ("<|python_tag|>brave_search.call(query=\"nginx 502\")", "brave_search"),
    ('[TOOL_CALLS][{"name": "host_du_summary", "arguments": {"paths": ["/"]}}]', "host_du_summary"),
    ('[TOOL_CALLS]host_du_summary[ARGS]{"paths": ["/"]}', "host_du_summary"),
    ('<function=query_incidents>{"status": "firing"}</function>', "query_incidents"),
    (
        (
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
            '{"location": "Tokyo"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
        ),
        "get_weather",
    ),
    ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"location": "Tokyo"}<｜tool▁call▁end｜>', "get_weather"),
    (
        (
            "<|tool_calls_section_begin|> <|tool_call_begin|> functions.query_devices:0 "
            '<|tool_call_argument_begin|> {"role": "web"} <|tool_call_end|>'
        ),
        "query_devices",
    ),
    ("✿FUNCTION✿: query_knowledge\n✿ARGS✿: {\"q\": \"disk\"}", "query_knowledge"),
]

NEGATIVE = [
    "",
    "   ",
    "The disk on web-1 is 93% full; /var/log/nginx holds 41 GB.",
    'The API returned {"name": "web-1", "status": "ok"} for the host.',
    '{"name": "web-1", "status": "ok", "disk_pct": 93}',
    '```json\n{"hosts": [{"name": "web-1"}, {"name": "web-2"}]}\n```',
    "Here is the payload format: ```json\n{\"name\": \"x\", \"arguments\": {}}\n``` — use it in your config.",
    "Some servers print `<tool_call>` tags instead of calling the tool.",
    "The model emitted <tool_call> tags instead of calling the tool.",
    "Use the [TOOL_CALLS] token docs for Mistral.",
    "The model printed <tool_call> tags",
    "Mistral models start a call with [TOOL_CALLS]\nthen a JSON list.",
    '{"name": "nginx", "arguments": {}, "version": "1.25"}',  # a config object, not a call
    "[1, 2, 3]",
    "{not json at all}",
]


@pytest.mark.parametrize("content,name", POSITIVE)
def test_recognises_text_tool_calls(content, name):
    assert detect_text_tool_call(content) == name


@pytest.mark.parametrize("content", NEGATIVE)
def test_ordinary_prose_is_not_a_tool_call(content):
    assert detect_text_tool_call(content) is None


def test_known_tool_names_catch_a_call_with_prose_around_it():
    text = 'I will look at the incidents now.\n```json\n{"name": "get_active_incidents", "arguments": {}}\n```'
    assert detect_text_tool_call(text) is None
    assert detect_text_tool_call(text, tool_names={"get_active_incidents"}) == "get_active_incidents"
    inline = 'Calling {"name": "query_devices", "arguments": {"role": "db"}} now'
    assert detect_text_tool_call(inline, tool_names=["query_devices"]) == "query_devices"
    # ... but not a name the model was not offered
    assert detect_text_tool_call(inline, tool_names=["get_active_incidents"]) is None


def test_none_and_non_string_are_not_calls():
    assert detect_text_tool_call(None) is None
    assert detect_text_tool_call(123) is None  # type: ignore[arg-type]


def test_json_nested_past_what_the_reader_takes_is_no_call_and_no_error():
    # a model's answer is data: nesting too deep for json (RecursionError) reads as no JSON at all
    deep = "[" * 5000 + "]" * 5000
    assert detect_text_tool_call(deep) is None
    assert detect_text_tool_call("```json\n" + deep + "\n```") is None
    assert detect_text_tool_call('{"name": "x", "arguments": ' + deep + "}") is None
