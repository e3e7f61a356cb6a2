"""Stored message rows ↔ model messages, and history repair.

A valid chat history answers every assistant tool call with exactly one
tool message, directly after that assistant message.  A turn cut off by a
stop, a crash or a restart may leave calls unanswered; :func:`repair_history`
adds a result for each so the next model request is accepted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ongridd.llm.types import Message, ToolCall

INTERRUPTED = json.dumps({"status": "error", "error": "interrupted: the turn was stopped or the daemon "
                          "restarted before this call returned; its result is unknown"})


def message_from_row(row: dict[str, Any]) -> Message:
    """A ``chat_messages`` row (dict from the Store) → Message."""
    calls = tuple(
        ToolCall(id=str(c.get("id", "")), name=str(c.get("name", "")), arguments=str(c.get("arguments", "")))
        for c in (row.get("tool_calls") or ())
    )
    return Message(role=row["role"], content=row.get("content"), tool_calls=calls,
                   tool_call_id=row.get("tool_call_id"), name=row.get("name"))


def tool_calls_to_json(calls: Iterable[ToolCall]) -> list[dict[str, str]]:
    """ToolCalls → ``[{id, name, arguments}]`` as stored in ``chat_messages.tool_calls``."""
    return [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]


def repair_history(messages: Sequence[Message]) -> list[Message]:
    """Return a valid history: tool results regrouped after their assistant
    message, a synthetic "interrupted" result for each unanswered call, and
    orphan tool messages (no matching call) dropped.  Order is otherwise kept.
    """
    results: dict[str, Message] = {}
    for m in messages:
        if m.role == "tool" and m.tool_call_id and m.tool_call_id not in results:
            results[m.tool_call_id] = m
    out: list[Message] = []
    used: set[str] = set()
    for m in messages:
        if m.role == "tool":
            continue
        out.append(m)
        if m.role == "assistant" and m.tool_calls:
            for call in m.tool_calls:
                if call.id in used:
                    continue
                used.add(call.id)
                res = results.get(call.id)
                out.append(res if res is not None else
                           Message(role="tool", content=INTERRUPTED, tool_call_id=call.id, name=call.name))
    return out
