"""Read queries for the web console and the CLI: thread list, transcripts, audit with proposals.

Blocking functions on an engine (the async :class:`ongridd.store.store.Store`
runs them in worker threads).  Every result is bounded by the ``limit`` the
caller passes (the callers clamp it); times are ISO 8601 UTC strings.

- :func:`list_threads` — a user's coordinator threads, newest activity first,
  keyset-paginated on ``(updated_at, id)``.
- :func:`list_messages` — one session's stored messages in ``seq`` order after a seq.
- :func:`list_audit_items` — audit rows of a session (and its subtree) with the
  review proposal each gated call recorded, linked by ``(session_id, tool_call_id)``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ongridd.store.audit import audit_rows_query
from ongridd.store.engine import read_tx
from ongridd.store.rows import iso, row_dict
from ongridd.store.schema import UTCDateTime, chat_messages, chat_sessions, mutating_proposals
from ongridd.store.sessions import subtree_rows

#: the longest ``last_user_text`` shown in a thread list
LAST_TEXT_CHARS = 200


def list_threads(engine: Engine, user_id: str, limit: int, before: datetime | None = None,
                 before_id: str | None = None) -> list[dict[str, Any]]:
    """Up to ``limit`` coordinator threads of ``user_id``, newest activity first.

    Each: ``{id, thread, status, created_at, updated_at, last_user_text,
    last_role, last_has_tool_calls, last_turn_error}`` — ``updated_at`` is the
    time of the thread's last message (its creation time when it has none);
    ``last_role``/``last_has_tool_calls`` describe that last message (None
    when there is none); ``last_turn_error``: the error a turn ended with when
    no message came after it, else None.  Cursor: only threads older than ``before``, or as
    old and with an id below ``before_id`` (ties broken by id, descending).
    """
    last = (
        sa.select(chat_messages.c.session_id.label("sid"),
                  sa.func.max(chat_messages.c.created_at).label("last_at"),
                  sa.func.max(chat_messages.c.seq).label("last_seq"))
        .group_by(chat_messages.c.session_id)
        .subquery()
    )
    updated = sa.func.coalesce(last.c.last_at, chat_sessions.c.created_at, type_=UTCDateTime).label("updated_at")
    query = (
        sa.select(chat_sessions.c.id, chat_sessions.c.thread_id, chat_sessions.c.status,
                  chat_sessions.c.created_at, updated, last.c.last_seq, chat_sessions.c.last_turn_error,
                  chat_sessions.c.last_turn_error_seq)
        .select_from(chat_sessions.outerjoin(last, last.c.sid == chat_sessions.c.id))
        .where(chat_sessions.c.user_id == user_id, chat_sessions.c.parent_session_id.is_(None))
    )
    if before is not None:
        bound = sa.literal(before, type_=UTCDateTime)
        if before_id is not None:
            query = query.where(sa.or_(updated < bound, sa.and_(updated == bound, chat_sessions.c.id < before_id)))
        else:
            query = query.where(updated < bound)
    query = query.order_by(updated.desc(), chat_sessions.c.id.desc()).limit(limit)
    with read_tx(engine) as conn:
        rows = conn.execute(query).all()
        ids = [r.id for r in rows]
        last_user = _last_user_texts(conn, ids)
        last_msgs = {}
        pairs = [(r.id, r.last_seq) for r in rows if r.last_seq is not None]
        if pairs:
            found = conn.execute(
                sa.select(chat_messages.c.session_id, chat_messages.c.role, chat_messages.c.tool_calls)
                .where(sa.tuple_(chat_messages.c.session_id, chat_messages.c.seq).in_(pairs))
            ).all()
            last_msgs = {m.session_id: m for m in found}
    out = []
    for r in rows:
        m = last_msgs.get(r.id)
        out.append({
            "id": r.id,
            "thread": r.thread_id,
            "status": r.status,
            "created_at": iso(r.created_at),
            "updated_at": iso(r.updated_at),
            "last_user_text": last_user.get(r.id),
            "last_role": m.role if m is not None else None,
            "last_has_tool_calls": bool(m.tool_calls) if m is not None else None,
            "last_turn_error": r.last_turn_error if r.last_turn_error_seq == r.last_seq else None,
        })
    return out


def _last_user_texts(conn: Any, ids: list[str]) -> dict[str, str]:
    """``{session id: its last user message, cut to LAST_TEXT_CHARS}`` for ``ids``."""
    if not ids:
        return {}
    top = (
        sa.select(chat_messages.c.session_id.label("sid"), sa.func.max(chat_messages.c.seq).label("seq"))
        .where(chat_messages.c.session_id.in_(ids), chat_messages.c.role == "user")
        .group_by(chat_messages.c.session_id)
        .subquery()
    )
    # substr bounds what is read back even for a huge message
    rows = conn.execute(
        sa.select(chat_messages.c.session_id, sa.func.substr(chat_messages.c.content, 1, LAST_TEXT_CHARS + 1))
        .join(top, sa.and_(top.c.sid == chat_messages.c.session_id, top.c.seq == chat_messages.c.seq))
    ).all()
    out = {}
    for sid, text in rows:
        text = " ".join((text or "").split())
        out[sid] = text if len(text) <= LAST_TEXT_CHARS else text[: LAST_TEXT_CHARS - 1] + "…"
    return out


def list_messages(engine: Engine, session_id: str, after_seq: int, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` messages of ``session_id`` with ``seq > after_seq``, in seq
    order: ``[{seq, role, content, tool_calls, tool_call_id, name, created_at}]``."""
    query = (
        sa.select(chat_messages.c.seq, chat_messages.c.role, chat_messages.c.content, chat_messages.c.tool_calls,
                  chat_messages.c.tool_call_id, chat_messages.c.name, chat_messages.c.created_at)
        .where(chat_messages.c.session_id == session_id, chat_messages.c.seq > after_seq)
        .order_by(chat_messages.c.seq)
        .limit(limit)
    )
    with read_tx(engine) as conn:
        rows = conn.execute(query).all()
    return [row_dict(r, ("created_at",)) for r in rows]


