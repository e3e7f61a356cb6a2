"""Retention: the daily sweep that deletes old closed sessions (``retention.days``).

What "closed and older than the cutoff" means (cutoff = now − ``days``):

* **A coordinator thread** is never closed (its status stays ``open``).  It
  is deleted whole — the thread row and every worker and reviewer under it —
  when its last activity is older than the cutoff (its creation, its last
  message, and the creation and close of every session under it), no
  session under it is ``pending`` or ``running``, and the daemon has no turn
  running on it.
* **A worker or reviewer** of a thread that is kept is deleted, with the
  sessions under it, when it and every session under it ended
  (``completed|failed|killed``) with ``closed_at`` older than the cutoff, the
  thread has no running turn and no session under the thread is pending or
  running.  Sessions are taken as the subtree under a
  direct child of the coordinator, so a reviewer is never deleted apart from
  the worker whose call it reviewed.

A deleted session takes its messages, audit rows, proposals, thread
summaries and turn origins with it; a proposal or summary that is kept but
named a deleted reviewer or summarizer session has that reference cleared.
Nothing of a thread with a running turn, and no pending or running session,
is ever deleted: the candidates are re-checked inside each delete
transaction.  Deletes run in transactions of at most ``batch_size`` sessions
(a thread's tree is never split across two).  Incidents, change events and
channel events are not touched.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs
import sqlalchemy as sa
import trio
from sqlalchemy.engine import Connection, Engine

from ongridd.logs import get_logger
from ongridd.store.engine import read_tx, write_tx
from ongridd.store.rows import ACTIVE_STATUSES, TERMINAL_STATUSES, to_utc, utcnow
from ongridd.store.schema import (
    audit_logs,
    chat_messages,
    chat_sessions,
    mutating_proposals,
    pending_messages,
    thread_summaries,
    turn_origins,
)

log = get_logger(__name__)

DEFAULT_BATCH = 500
#: the first sweep runs this long after start-up, then every SWEEP_INTERVAL_S
FIRST_SWEEP_DELAY_S = 60.0
SWEEP_INTERVAL_S = 24 * 3600.0
_IN_CHUNK = 500  # ids per IN (...) list
_MAX_DEPTH = 32


@attrs.define
class RetentionReport:
    """What one sweep removed (row counts) and how many transactions it took."""

    threads: int = 0
    workers: int = 0
    sessions: int = 0
    messages: int = 0
    audit_rows: int = 0
    proposals: int = 0
    summaries: int = 0
    turn_origins: int = 0
    batches: int = 0

    def as_dict(self) -> dict[str, int]:
        return attrs.asdict(self)


@attrs.frozen
class _Unit:
    """One deletable subtree: ``root`` (a thread or a top-level worker) and
    every session id in it (root first)."""

    root: str
    ids: tuple[str, ...]
    thread: bool
    coordinator: str


def _chunks(ids: Sequence[str]) -> Iterable[Sequence[str]]:
    for i in range(0, len(ids), _IN_CHUNK):
        yield ids[i:i + _IN_CHUNK]


def _subtrees(conn: Connection, roots: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """root id → the rows under it (root excluded), breadth first."""
    c = chat_sessions.c
    out: dict[str, list[dict[str, Any]]] = {r: [] for r in roots}
    owner = {r: r for r in roots}
    level = list(roots)
    for _ in range(_MAX_DEPTH):
        if not level:
            break
        nxt: list[str] = []
        for part in _chunks(level):
            rows = conn.execute(sa.select(c.id, c.parent_session_id, c.status, c.created_at, c.closed_at)
                                .where(c.parent_session_id.in_(part))).all()
            for r in rows:
                if r.id in owner:
                    continue
                owner[r.id] = owner[r.parent_session_id]
                out[owner[r.id]].append(dict(r._mapping))
                nxt.append(r.id)
        level = nxt
    return out


def _last_message_at(conn: Connection, ids: Sequence[str]) -> dict[str, datetime]:
    """session id → its newest message's time (sessions with messages only)."""
    m = chat_messages.c
    out: dict[str, datetime] = {}
    for part in _chunks(ids):
        for sid, at in conn.execute(sa.select(m.session_id, sa.func.max(m.created_at))
                                    .where(m.session_id.in_(part)).group_by(m.session_id)).all():
            if at is not None:
                out[sid] = to_utc(at)
    return out


