"""Chat message rows: blocking operations on an engine.

A history is ordered by ``seq`` (1, 2, 3, … per session, unique).  The next
``seq`` is taken under a lock on the session row (PostgreSQL ``SELECT … FOR
UPDATE``; on SQLite ``BEGIN IMMEDIATE`` already serialises writers), so
concurrent appends to one session get consecutive numbers without gaps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ongridd.errors import NotFound
from ongridd.store.engine import read_tx, write_tx
from ongridd.secretset import redact
from ongridd.store.rows import MESSAGE_ROLES, check_choice, row_dict, utcnow
from ongridd.store.schema import chat_messages, chat_sessions

MESSAGE_COLUMNS = (
    chat_messages.c.seq,
    chat_messages.c.role,
    chat_messages.c.content,
    chat_messages.c.tool_calls,
    chat_messages.c.tool_call_id,
    chat_messages.c.name,
    chat_messages.c.created_at,
)


def normalize_tool_calls(tool_calls: Iterable[Any] | None) -> list[dict[str, str]] | None:
    """``[{id, name, arguments}]`` from mappings or objects with those attributes
    (e.g. :class:`ongridd.llm.types.ToolCall`); an empty list becomes None.

    Raises ValueError naming the item when an id or name is missing or the
    arguments are not a string (they are the raw text the model sent).  The
    arguments are stored with every held secret redacted; a NUL stays (the
    JSON column escapes it).
    """
    if tool_calls is None:
        return None
    out: list[dict[str, str]] = []
    for i, call in enumerate(tool_calls):
        if isinstance(call, Mapping):
            cid, name, args = call.get("id"), call.get("name"), call.get("arguments", "")
        else:
            cid, name, args = (getattr(call, "id", None), getattr(call, "name", None), getattr(call, "arguments", ""))
        if not isinstance(cid, str) or not cid:
            raise ValueError(f"tool_calls[{i}].id: expected a non-empty string, got {cid!r}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"tool_calls[{i}].name: expected a non-empty string, got {name!r}")
        if args is None:
            args = ""
        if not isinstance(args, str):
            raise ValueError(f"tool_calls[{i}].arguments: expected the raw argument text (str), got {type(args).__name__}")
        out.append({"id": cid, "name": name, "arguments": redact(args)})
    return out or None


def check_message(role: str, content: Any, tool_calls: Any, tool_call_id: Any, name: Any) -> None:
    """Raise ValueError for a message that cannot be stored or replayed."""
    check_choice(role, MESSAGE_ROLES, "role")
    if content is not None and not isinstance(content, str):
        raise ValueError(f"content: expected a string or None, got {type(content).__name__}")
    if tool_calls and role != "assistant":
        raise ValueError(f"tool_calls: only assistant messages carry tool calls (role is {role!r})")
    if role == "tool" and (not isinstance(tool_call_id, str) or not tool_call_id):
        raise ValueError("tool_call_id: a tool message needs the id of the call it answers")
    if name is not None and not isinstance(name, str):
        raise ValueError(f"name: expected a string or None, got {type(name).__name__}")


def lock_session(conn: Connection, session_id: str) -> None:
    """Lock the session row for this transaction; NotFound when it does not exist."""
    found = conn.execute(
        sa.select(chat_sessions.c.id).where(chat_sessions.c.id == session_id).with_for_update()
    ).first()
    if found is None:
        raise NotFound(f"session {session_id} does not exist")


def next_seq(conn: Connection, session_id: str) -> int:
    top = conn.execute(
        sa.select(sa.func.max(chat_messages.c.seq)).where(chat_messages.c.session_id == session_id)
    ).scalar()
    return int(top or 0) + 1


def insert_message(conn: Connection, session_id: str, seq: int, message: Mapping[str, Any], now: datetime) -> None:
    conn.execute(
        sa.insert(chat_messages).values(
            session_id=session_id,
            seq=seq,
            role=message["role"],
            content=message.get("content"),
            tool_calls=message.get("tool_calls"),
            tool_call_id=message.get("tool_call_id"),
            name=message.get("name"),
            created_at=now,
        )
    )


def append_message(engine: Engine, session_id: str, message: Mapping[str, Any]) -> int:
    with write_tx(engine) as conn:
        return append_message_in(conn, session_id, message, utcnow(), {})


def append_message_in(conn: Connection, session_id: str, message: Mapping[str, Any], now: datetime,
                      seqs: dict[str, int]) -> int:
    """Append inside ``conn``'s transaction; returns the ``seq``.

    ``seqs``: the last seq handed out per session in this transaction (the
    session row is locked and its top seq read only on the first append of
    that session; later ones count on from there).  NotFound when the
    session does not exist.
    """
    last = seqs.get(session_id)
    if last is None:
        lock_session(conn, session_id)
        last = next_seq(conn, session_id) - 1
    seq = last + 1
    insert_message(conn, session_id, seq, message, now)
    seqs[session_id] = seq
    return seq


def message_rows(conn: Connection, session_id: str, from_seq: int = 1) -> Sequence[Any]:
    return conn.execute(
        sa.select(chat_messages.c.id, *MESSAGE_COLUMNS)
        .where(chat_messages.c.session_id == session_id, chat_messages.c.seq >= from_seq)
        .order_by(chat_messages.c.seq)
    ).all()


def load_messages(engine: Engine, session_id: str) -> list[dict[str, Any]]:
    with read_tx(engine) as conn:
        rows = message_rows(conn, session_id)
    out = []
    for r in rows:
        d = row_dict(r, ("created_at",))
        del d["id"]
        out.append(d)
    return out