def list_audit_items(engine: Engine, session_id: str, include_children: bool, limit: int,
                     offset: int = 0) -> list[dict[str, Any]]:
    """Audit rows oldest first (at most ``limit``, after skipping ``offset``):
    ``[{id, session_id, agent_id, tool_name, tool_call_id, arguments, result,
    status, duration_ms, created_at, proposal}]`` where ``proposal`` is
    ``{id, action, target, reason, blast_radius, decision, decision_reason,
    reviewer_session_id, decided_at}`` for a gated call (the proposal of the
    same session and tool-call id; the newest when there are several) or None."""
    with read_tx(engine) as conn:
        ids = [r["id"] for r in subtree_rows(conn, session_id)] if include_children else [session_id]
        if not ids:
            return []
        rows = conn.execute(audit_rows_query(ids).limit(limit).offset(offset)).all()
        keys = {(r.session_id, r.tool_call_id) for r in rows if r.tool_call_id}
        proposals: dict[tuple[str, str], dict[str, Any]] = {}
        if keys:
            found = conn.execute(
                sa.select(mutating_proposals)
                .where(sa.tuple_(mutating_proposals.c.session_id, mutating_proposals.c.tool_call_id).in_(list(keys)))
                .order_by(mutating_proposals.c.created_at, mutating_proposals.c.id)
            ).all()
            for p in found:  # later rows win: the newest proposal of a call id
                proposals[(p.session_id, p.tool_call_id)] = {
                    "id": p.id, "action": p.action, "target": p.target, "reason": p.reason,
                    "blast_radius": p.blast_radius, "decision": p.decision, "decision_reason": p.decision_reason,
                    "reviewer_session_id": p.reviewer_session_id, "decided_at": iso(p.decided_at),
                }
    out = []
    for r in rows:
        item = row_dict(r, ("created_at",))
        item["proposal"] = proposals.get((r.session_id, r.tool_call_id)) if r.tool_call_id else None
        out.append(item)
    return out