def _thread_units(conn: Connection, cutoff: datetime, busy: Collection[str]) -> list[_Unit]:
    c = chat_sessions.c
    candidates = [r.id for r in conn.execute(
        sa.select(c.id).where(c.parent_session_id.is_(None), c.created_at < cutoff).order_by(c.created_at, c.id)
    ).all() if r.id not in busy]
    units: list[_Unit] = []
    for part in _chunks(candidates):
        trees = _subtrees(conn, part)
        everyone = [i for root in part for i in (root, *(d["id"] for d in trees[root]))]
        last = _last_message_at(conn, everyone)
        for root in part:
            below = trees[root]
            if any(d["status"] in ACTIVE_STATUSES for d in below):
                continue
            times = [last.get(i) for i in (root, *(d["id"] for d in below))]
            times += [to_utc(d[k]) for d in below for k in ("created_at", "closed_at") if d[k] is not None]
            if any(t is not None and t >= cutoff for t in times):
                continue
            units.append(_Unit(root=root, ids=(root, *(d["id"] for d in below)), thread=True, coordinator=root))
    return units


def _active_threads(conn: Connection, threads: Sequence[str]) -> set[str]:
    """The ``threads`` with a pending or running session anywhere under them."""
    trees = _subtrees(conn, threads)
    return {t for t, below in trees.items() if any(d["status"] in ACTIVE_STATUSES for d in below)}


def _worker_units(conn: Connection, cutoff: datetime, busy: Collection[str], skip: Collection[str]) -> list[_Unit]:
    c = chat_sessions.c
    parent = chat_sessions.alias("parent")
    rows = conn.execute(
        sa.select(c.id, c.parent_session_id)
        .join(parent, parent.c.id == c.parent_session_id)
        .where(parent.c.parent_session_id.is_(None), c.status.in_(TERMINAL_STATUSES),
               c.closed_at.is_not(None), c.closed_at < cutoff)
        .order_by(c.closed_at, c.id)
    ).all()
    rows = [r for r in rows if r.parent_session_id not in busy and r.parent_session_id not in skip]
    active = _active_threads(conn, sorted({r.parent_session_id for r in rows}))
    rows = [r for r in rows if r.parent_session_id not in active]
    units: list[_Unit] = []
    for part in _chunks([r.id for r in rows]):
        trees = _subtrees(conn, part)
        coordinator = {r.id: r.parent_session_id for r in rows}
        for root in part:
            below = trees[root]
            if all(d["status"] in TERMINAL_STATUSES and d["closed_at"] is not None and to_utc(d["closed_at"]) < cutoff
                   for d in below):
                units.append(_Unit(root=root, ids=(root, *(d["id"] for d in below)), thread=False,
                                   coordinator=coordinator[root]))
    return units


def find_units(engine: Engine, cutoff: datetime, busy: Collection[str]) -> list[_Unit]:
    """Every deletable subtree (threads first, then workers of kept threads)."""
    with read_tx(engine) as conn:
        threads = _thread_units(conn, cutoff, busy)
        doomed = {u.root for u in threads}
        return threads + _worker_units(conn, cutoff, busy, doomed)


def _still_deletable(conn: Connection, unit: _Unit, cutoff: datetime) -> bool:
    """Re-check ``unit`` inside the delete transaction: its sessions are
    exactly the ones found (nothing new under it), none is pending or running,
    and — for a thread — no message newer than the cutoff arrived."""
    c = chat_sessions.c
    trees = _subtrees(conn, [unit.root])
    ids = (unit.root, *(d["id"] for d in trees[unit.root]))
    if set(ids) != set(unit.ids):
        return False
    rows = conn.execute(sa.select(c.id, c.status).where(c.id.in_(ids))).all()
    if len(rows) != len(ids) or any(r.status in ACTIVE_STATUSES for r in rows):
        return False
    if not unit.thread and _active_threads(conn, [unit.coordinator]):
        return False
    if unit.thread:
        m = chat_messages.c
        newer = conn.execute(sa.select(sa.func.count()).select_from(chat_messages)
                             .where(m.session_id.in_(ids), m.created_at >= cutoff)).scalar_one()
        return newer == 0
    return True


def _read_busy(busy: Callable[[], Collection[str]]) -> set[str]:
    """``busy()`` read from this worker thread: a dict of the event loop may
    change size while it is copied, so a copy that raised is tried again."""
    for _ in range(100):
        try:
            return set(busy())
        except RuntimeError:
            continue
    raise RuntimeError("could not read the running turns")


