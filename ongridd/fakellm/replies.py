"""What the scripted model answers for one step, in OpenAI wire shapes.

Pure functions (no I/O): :func:`make_reply` turns a step and the request's
messages into a :class:`Reply`; :func:`completion_body` and
:func:`stream_bodies` render it as a ``chat.completion`` or as the
``chat.completion.chunk`` sequence of an SSE stream, with the fixed chunking
of docs/fake-llm.md: content in chunks of 16 characters, tool-call arguments in
chunks of 8 characters, the calls of one step interleaved by index (call 0
chunk 1, call 1 chunk 1, call 0 chunk 2, ...), id/type/name only on a call's
first chunk, ids ``call_<step>_<index>``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from ongridd.fakellm.layout import lay_out
from ongridd.fakellm.script import Step, substitute

CONTENT_CHUNK_CHARS = 16
ARGUMENTS_CHUNK_CHARS = 8
NO_TOOL_RESULTS = "(no tool results since the previous step)"


@attrs.frozen(kw_only=True)
class ReplyCall:
    id: str
    name: str
    arguments: str


@attrs.frozen(kw_only=True)
class Reply:
    """One assistant answer: ``content`` (``None``: no text), tool calls with
    their raw argument text, and the finish reason."""

    content: str | None
    tool_calls: tuple[ReplyCall, ...]
    finish_reason: str


def make_reply(step: Step, messages: Sequence[Any], env: Mapping[str, str]) -> Reply:
    """The answer of ``step`` to a request carrying ``messages``.

    ``${NAME}`` is substituted from ``env`` everywhere.  Raises
    :class:`~ongridd.fakellm.script.MissingVariable` for an unset variable.
    """
    where = step.where
    if step.content_from_tool_results:
        mode = step.content_from_tool_results
        content: str | None = tool_results_since_previous_step(
            messages, reports=mode in ("reports", "markdown"), markdown=mode == "markdown")
    elif step.content is not None:
        content = substitute(step.content, env, where)
    else:
        content = None
    calls = []
    for n, call in enumerate(step.tool_calls):
        name = substitute(call.name, env, where)
        if call.raw_arguments is not None:
            arguments = substitute(call.raw_arguments, env, where)
        else:
            arguments = json.dumps(substitute(call.arguments, env, where), ensure_ascii=False)
        call_id = substitute(call.id, env, where) if call.id is not None else f"call_{step.index}_{n}"
        calls.append(ReplyCall(id=call_id, name=name, arguments=arguments))
    finish = step.finish_reason or ("tool_calls" if calls else "stop")
    return Reply(content=content, tool_calls=tuple(calls), finish_reason=finish)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return str(content)


def tool_results_since_previous_step(messages: Sequence[Any], *, reports: bool = False,
                                     markdown: bool = False) -> str:
    """The tool results after the last assistant message, one line each:
    ``<tool name>: <result>``; with ``reports``, an ``AgentTool`` result
    whose JSON holds a ``result`` text is given as that text alone (the
    worker's report, as a person would read it), after a line naming the
    worker's status when it is not ``completed``; with ``markdown``, each
    other result laid out for a person by :func:`~ongridd.fakellm.layout.lay_out`
    (plain fields on one line, lists of records as tables), apart by blank lines.

    The tool name is found from the ``tool_calls`` of the assistant messages
    in the request, matched by ``tool_call_id`` (``?`` when no call matches).
    Returns :data:`NO_TOOL_RESULTS` when there are none.
    """
    names: dict[str, str] = {}
    last_assistant = -1
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            continue
        if msg.get("role") == "assistant":
            last_assistant = i
            for call in msg.get("tool_calls") or ():
                if isinstance(call, Mapping):
                    fn = call.get("function")
                    function = fn if isinstance(fn, Mapping) else {}
                    names[str(call.get("id"))] = str(function.get("name", "?"))
    lines = []
    for msg in messages[last_assistant + 1:]:
        if isinstance(msg, Mapping) and msg.get("role") == "tool":
            name = names.get(str(msg.get("tool_call_id")), "?")
            report = _report(_text(msg.get("content"))) if reports and name == "AgentTool" else None
            if report is None:
                text = _text(msg.get("content"))
                report = lay_out(name, text) if markdown else f"{name}: {text}"
            lines.append(report)
    return ("\n\n" if markdown else "\n").join(lines) if lines else NO_TOOL_RESULTS


def _report(text: str) -> str | None:
    """The worker's report in an ``AgentTool`` result (its ``result`` text, after a
    ``(<status>)`` line unless completed); None when the result holds none."""
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if not isinstance(body, Mapping) or not isinstance(body.get("result"), str):
        return None
    status = body.get("status")
    return body["result"] if status in (None, "completed") else f"({status})\n{body['result']}"


def _chunks(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def estimate_usage(messages: Sequence[Any], reply: Reply,
                   explicit: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The ``usage`` object of an answer, in OpenAI's shape: ``prompt_tokens``,
    ``completion_tokens``, ``total_tokens`` and
    ``prompt_tokens_details.cached_tokens``.

    Without ``explicit`` (a step's ``usage``) the counts are a deterministic
    estimate — characters / 4, rounded up, cached 0: the scripted model has
    no tokenizer; the numbers only let clients exercise usage handling.  Keys
    of ``explicit`` replace the estimate's."""
    prompt_chars = sum(len(_text(m.get("content"))) for m in messages if isinstance(m, Mapping))
    out_chars = len(reply.content or "") + sum(len(c.name) + len(c.arguments) for c in reply.tool_calls)
    prompt, completion, cached = -(-prompt_chars // 4), -(-out_chars // 4), 0
    if explicit:
        prompt = int(explicit.get("prompt_tokens", prompt))
        completion = int(explicit.get("completion_tokens", completion))
        cached = int(explicit.get("cached_tokens", cached))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def completion_body(
    reply: Reply, *, completion_id: str, model: str, created: int, usage: Mapping[str, Any]
) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` JSON body."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": "ongrid-scripted-model",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}],
        "usage": dict(usage),
    }


def stream_deltas(reply: Reply) -> Iterator[dict[str, Any]]:
    """The ``delta`` objects of the stream, in order (role on the first)."""
    first = True

    def with_role(delta: dict[str, Any]) -> dict[str, Any]:
        nonlocal first
        if first:
            first = False
            return {"role": "assistant", **delta}
        return delta

    for piece in _chunks(reply.content or "", CONTENT_CHUNK_CHARS):
        yield with_role({"content": piece})
    pieces = [_chunks(c.arguments, ARGUMENTS_CHUNK_CHARS) or [""] for c in reply.tool_calls]
    for round_ in range(max((len(p) for p in pieces), default=0)):
        for index, (call, parts) in enumerate(zip(reply.tool_calls, pieces)):
            if round_ >= len(parts):
                continue
            if round_ == 0:
                entry = {
                    "index": index,
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": parts[0]},
                }
            else:
                entry = {"index": index, "function": {"arguments": parts[round_]}}
            yield with_role({"tool_calls": [entry]})
    if first:  # no content and no tool calls: an empty answer
        yield with_role({"content": ""})


def stream_bodies(
    reply: Reply, *, completion_id: str, model: str, created: int, usage: Mapping[str, Any] | None
) -> Iterator[dict[str, Any]]:
    """Every ``chat.completion.chunk`` of the stream: the deltas, a last
    chunk with an empty delta and the finish reason, then (when ``usage`` is
    given, i.e. the client asked ``stream_options.include_usage``) a chunk
    with no choices and the usage.  The ``data: [DONE]`` line is the
    caller's."""

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "ongrid-scripted-model",
            "choices": choices,
            **extra,
        }

    for delta in stream_deltas(reply):
        yield chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])
    yield chunk([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": reply.finish_reason}])
    if usage is not None:
        yield chunk([], usage=dict(usage))
