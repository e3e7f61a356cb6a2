"""Startup recovery (docs/architecture.md §4): run once, before clients are accepted.

In one write transaction:

1. every worker or reviewer row (``parent_session_id`` set) still
   ``pending``/``running`` is closed ``failed``, ``close_reason = "daemon
   restarted"``, ``closed_at`` = the sweep time.  Coordinator rows stay
   ``open``;
2. every proposal without a decision is decided ``reject`` ("daemon restarted
   before a decision"): the review gate fails closed, the tool never ran;
3. every coordinator history whose assistant tool calls lack a result is
   repaired so the next model request is valid: each unanswered call gets a
   ``tool`` message ``{"status":"error","error":"interrupted by a daemon
   restart; the result is unknown"}``, and — unless the call already has one
   (a tool that may change something is audited the moment it ends) — an
   audit row saying so (status ``cancelled``, its arguments as the model sent
   them, ``duration_ms`` 0: how long it ran is unknown), so the audit lists
   every call, a dispatch cut off by the crash included;
4. every message still held for a running turn (``pending_messages``: sent
   while a turn ran, not yet read by its model) is appended to its thread
   after that repair, as a user message of its own with the time it was
   sent (unanswered: the turn that would have answered it died), see
   :func:`ongridd.store.pending.recover_pending_in`.

Ordering.  Tool results must directly follow their assistant message, in the
order of its calls.  A repaired block is laid out as: the assistant message,
then one result per call in call order (the existing one, else the
interruption result), then the other messages that were between it and the
next assistant message (e.g. a user message that arrived mid-turn), in their
old order.  The affected rows are renumbered: their ``seq`` values are first
moved to negatives (so the per-session unique ``(session_id, seq)`` never
collides) and then set to consecutive values from where the block started.
Only messages from the block onwards move; earlier seqs never change.

Scope.  The kernel appends in order and this sweep runs at every start, so a
turn cut off by a crash is always the tail of its history: by default only
the tail from each coordinator's last assistant message with tool calls is
examined (startup cost does not grow with history length).  ``full_scan``
examines whole histories.  Tool messages answering no call in their block are
left where they are (the sweep never deletes anything).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ongridd.logs import get_logger

if TYPE_CHECKING:  # store.py imports this module
    from ongridd.store.store import Store
from ongridd.store.engine import write_tx
from ongridd.store.messages import insert_message
from ongridd.store.pending import recover_pending_in
from ongridd.store.rows import new_id, to_utc, utcnow
from ongridd.store.schema import audit_logs, chat_messages, chat_sessions, mutating_proposals
from ongridd.store.sessions import close_open_workers_in

log = get_logger(__name__)

RESTART_REASON = "daemon restarted"
PROPOSAL_RESTART_REASON = "daemon restarted before a decision; the tool did not run"
INTERRUPTED_RESULT = json.dumps(
    {"status": "error", "error": "interrupted by a daemon restart; the result is unknown"}, separators=(",", ":")
)


@attrs.frozen(kw_only=True)
class RecoveryReport:
    """What a sweep changed.

    ``closed_workers``: worker/reviewer rows closed ``failed``.
    ``repaired_sessions``: coordinator histories rewritten.
    ``added_tool_results``: interruption results inserted (and audited).
    ``rejected_proposals``: undecided proposals closed as ``reject``.
    ``kept_messages``: held messages appended to their threads.
    """

    closed_workers: int = 0
    repaired_sessions: int = 0
    added_tool_results: int = 0
    rejected_proposals: int = 0
    kept_messages: int = 0


def plan_repair(messages: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The valid order for a run of messages (sorted by seq) and how many results were added.

    ``messages``: dicts with at least ``role``, ``tool_calls`` (``[{id, name,
    arguments}]`` or None) and ``tool_call_id``.  Returns a new list holding
    the same dict objects, reordered as the module doc describes, plus new
    dicts (``role: tool``, no ``id`` key) for unanswered calls.  Pure function.
    """
    out: list[dict[str, Any]] = []
    added = 0
    i = 0
    n = len(messages)
    while i < n:
        msg = messages[i]
        i += 1
        out.append(msg)
        calls = (msg.get("tool_calls") or []) if msg["role"] == "assistant" else []
        if not calls:
            continue
        end = i
        while end < n and messages[end]["role"] != "assistant":
            end += 1
        window = messages[i:end]
        answers: dict[str, dict[str, Any]] = {}
        wanted = {c["id"] for c in calls}
        for w in window:
            cid = w.get("tool_call_id")
            if w["role"] == "tool" and isinstance(cid, str) and cid in wanted and cid not in answers:
                answers[cid] = w
        used: set[int] = set()
        for call in calls:
            found = answers.pop(call["id"], None)
            if found is not None:
                out.append(found)
                used.add(id(found))
            else:
                out.append(
                    {
                        "role": "tool",
                        "content": INTERRUPTED_RESULT,
                        "tool_calls": None,
                        "tool_call_id": call["id"],
                        "name": call.get("name"),
                    }
                )
                added += 1
        out.extend(w for w in window if id(w) not in used)
        i = end
    return out, added


