"""One session tree as one JSON document (``GET /api/sessions/{id}/export``,
``ongrid sessions export``).

Blocking, on an engine, in one read transaction (a consistent snapshot).
The document::

    {"format": "ongrid-session-export", "version": 1, "exported_at": "<ISO>",
     "session": NODE}

    NODE = {id, agent_id, user_id, thread_id, parent_session_id, status,
            description, created_at, started_at, closed_at, close_reason,
            turn_seq,                       # workers and reviewers: the seq of their turn's user message
            last_turn_error, last_turn_error_seq,   # a thread: its last failed or stopped turn's error,
                                                    # and the thread's last seq then (stale when lower)
            tokens: {prompt, completion, cached, model_calls},
            messages: [{seq, role, content, tool_calls, tool_call_id, name, created_at}],   # seq order
            audit: [{id, tool_name, tool_call_id, arguments, result, status,
                     duration_ms, created_at}],                                          # oldest first
            proposals: [{id, tool_call_id, action, target, reason, blast_radius,
                         operator, decision, decision_reason, reviewer_session_id,
                         created_at, decided_at}],                                       # oldest first
            children: [NODE, ...]}                                                       # oldest first

Times are ISO 8601 UTC strings.  The whole tree is read at once (a thread's
size is bounded by what its turns wrote).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ongridd.store.engine import read_tx
from ongridd.store.rows import iso, row_dict, utcnow
from ongridd.store.schema import audit_logs, chat_messages, mutating_proposals
from ongridd.store.sessions import subtree_rows, usage_of

FORMAT = "ongrid-session-export"
VERSION = 1
SESSION_KEYS = ("id", "agent_id", "user_id", "thread_id", "parent_session_id", "status", "description",
                "created_at", "started_at", "closed_at", "close_reason", "turn_seq", "last_turn_error",
                "last_turn_error_seq")
MESSAGE_KEYS = ("seq", "role", "content", "tool_calls", "tool_call_id", "name", "created_at")
AUDIT_KEYS = ("id", "tool_name", "tool_call_id", "arguments", "result", "status", "duration_ms", "created_at")
PROPOSAL_KEYS = ("id", "tool_call_id", "action", "target", "reason", "blast_radius", "operator", "decision",
                 "decision_reason", "reviewer_session_id", "created_at", "decided_at")
_IN_CHUNK = 500


def _by_session(conn: Connection, table: sa.Table, ids: list[str], order: tuple[Any, ...],
                keys: tuple[str, ...], times: tuple[str, ...]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
    for start in range(0, len(ids), _IN_CHUNK):
        part = ids[start:start + _IN_CHUNK]
        for row in conn.execute(sa.select(table).where(table.c.session_id.in_(part)).order_by(*order)).all():
            d = row_dict(row, times)
            out[d["session_id"]].append({k: d[k] for k in keys})
    return out


def export_tree(engine: Engine, session_id: str) -> dict[str, Any] | None:
    """The export document of ``session_id`` and everything under it (see the
    module doc); None when the session does not exist."""
    with read_tx(engine) as conn:
        rows = subtree_rows(conn, session_id)
        if not rows:
            return None
        ids = [r["id"] for r in rows]
        messages = _by_session(conn, chat_messages, ids, (chat_messages.c.session_id, chat_messages.c.seq),
                               MESSAGE_KEYS, ("created_at",))
        audit = _by_session(conn, audit_logs, ids, (audit_logs.c.created_at, audit_logs.c.id), AUDIT_KEYS,
                            ("created_at",))
        proposals = _by_session(conn, mutating_proposals, ids,
                                (mutating_proposals.c.created_at, mutating_proposals.c.id), PROPOSAL_KEYS,
                                ("created_at", "decided_at"))
    nodes = {r["id"]: {**{k: r[k] for k in SESSION_KEYS}, "tokens": usage_of(r), "messages": messages[r["id"]],
                       "audit": audit[r["id"]], "proposals": proposals[r["id"]], "children": []} for r in rows}
    for r in rows[1:]:
        nodes[r["parent_session_id"]]["children"].append(nodes[r["id"]])
    return {"format": FORMAT, "version": VERSION, "exported_at": iso(utcnow()), "session": nodes[session_id]}


__all__ = ["FORMAT", "VERSION", "export_tree"]
