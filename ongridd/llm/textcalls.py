"""Recognise a tool call that a model wrote as text.

A server without a tool-call parser (a llama.cpp or vLLM server started
without ``--jinja``/``--tool-call-parser``, an Ollama model template without
tools) hands back the model's tool-call *text* as ordinary ``content``.  Taken
at face value it would end the run with garbage as the final answer; the
kernel instead answers the model with a hint (use the tools API, not text).

Formats recognised:

* Hermes / Qwen ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``
  (also unterminated, and ``<tool_calls>``, ``<function_call>``);
* special-token markers: ``<|tool_call|>``, ``<|tool_calls|>``,
  ``<|tool_call_begin|>``, ``<|python_tag|>`` (Llama 3), ``[TOOL_CALLS]``
  (Mistral, JSON list or ``name[ARGS]{...}``), DeepSeek's
  ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>name``, ``<function=name>``
  (Llama 3 custom tools), ``<|plugin|>`` (InternLM), ``✿FUNCTION✿: name``
  (Qwen-Agent);
* a bare JSON tool call as the whole content: ``{"name": ..., "arguments"|
  "parameters": ...}``, ``{"type": "function", "function": {...}}``,
  ``{"tool_calls": [...]}``, ``{"action": ..., "action_input": ...}``, or a
  list of those;
* the same JSON as the whole content inside a ```` ```json ```` fence.

Prose that merely mentions JSON, or shows a marker inside an inline code
span, is not a tool call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any

UNKNOWN = "?"

_NAME = r"[A-Za-z_][\w.\-]{0,127}"

# Marker → how the name follows it.  Order matters only for speed.
_MARKERS: tuple[re.Pattern[str], ...] = (
    re.compile(r"<tool_call>|<tool_calls>|<function_call>", re.IGNORECASE),
    re.compile(r"<\|tool_calls?(?:_begin|_section_begin)?\|>|<\|python_tag\|>|\[TOOL_CALLS\]|<\|plugin\|>"),
    re.compile(r"<｜tool▁calls?▁begin｜>"),
)
_FUNCTION_TAG = re.compile(r"<function=(" + _NAME + r")>")
_QWEN_AGENT = re.compile(r"✿FUNCTION✿\s*:\s*(" + _NAME + r")")
# DeepSeek V3 ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME`` and V3.1
# ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>``.
_DEEPSEEK_CALL = re.compile(r"<｜tool▁call▁begin｜>\s*(?:function\s*<｜tool▁sep｜>\s*)?(" + _NAME + r")")
# Kimi K2: ``<|tool_call_begin|> functions.NAME:0 <|tool_call_argument_begin|>``.
_KIMI_CALL = re.compile(r"<\|tool_call_begin\|>\s*(?:functions\.)?([A-Za-z_][\w\-]*)(?::\d+)?")
_MISTRAL_ARGS = re.compile(r"\[TOOL_CALLS\]\s*(" + _NAME + r")\s*\[ARGS\]")
_PYTHON_CALL = re.compile(r"^\s*(" + _NAME + r")\.call\(")
_NAME_FIELD = re.compile(r'"(?:name|tool_name|action)"\s*:\s*"([^"\\]{1,128})"')
_INLINE_CODE = re.compile(r"``[^`]*``|`[^`\n]*`")
_FENCE = re.compile(r"^```[ \t]*([A-Za-z_\-]*)[ \t]*\n(.*?)\n?```$", re.DOTALL)
_ANY_FENCE = re.compile(r"```[ \t]*([A-Za-z_\-]*)[ \t]*\n(.*?)\n?```", re.DOTALL)
_FENCE_LANGS = {"", "json", "json5", "tool_call", "tool_code", "tool"}


def detect_text_tool_call(content: str | None, tool_names: Collection[str] | None = None) -> str | None:
    """Return the tool name a text-written tool call tried, else ``None``.

    ``content``: the assistant message text.  ``tool_names``: optional names
    of the tools offered; when given, a JSON tool call (bare or fenced) naming
    one of them counts even with prose around it.  Returns the name the model
    tried (``"?"`` when the format is clear but the name cannot be read), or
    ``None`` when the content is not a tool call.  Never raises.
    """
    if not content or not isinstance(content, str):
        return None
    text = content.strip()
    if not text:
        return None

    # 1. Special-token / tag markers (ignoring inline code spans in prose).
    scan = _INLINE_CODE.sub(" ", text)
    found = _from_markers(scan)
    if found is not None:
        return found

    # 2. The whole content is a JSON tool call, bare or fenced.
    whole = _from_json_text(text)
    if whole is not None:
        return whole
    fence = _FENCE.match(text)
    if fence and fence.group(1).lower() in _FENCE_LANGS:
        inner = _from_json_text(fence.group(2).strip())
        if inner is not None:
            return inner

    # 3. With the offered tool names known: a JSON call naming one of them
    #    anywhere in a fenced block or as a trailing JSON object.
    if tool_names:
        known = set(tool_names)
        for match in _ANY_FENCE.finditer(text):
            if match.group(1).lower() in _FENCE_LANGS:
                name = _from_json_text(match.group(2).strip())
                if name in known:
                    return name
        start = text.find("{")
        while start != -1:
            name = _call_name(_decode_at(text, start))
            if name in known:
                return name
            start = text.find("{", start + 1)
    return None


def _from_markers(text: str) -> str | None:
    match = _FUNCTION_TAG.search(text)
    if match:
        return match.group(1)
    match = _QWEN_AGENT.search(text)
    if match:
        return match.group(1)
    for pattern in _MARKERS:
        marker = pattern.search(text)
        if marker is None:
            continue
        rest = text[marker.end():]
        if not _looks_like_call_after_marker(text, marker.start(), rest):
            continue
        for specific in (_DEEPSEEK_CALL, _KIMI_CALL):
            match = specific.search(text[marker.start():])
            if match:
                return match.group(1)
        match = _MISTRAL_ARGS.search(text[marker.start():])
        if match:
            return match.group(1)
        match = _PYTHON_CALL.match(rest)
        if match:
            return match.group(1)
        brace = _first_json_start(rest)
        if brace is not None:
            name = _call_name(_decode_at(rest, brace))
            if name is not None:
                return name
            match = _NAME_FIELD.search(rest)
            if match:
                return match.group(1)
        return UNKNOWN
    return None


def _looks_like_call_after_marker(text: str, start: int, rest: str) -> bool:
    """A marker counts when a payload follows it: JSON, a name, or a
    DeepSeek ``function<｜tool▁sep｜>`` — not when prose merely names it."""
    head = rest.lstrip()
    if not head:
        # A bare trailing marker on a line of its own: the model started a
        # call and was cut.  At the end of a sentence it is only a mention.
        return start == 0 or text[start - 1] == "\n"
    if head[0] in "{[<":
        return True
    return re.match(_NAME + r"\s*(\[ARGS\]|\.call\(|<｜tool▁sep｜>|\{)", head) is not None


def _first_json_start(text: str) -> int | None:
    """Where the payload JSON starts: the first ``{``/``[`` within a short
    prefix (a fence opener, a ``function`` word), else None."""
    match = re.search(r"[{\[]", text[:200])
    return match.start() if match else None


def _decode_at(text: str, start: int) -> Any:
    try:
        value, _ = json.JSONDecoder().raw_decode(text, start)
    except (ValueError, RecursionError):  # not JSON; nested past what the reader takes
        return None
    return value


def _from_json_text(text: str) -> str | None:
    if not text or text[0] not in "{[":
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return _call_name(value)


def _call_name(value: Any) -> str | None:
    """The tool name if ``value`` has the shape of a tool call, else None."""
    if isinstance(value, list):
        if not value:
            return None
        names = [_call_name(item) for item in value]
        if any(n is None for n in names):
            return None
        return names[0]
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("tool_calls"), list):
        return _call_name(value["tool_calls"])
    function = value.get("function")
    if isinstance(function, dict) and "name" in function and value.get("type") in (None, "function"):
        return _name_of(function.get("name"))
    args_keys = ("arguments", "parameters", "args", "tool_input", "input")
    if "name" in value and any(k in value for k in args_keys):
        if set(value) - {"name", "type", "id", *args_keys}:
            return None  # an ordinary object that happens to have these keys and more
        return _name_of(value.get("name"))
    if "tool_name" in value and any(k in value for k in args_keys):
        return _name_of(value.get("tool_name"))
    if "action" in value and "action_input" in value:
        return _name_of(value.get("action"))
    return None


def _name_of(value: Any) -> str:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return UNKNOWN
