"""Session rows (docs/architecture.md §11, §12): blocking operations on an engine.

Each function opens its own transaction (``write_tx`` for anything that
writes, so SQLite serialises read-modify-writes with ``BEGIN IMMEDIATE``)
and returns plain dicts with ISO 8601 UTC time strings.  The async
:class:`ongridd.store.store.Store` runs them in worker threads.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ongridd.errors import NotFound, StoreError
from ongridd.store.engine import is_unique_violation, read_tx, write_tx
from ongridd.store.fastsql import Prepared, raw_write_tx
from ongridd.store.rows import (
    ACTIVE_STATUSES,
    COORDINATOR_STATUS,
    TERMINAL_STATUSES,
    iso,
    new_id,
    row_dict,
    utcnow,
)
from ongridd.store.schema import (
    audit_logs,
    chat_messages,
    chat_sessions,
    mutating_proposals,
    pending_messages,
    thread_summaries,
    turn_origins,
)

SESSION_TIME_KEYS = ("created_at", "started_at", "closed_at")
USAGE_KEYS = ("model_calls", "prompt_tokens", "completion_tokens", "cached_tokens")
COORDINATOR_AGENT = "default"
# A tree deeper than this is a corrupted database, not a session tree (real depth: 3).
_MAX_TREE_DEPTH = 32


def session_dict(row: Any) -> dict[str, Any]:
    return row_dict(row, SESSION_TIME_KEYS)


def _get(conn: Connection, session_id: str) -> dict[str, Any] | None:
    row = conn.execute(sa.select(chat_sessions).where(chat_sessions.c.id == session_id)).first()
    return session_dict(row) if row is not None else None


def _get_written(conn: Connection, session_id: str) -> dict[str, Any]:
    """The row this transaction has just written (StoreError should it be missing)."""
    row = _get(conn, session_id)
    if row is None:
        raise StoreError(f"session {session_id} is missing right after its insert")
    return row


def create_session(engine: Engine, *, session_id: str | None = None, **values: Any) -> dict[str, Any]:
    """:func:`create_session_in` in a transaction of its own."""
    with write_tx(engine) as conn:
        return create_session_in(conn, session_id=session_id, now=utcnow(), **values)


def create_session_in(
    conn: Connection,
    *,
    agent_id: str,
    user_id: str,
    parent_session_id: str | None,
    thread_id: str | None,
    description: str | None,
    status: str,
    session_id: str | None,
    now: datetime,
    turn_seq: int | None = None,
) -> dict[str, Any]:
    """Insert a session row inside ``conn``'s transaction and return it.

    ``session_id``: the id to use (None: a new one).  NotFound when the parent
    does not exist; an IntegrityError when the id is already taken.
    """
    sid = session_id or new_id()
    values = {
        "id": sid,
        "agent_id": agent_id,
        "parent_session_id": parent_session_id,
        "user_id": user_id,
        "thread_id": thread_id,
        "description": description,
        "status": status,
        "created_at": now,
        "started_at": now if status == "running" else None,
        "closed_at": now if status in TERMINAL_STATUSES else None,
        "close_reason": None,
        "turn_seq": turn_seq,
    }
    if parent_session_id is not None and _get(conn, parent_session_id) is None:
        raise NotFound(f"parent session {parent_session_id} does not exist")
    conn.execute(sa.insert(chat_sessions).values(**values))
    return _get_written(conn, sid)


#: built once (bind parameters; run on the DBAPI cursor, ongridd/store/fastsql.py): the
#: coordinator row of (user, thread), and a new row's insert
_FIND_COORDINATOR = Prepared(sa.select(chat_sessions).where(
    chat_sessions.c.user_id == sa.bindparam("user_id"),
    chat_sessions.c.thread_id == sa.bindparam("thread_id"),
    chat_sessions.c.parent_session_id.is_(None),
))
INSERT_SESSION = sa.insert(chat_sessions)
_INSERT_COORDINATOR = Prepared(INSERT_SESSION, ("id", "agent_id", "parent_session_id", "user_id", "thread_id",
                                                "description", "status", "created_at", "started_at", "closed_at",
                                                "close_reason", "turn_seq"))
#: a new row's usage counters (their server default), and the columns a new row leaves NULL
USAGE_ZERO = dict.fromkeys(USAGE_KEYS, 0)
NOT_WRITTEN = {"last_turn_error": None, "last_turn_error_seq": None}


def get_or_create_coordinator(engine: Engine, user_id: str, thread_id: str, *,
                              nowait: bool = False) -> tuple[dict[str, Any], bool]:
    # one write transaction, found or created (the runtime keeps the threads it has seen in
    # memory, so this runs about once per thread and daemon start); nowait: as raw_write_tx
    key = {"user_id": user_id, "thread_id": thread_id}
    for _attempt in range(3):
        try:
            with raw_write_tx(engine, nowait=nowait) as conn:
                found = _FIND_COORDINATOR.fetchall(conn, key)
                if found:
                    return session_dict(found[0]), False
                now = utcnow()
                values = {"id": new_id(), "agent_id": COORDINATOR_AGENT, "parent_session_id": None,
                          "user_id": user_id, "thread_id": thread_id, "description": None,
                          "status": COORDINATOR_STATUS, "created_at": now, "started_at": None,
                          "closed_at": None, "close_reason": None, "turn_seq": None}
                _INSERT_COORDINATOR.execute(conn, values)
                # the row as written (no read-back): the counters start at their server default, 0
                return {**values, **USAGE_ZERO, **NOT_WRITTEN, "created_at": iso(now)}, True
        except sa.exc.IntegrityError as exc:
            # Another writer (PostgreSQL: another transaction) created it first: read theirs.
            if not is_unique_violation(exc):
                raise
    raise StoreError(f"could not create the coordinator row for user {user_id!r}, thread {thread_id!r}")


def _empty_coordinator_statements() -> tuple[sa.Select[Any], sa.Delete]:
    """The lock and the conditional delete of :func:`delete_empty_coordinator`,
    built once (bind parameter ``session_id``): building them costs several
    times running them."""
    sid, wanted = chat_sessions.c.id, sa.bindparam("session_id", type_=sa.String())
    lock = sa.select(sid).where(sid == wanted, chat_sessions.c.parent_session_id.is_(None)).with_for_update()
    children = sa.alias(chat_sessions)
    refs = [sa.select(1).where(t.c.session_id == wanted).exists()
            for t in (chat_messages, audit_logs, turn_origins, thread_summaries, pending_messages)]
    refs.append(sa.select(1).where(children.c.parent_session_id == wanted).exists())
    return lock, sa.delete(chat_sessions).where(sid == wanted, *[~r for r in refs])


_LOCK_COORDINATOR, _DELETE_IF_EMPTY = _empty_coordinator_statements()


def delete_empty_coordinator(engine: Engine, session_id: str) -> bool:
    """Delete the coordinator row ``session_id`` only if it is still empty:
    no message (stored or held), no child session, no audit row, turn origin or summary.
    One write transaction; the row is locked first (PostgreSQL ``FOR
    UPDATE``, which a concurrent insert of a row referring to it waits on;
    SQLite: the transaction's write lock), so the check and the delete see
    the same state.  True when a row was deleted."""
    key = {"session_id": session_id}
    with write_tx(engine) as conn:
        if conn.execute(_LOCK_COORDINATOR, key).first() is None:
            return False
        return conn.execute(_DELETE_IF_EMPTY, key).rowcount == 1


def get_session(engine: Engine, session_id: str) -> dict[str, Any] | None:
    with read_tx(engine) as conn:
        return _get(conn, session_id)


def mark_running(engine: Engine, session_id: str) -> dict[str, Any] | None:
    with write_tx(engine) as conn:
        return mark_running_in(conn, session_id, utcnow())


def mark_running_in(conn: Connection, session_id: str, now: datetime) -> dict[str, Any] | None:
    """``pending → running`` inside ``conn``'s transaction; the row, or None when unchanged."""
    res = conn.execute(
        sa.update(chat_sessions)
        .where(chat_sessions.c.id == session_id, chat_sessions.c.status == "pending")
        .values(status="running", started_at=now)
    )
    if res.rowcount != 1:
        return None
    return _get(conn, session_id)


def close_session(engine: Engine, session_id: str, status: str, reason: str | None) -> bool:
    with write_tx(engine) as conn:
        return close_session_in(conn, session_id, status, reason, utcnow())


def close_session_in(conn: Connection, session_id: str, status: str, reason: str | None, now: datetime) -> bool:
    """Close a row not closed yet, inside ``conn``'s transaction; whether this call closed it."""
    res = conn.execute(
        sa.update(chat_sessions)
        .where(
            chat_sessions.c.id == session_id,
            chat_sessions.c.closed_at.is_(None),
            chat_sessions.c.status.not_in(TERMINAL_STATUSES),
        )
        .values(status=status, closed_at=now, close_reason=reason)
    )
    return res.rowcount == 1


#: built once: a thread's last turn ended with ``:error``, the thread's last message seq then kept with it
NOTE_TURN_ERROR = (sa.update(chat_sessions)
                   .where(chat_sessions.c.id == sa.bindparam("sid"))
                   .values(last_turn_error=sa.bindparam("error"),
                           last_turn_error_seq=sa.select(sa.func.max(chat_messages.c.seq))
                           .where(chat_messages.c.session_id == sa.bindparam("sid")).scalar_subquery()))


def note_turn_error_in(conn: Connection, session_id: str, error: str) -> bool:
    """Record inside ``conn``'s transaction (after the turn's messages) that the thread's last
    turn ended with ``error``; whether the row exists."""
    return conn.execute(NOTE_TURN_ERROR, {"sid": session_id, "error": error}).rowcount == 1


#: built once: ``x = x + :add_x`` for each usage counter of session ``:sid``
ADD_USAGE = (sa.update(chat_sessions)
             .where(chat_sessions.c.id == sa.bindparam("sid"))
             .values({k: chat_sessions.c[k] + sa.bindparam(f"add_{k}", type_=sa.Integer) for k in USAGE_KEYS}))


def usage_params(session_id: str, values: dict[str, int]) -> dict[str, Any]:
    """The bind parameters of :data:`ADD_USAGE` for one session."""
    return {"sid": session_id, **{f"add_{k}": int(values.get(k, 0)) for k in USAGE_KEYS}}


def add_usage_in(conn: Connection, session_id: str, values: dict[str, int]) -> bool:
    """Add ``values`` (counts by ``USAGE_KEYS``) to the session's usage
    counters inside ``conn``'s transaction, as ``x = x + n`` in the database
    (concurrent writers never lose an increment); whether the row exists."""
    return conn.execute(ADD_USAGE, usage_params(session_id, values)).rowcount == 1


def session_exists_in(conn: Connection, session_id: str) -> bool:
    """Whether the session row exists (inside ``conn``'s transaction)."""
    return conn.execute(sa.select(chat_sessions.c.id).where(chat_sessions.c.id == session_id)).first() is not None


def usage_of(row: dict[str, Any]) -> dict[str, int]:
    """``{prompt, completion, cached, model_calls}`` of a session row."""
    return {"prompt": int(row.get("prompt_tokens") or 0), "completion": int(row.get("completion_tokens") or 0),
            "cached": int(row.get("cached_tokens") or 0), "model_calls": int(row.get("model_calls") or 0)}


def list_children(engine: Engine, session_id: str) -> list[dict[str, Any]]:
    with read_tx(engine) as conn:
        rows = conn.execute(
            sa.select(chat_sessions)
            .where(chat_sessions.c.parent_session_id == session_id)
            .order_by(chat_sessions.c.created_at, chat_sessions.c.id)
        ).all()
        return [session_dict(r) for r in rows]


def subtree_rows(conn: Connection, root_id: str) -> list[dict[str, Any]]:
    """The root row and every descendant (breadth first, each level by creation time)."""
    root = _get(conn, root_id)
    if root is None:
        return []
    out = [root]
    seen = {root_id}
    level = [root_id]
    for _depth in range(_MAX_TREE_DEPTH):
        if not level:
            break
        rows = conn.execute(
            sa.select(chat_sessions)
            .where(chat_sessions.c.parent_session_id.in_(level))
            .order_by(chat_sessions.c.created_at, chat_sessions.c.id)
        ).all()
        level = []
        for r in rows:
            d = session_dict(r)
            if d["id"] in seen:
                continue
            seen.add(d["id"])
            out.append(d)
            level.append(d["id"])
    return out


TREE_KEYS = (
    "id",
    "agent_id",
    "user_id",
    "parent_session_id",
    "status",
    "description",
    "created_at",
    "started_at",
    "closed_at",
    "close_reason",
    "turn_seq",
)


def session_tree(engine: Engine, session_id: str) -> dict[str, Any] | None:
    with read_tx(engine) as conn:
        rows = subtree_rows(conn, session_id)
        thread = _thread_of(conn, rows[0]) if rows else None
        # a reviewer's node says what the gate decided on its answer (the proposal it decided)
        reviewers = [r["id"] for r in rows if r["agent_id"] == "reviewer"]
        decided = {} if not reviewers else {rid: (decision, reason) for rid, decision, reason in conn.execute(
            sa.select(mutating_proposals.c.reviewer_session_id, mutating_proposals.c.decision,
                      mutating_proposals.c.decision_reason)
            .where(mutating_proposals.c.session_id.in_({r["parent_session_id"] for r in rows
                                                        if r["agent_id"] == "reviewer"}),
                   mutating_proposals.c.reviewer_session_id.in_(reviewers))).all()}
        # a worker's changes the review gate did not let run: its tool calls audited "rejected"
        not_made: dict[str, int] = dict(conn.execute(
            sa.select(audit_logs.c.session_id, sa.func.count())
            .where(audit_logs.c.session_id.in_([r["id"] for r in rows]), audit_logs.c.status == "rejected")
            .group_by(audit_logs.c.session_id)).all()) if rows else {}
    if not rows:
        return None
    nodes = {r["id"]: {**{k: r[k] for k in TREE_KEYS}, "tokens": usage_of(r), "children": []} for r in rows}
    for rid, count in not_made.items():
        nodes[rid]["changes_not_made"] = count
    for rid, (decision, reason) in decided.items():
        if rid in nodes and decision:
            nodes[rid]["decision"] = decision
            nodes[rid]["decision_reason"] = reason
    for r in rows[1:]:
        nodes[r["parent_session_id"]]["children"].append(nodes[r["id"]])
    return {**nodes[session_id], "thread_id": thread}


def _thread_of(conn: Connection, row: dict[str, Any]) -> str | None:
    """The thread (the coordinator's ``thread_id``) a session belongs to: its own, or its
    nearest ancestor's; None when the chain is broken or deeper than a tree may be."""
    for _depth in range(_MAX_TREE_DEPTH + 1):
        if row.get("thread_id") is not None or row.get("parent_session_id") is None:
            return row.get("thread_id")
        parent = _get(conn, row["parent_session_id"])
        if parent is None:
            return None
        row = parent
    return None


def close_open_workers(engine: Engine, status: str, reason: str, now: datetime | None = None) -> int:
    with write_tx(engine) as conn:
        return close_open_workers_in(conn, status, reason, now or utcnow())


def close_open_workers_in(conn: Connection, status: str, reason: str, now: datetime) -> int:
    """Close every pending/running worker or reviewer row; returns how many."""
    res = conn.execute(
        sa.update(chat_sessions)
        .where(
            chat_sessions.c.parent_session_id.is_not(None),
            chat_sessions.c.status.in_(ACTIVE_STATUSES),
        )
        .values(status=status, closed_at=now, close_reason=reason)
    )
    return res.rowcount


def count_by_status(engine: Engine) -> dict[str, int]:
    with read_tx(engine) as conn:
        rows = conn.execute(
            sa.select(chat_sessions.c.status, sa.func.count()).group_by(chat_sessions.c.status)
        ).all()
    return {status: int(n) for status, n in rows}