def delete_units(engine: Engine, units: Sequence[_Unit], cutoff: datetime,
                 busy: Callable[[], Collection[str]]) -> RetentionReport:
    """Delete ``units`` in one transaction (each re-checked first; ``busy()``:
    the threads with a running turn, read inside the transaction)."""
    report = RetentionReport(batches=1)
    with write_tx(engine) as conn:
        running = _read_busy(busy)
        keep = [u for u in units if u.coordinator not in running and _still_deletable(conn, u, cutoff)]
        ids = [i for u in keep for i in u.ids]
        if not ids:
            return RetentionReport()
        report.threads = sum(1 for u in keep if u.thread)
        report.workers = sum(len(u.ids) for u in keep) - report.threads
        for part in _chunks(ids):
            report.messages += conn.execute(sa.delete(chat_messages).where(chat_messages.c.session_id.in_(part))).rowcount
            report.audit_rows += conn.execute(sa.delete(audit_logs).where(audit_logs.c.session_id.in_(part))).rowcount
            report.proposals += conn.execute(
                sa.delete(mutating_proposals).where(mutating_proposals.c.session_id.in_(part))).rowcount
            conn.execute(sa.update(mutating_proposals).where(mutating_proposals.c.reviewer_session_id.in_(part))
                         .values(reviewer_session_id=None))
            report.summaries += conn.execute(
                sa.delete(thread_summaries).where(thread_summaries.c.session_id.in_(part))).rowcount
            conn.execute(sa.update(thread_summaries).where(thread_summaries.c.summarizer_session_id.in_(part))
                         .values(summarizer_session_id=None))
            report.turn_origins += conn.execute(
                sa.delete(turn_origins).where(turn_origins.c.session_id.in_(part))).rowcount
            conn.execute(sa.delete(pending_messages).where(pending_messages.c.session_id.in_(part)))
        # children before parents (each unit's ids are breadth first); a
        # cascading foreign key may take a child with its parent, so the rows
        # gone are counted, not the statement's rowcount
        for part in _chunks(list(reversed(ids))):
            conn.execute(sa.delete(chat_sessions).where(chat_sessions.c.id.in_(part)))
        left = sum(conn.execute(sa.select(sa.func.count()).select_from(chat_sessions)
                                .where(chat_sessions.c.id.in_(part))).scalar_one() for part in _chunks(ids))
        report.sessions = len(ids) - left
    return report


def _batches(units: Sequence[_Unit], size: int) -> Iterable[list[_Unit]]:
    batch: list[_Unit] = []
    n = 0
    for unit in units:
        if batch and n + len(unit.ids) > size:
            yield batch
            batch, n = [], 0
        batch.append(unit)
        n += len(unit.ids)
    if batch:
        yield batch


async def sweep(store: Any, days: float, *, busy: Callable[[], Collection[str]] = frozenset,
                now: datetime | None = None, batch_size: int = DEFAULT_BATCH) -> RetentionReport:
    """Delete what ``days`` of retention no longer keeps (see the module doc)
    and log one ``retention_sweep`` line with the counts; returns them.

    ``store``: a :class:`~ongridd.store.store.Store`.  ``busy()``: ids of
    coordinator threads with a running turn (never touched).  ``now``: the
    clock (default: the system's).  ``batch_size``: sessions per
    transaction (a bigger tree still goes in one).  Raises StoreError when
    the database fails (batches already committed stay deleted).
    Cancellation: a transaction in flight commits or rolls back whole; the
    batches after it are not run.
    """
    if not (math.isfinite(days) and 0 < days <= 36500):
        raise ValueError(f"days: expected a positive number up to 36500, got {days!r}")
    cutoff = (now or utcnow()) - timedelta(days=days)
    db = store._db
    units = await db.run_read("find sessions past retention", find_units, cutoff, frozenset(busy()))
    total = RetentionReport()
    try:
        for batch in _batches(units, max(1, batch_size)):
            got = await db.run("delete sessions past retention", delete_units, batch, cutoff, busy)
            for key, value in got.as_dict().items():
                setattr(total, key, getattr(total, key) + value)
    finally:
        log.info("retention_sweep", days=days, cutoff=cutoff.isoformat(), **total.as_dict())
    return total


async def retention_loop(store: Any, days: float, *, busy: Callable[[], Collection[str]] = frozenset,
                         first_delay_s: float | None = None, interval_s: float | None = None,
                         removed: Callable[[RetentionReport], None] | None = None) -> None:
    """Run :func:`sweep` ``first_delay_s`` (default ``FIRST_SWEEP_DELAY_S``)
    after start, then every ``interval_s`` (default ``SWEEP_INTERVAL_S``),
    until cancelled (the daemon's root nursery runs it).  A failing sweep is
    logged (``retention_sweep_failed``) and tried again at the next interval.
    ``removed(report)`` is called after a sweep that deleted a thread (the
    runtime drops what it remembers of threads).  Cancellation stops it at
    once (see :func:`sweep`)."""
    await trio.sleep(FIRST_SWEEP_DELAY_S if first_delay_s is None else first_delay_s)
    while True:
        try:
            report = await sweep(store, days, busy=busy)
            if removed is not None and report.threads:
                removed(report)
        except Exception:
            log.exception("retention_sweep_failed", days=days)
        await trio.sleep(SWEEP_INTERVAL_S if interval_s is None else interval_s)


__all__ = ["RetentionReport", "retention_loop", "sweep"]