def _tails(conn: Connection, full_scan: bool) -> dict[str, list[dict[str, Any]]]:
    """Per coordinator session with assistant tool calls: the messages to examine."""
    is_call = sa.and_(chat_messages.c.role == "assistant", chat_messages.c.tool_calls.is_not(None))
    start = sa.literal(1) if full_scan else sa.func.max(chat_messages.c.seq)
    last = (
        sa.select(chat_messages.c.session_id.label("sid"), start.label("from_seq"))
        .join(chat_sessions, chat_sessions.c.id == chat_messages.c.session_id)
        .where(chat_sessions.c.parent_session_id.is_(None), is_call)
        .group_by(chat_messages.c.session_id)
        .subquery()
    )
    rows = conn.execute(
        sa.select(
            chat_messages.c.id,
            chat_messages.c.session_id,
            chat_messages.c.seq,
            chat_messages.c.role,
            chat_messages.c.tool_calls,
            chat_messages.c.tool_call_id,
            chat_messages.c.created_at,
        )
        .join(last, sa.and_(chat_messages.c.session_id == last.c.sid, chat_messages.c.seq >= last.c.from_seq))
        .order_by(chat_messages.c.session_id, chat_messages.c.seq)
    ).all()
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r.session_id, []).append(dict(r._mapping))
    return out


def _apply(conn: Connection, session_id: str, old: list[dict[str, Any]], new: list[dict[str, Any]], now: datetime) -> None:
    from ongridd.store.store import audit_values  # (store.py imports this module)

    # a call's own audit row is one made after its assistant message (a provider may use an id again)
    audited: dict[str, list[datetime]] = {}
    for r in conn.execute(sa.select(audit_logs.c.tool_call_id, audit_logs.c.created_at)
                          .where(audit_logs.c.session_id == session_id, audit_logs.c.tool_call_id.is_not(None))):
        audited.setdefault(r.tool_call_id, []).append(to_utc(r.created_at))
    asked: dict[str, Any] = {}  # the calls of the last assistant message, and when it was written
    asked_at: datetime | None = None
    first_seq = old[0]["seq"]
    conn.execute(
        sa.update(chat_messages)
        .where(chat_messages.c.session_id == session_id, chat_messages.c.seq >= first_seq)
        .values(seq=-chat_messages.c.seq)
    )
    for offset, msg in enumerate(new):
        seq = first_seq + offset
        if msg["role"] == "assistant":
            asked = {c.get("id"): c for c in (msg.get("tool_calls") or [])}
            asked_at = to_utc(msg["created_at"]) if msg.get("created_at") is not None else None
        if "id" in msg:
            conn.execute(sa.update(chat_messages).where(chat_messages.c.id == msg["id"]).values(seq=seq))
        else:
            insert_message(conn, session_id, seq, msg, now)
            call = asked.get(msg["tool_call_id"]) or {}
            if not any(asked_at is None or at >= asked_at for at in audited.get(msg["tool_call_id"], ())):
                values = audit_values(session_id=session_id, tool_name=str(call.get("name") or msg.get("name") or "?"),
                                      arguments=str(call.get("arguments") or ""), result=INTERRUPTED_RESULT,
                                      status="cancelled", duration_ms=0, tool_call_id=msg["tool_call_id"])
                conn.execute(sa.insert(audit_logs).values(id=new_id(), created_at=now, **values))


def _repair_histories(conn: Connection, now: datetime, full_scan: bool) -> tuple[int, int]:
    sessions = 0
    added_total = 0
    for session_id, old in _tails(conn, full_scan).items():
        new, added = plan_repair(old)
        if added == 0 and [id(m) for m in new] == [id(m) for m in old]:
            continue
        _apply(conn, session_id, old, new, now)
        sessions += 1
        added_total += added
        log.warning("history_repaired", session_id=session_id, added_tool_results=added)
    return sessions, added_total


def _reject_undecided(conn: Connection, now: datetime) -> int:
    res = conn.execute(
        sa.update(mutating_proposals)
        .where(mutating_proposals.c.decision.is_(None))
        .values(decision="reject", decision_reason=PROPOSAL_RESTART_REASON, decided_at=now)
    )
    return res.rowcount


def sweep(engine: Engine, now: datetime | None = None, full_scan: bool = False) -> RecoveryReport:
    """Run the whole sweep in one write transaction (blocking; see the module doc)."""
    now = now or utcnow()
    with write_tx(engine) as conn:
        closed = close_open_workers_in(conn, "failed", RESTART_REASON, now)
        rejected = _reject_undecided(conn, now)
        repaired, added = _repair_histories(conn, now, full_scan)
        kept = recover_pending_in(conn, now)
    report = RecoveryReport(closed_workers=closed, repaired_sessions=repaired, added_tool_results=added,
                            rejected_proposals=rejected, kept_messages=kept)
    log.info("recovery_sweep", **attrs.asdict(report))
    return report


async def recovery_sweep(store: Store, now: datetime | None = None, *, full_scan: bool = False) -> RecoveryReport:
    """Run the sweep on an open :class:`ongridd.store.Store` (same as ``store.recovery_sweep``).

    Call it once at start, before the server accepts clients.  Raises
    StoreError when the database fails (nothing is changed then: one
    transaction).  Cancellation: once the transaction started it completes.
    """
    return await store.recovery_sweep(now, full_scan=full_scan)
