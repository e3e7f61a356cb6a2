"""The retention sweep (``retention.days``) on SQLite and PostgreSQL: old
closed rows go with everything that hangs off them; open threads, running
workers, busy threads and recent rows stay; one log line has the counts."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
import sqlalchemy as sa
import trio

from ongridd.store import retention
from ongridd.store.rows import new_id, utcnow
from ongridd.store.schema import (
    audit_logs,
    chat_messages,
    chat_sessions,
    mutating_proposals,
    thread_summaries,
    turn_origins,
)

DAYS = 30


class World:
    """Sessions with chosen ages, built through the store and then aged in SQL."""

    def __init__(self, store):
        self.store = store
        self.now = utcnow()

    def ago(self, days: float):
        return self.now - timedelta(days=days)

    def _exec(self, stmt):
        with self.store._db.engine.begin() as conn:
            return conn.execute(stmt)

    async def thread(self, name: str, *, age: float, last_message: float | None = None) -> str:
        row, _ = await self.store.get_or_create_coordinator("alice", name)
        sid = row["id"]
        await self.store.append_message(sid, role="user", content=f"{name} question")
        await self.store.append_message(sid, role="assistant", content=f"{name} answer")
        self._exec(sa.update(chat_sessions).where(chat_sessions.c.id == sid).values(created_at=self.ago(age)))
        self._exec(sa.update(chat_messages).where(chat_messages.c.session_id == sid)
                   .values(created_at=self.ago(age if last_message is None else last_message)))
        return sid

    async def worker(self, parent: str, *, age: float, closed: float | None, agent="specialist-disk") -> str:
        row = await self.store.create_session(agent_id=agent, user_id="alice", parent_session_id=parent,
                                              description=f"{agent} under {parent[:8]}", status="running")
        sid = row["id"]
        await self.store.append_message(sid, role="user", content="brief")
        await self.store.append_message(sid, role="assistant", content="finding")
        await self.store.add_audit(session_id=sid, tool_name="host_df", arguments="{}", result="ok", status="ok",
                                   duration_ms=3, tool_call_id="call_0_0")
        if closed is not None:
            await self.store.close_session(sid, "completed")
        values = {"created_at": self.ago(age), "started_at": self.ago(age)}
        if closed is not None:
            values["closed_at"] = self.ago(closed)
        self._exec(sa.update(chat_sessions).where(chat_sessions.c.id == sid).values(**values))
        self._exec(sa.update(chat_messages).where(chat_messages.c.session_id == sid).values(created_at=self.ago(age)))
        self._exec(sa.update(audit_logs).where(audit_logs.c.session_id == sid).values(created_at=self.ago(age)))
        return sid

    async def proposal(self, session_id: str, reviewer: str | None) -> str:
        pid = await self.store.create_proposal(session_id=session_id, action="restart", target="nginx",
                                               reason="stuck", blast_radius="single_host", operator="alice",
                                               tool_call_id="call_0_0")
        if reviewer:
            await self.store.decide_proposal(pid, decision="approve", decision_reason="fine",
                                             reviewer_session_id=reviewer)
        return pid

    def extras(self, thread: str, summarizer: str | None = None) -> None:
        self._exec(sa.insert(thread_summaries).values(id=new_id(), session_id=thread, through_seq=2,
                                                      content="summary", source="model",
                                                      summarizer_session_id=summarizer, created_at=self.ago(40)))
        self._exec(sa.insert(turn_origins).values(id=new_id(), session_id=thread, message_seq=1, platform="slack",
                                                  im_user="U1", conversation="C1", created_at=self.ago(40)))

    def count(self, table, column, ids) -> int:
        with self.store._db.engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(table).where(column.in_(list(ids)))).scalar_one()

    def sessions(self) -> set[str]:
        with self.store._db.engine.connect() as conn:
            return {r.id for r in conn.execute(sa.select(chat_sessions.c.id))}


@pytest.fixture
async def world(store):
    w = World(store)
    ids = {}
    # A: idle for 40 days, with a worker, its reviewer, a proposal, a summary and a turn origin → all gone
    ids["a"] = await w.thread("a", age=40)
    ids["a_worker"] = await w.worker(ids["a"], age=40, closed=39)
    ids["a_reviewer"] = await w.worker(ids["a_worker"], age=40, closed=39, agent="reviewer")
    ids["a_proposal"] = await w.proposal(ids["a_worker"], ids["a_reviewer"])
    w.extras(ids["a"])
    # B: old thread, talked to yesterday → the thread stays; its old closed worker goes, the recent one stays
    ids["b"] = await w.thread("b", age=40, last_message=1)
    ids["b_old"] = await w.worker(ids["b"], age=39, closed=38)
    ids["b_old_reviewer"] = await w.worker(ids["b_old"], age=39, closed=38, agent="reviewer")
    ids["b_old_proposal"] = await w.proposal(ids["b_old"], ids["b_old_reviewer"])
    ids["b_new"] = await w.worker(ids["b"], age=2, closed=1)
    ids["b_coord_proposal"] = await w.proposal(ids["b"], ids["b_old_reviewer"])  # kept; its reviewer goes
    w.extras(ids["b"], summarizer=ids["b_old"])
    # C: old thread with a worker still running → nothing of it goes
    ids["c"] = await w.thread("c", age=40)
    ids["c_running"] = await w.worker(ids["c"], age=40, closed=None)
    ids["c_old"] = await w.worker(ids["c"], age=40, closed=39)
    # D: old and idle, but a turn is running on it now → nothing goes
    ids["d"] = await w.thread("d", age=40)
    ids["d_worker"] = await w.worker(ids["d"], age=40, closed=39)
    # E: an old worker whose reviewer closed yesterday → the worker stays (and so does the thread)
    ids["e"] = await w.thread("e", age=40)
    ids["e_worker"] = await w.worker(ids["e"], age=40, closed=39)
    ids["e_reviewer"] = await w.worker(ids["e_worker"], age=3, closed=1, agent="reviewer")
    # F: a recent thread → stays
    ids["f"] = await w.thread("f", age=2)
    return w, ids


async def test_sweep_removes_exactly_the_old_closed_rows(world, caplog):
    w, ids = world
    caplog.set_level(logging.INFO, logger="ongridd")
    before = w.sessions()
    gone_ids = {ids[k] for k in ("a", "a_worker", "a_reviewer", "b_old", "b_old_reviewer")}
    with w.store._db.engine.connect() as conn:
        gone_messages = conn.execute(sa.select(sa.func.count()).select_from(chat_messages)
                                     .where(chat_messages.c.session_id.in_(list(gone_ids)))).scalar_one()

    report = await retention.sweep(w.store, DAYS, busy=lambda: {ids["d"]}, now=w.now)

    assert w.sessions() == before - gone_ids
    assert (report.threads, report.workers, report.sessions) == (1, 4, 5)
    assert report.messages == gone_messages == 10
    assert report.audit_rows == 4  # a_worker, a_reviewer, b_old, b_old_reviewer
    assert report.proposals == 2  # a's and b_old's; b's own proposal stays
    assert (report.summaries, report.turn_origins) == (1, 1)  # thread a's
    # nothing of the deleted sessions is left anywhere
    for table, column in ((chat_messages, chat_messages.c.session_id), (audit_logs, audit_logs.c.session_id),
                          (mutating_proposals, mutating_proposals.c.session_id),
                          (thread_summaries, thread_summaries.c.session_id),
                          (turn_origins, turn_origins.c.session_id)):
        assert w.count(table, column, gone_ids) == 0, table.name
    # what stays is whole: messages and audit rows of the kept sessions
    kept = before - gone_ids
    assert w.count(chat_messages, chat_messages.c.session_id, kept) == 2 * len(kept)
    assert w.count(audit_logs, audit_logs.c.session_id, kept) == len(kept) - 5  # threads have none
    coord = await w.store.get_proposal(ids["b_coord_proposal"])
    assert coord is not None and coord["reviewer_session_id"] is None  # reference to the deleted reviewer cleared
    with w.store._db.engine.connect() as conn:
        summary = conn.execute(sa.select(thread_summaries).where(thread_summaries.c.session_id == ids["b"])).one()
    assert summary.summarizer_session_id is None
    # the log line
    (line,) = [r for r in caplog.records if r.msg == "retention_sweep"]
    assert line.ongrid_fields["sessions"] == 5 and line.ongrid_fields["messages"] == 10
    assert line.ongrid_fields["threads"] == 1 and line.ongrid_fields["audit_rows"] == 4

    # a second sweep finds nothing more; once the turn on d ends, d goes too
    again = await retention.sweep(w.store, DAYS, busy=lambda: {ids["d"]}, now=w.now)
    assert again.sessions == 0 and again.batches == 0
    last = await retention.sweep(w.store, DAYS, now=w.now)
    assert (last.threads, last.sessions) == (1, 2) and ids["d"] not in w.sessions()
    assert {ids["c"], ids["c_running"], ids["c_old"], ids["e_worker"], ids["f"]} <= w.sessions()


async def test_sweep_goes_in_bounded_batches_and_never_splits_a_tree(world):
    w, ids = world
    report = await retention.sweep(w.store, DAYS, busy=lambda: {ids["d"]}, now=w.now, batch_size=1)
    # units: thread a (3 sessions), b_old with its reviewer (2): one transaction each
    assert report.batches == 2 and report.sessions == 5


async def test_a_row_that_became_busy_after_the_scan_is_not_deleted(world):
    """The candidates are re-checked inside the delete transaction."""
    w, ids = world
    units = await w.store._db.run_read("scan", retention.find_units, w.ago(DAYS), frozenset({ids["d"]}))
    assert {u.root for u in units} == {ids["a"], ids["b_old"]}
    # a new message arrives on thread a after the scan, and b_old's tree gets a running child
    await w.store.append_message(ids["a"], role="user", content="back again")
    await w.store.create_session(agent_id="reviewer", user_id="alice", parent_session_id=ids["b_old"],
                                 status="running")
    got = await w.store._db.run("delete", retention.delete_units, units, w.ago(DAYS), frozenset)
    assert got.sessions == 0
    assert {ids["a"], ids["a_worker"], ids["b_old"]} <= w.sessions()


async def test_retention_days_must_be_positive():
    from ongridd.config import structure
    from ongridd.errors import ConfigError

    assert structure({"retention": {"days": 7}}).retention.days == 7
    assert structure({}).retention.days is None
    for bad in (0, -1, float("inf"), float("nan"), 1e10, 36501):  # 1e10 days: no date to cut at
        with pytest.raises(ConfigError, match="retention.days"):
            structure({"retention": {"days": bad}})
    with pytest.raises(ConfigError):
        structure({"retention": {"days": "soon"}})
    assert structure({"retention": {"days": 36500}}).retention.days == 36500
    for bad in (0, 1e10):
        with pytest.raises(ValueError):
            await retention.sweep(None, bad)


async def test_the_loop_sweeps_after_start_then_daily(autojump_clock, monkeypatch):
    """First sweep ``first_delay_s`` after start, then every interval; a
    failing sweep is logged and the loop carries on."""
    seen = []

    async def recording(store, days, **kw):
        seen.append((trio.current_time(), store, days))
        if len(seen) == 1:
            raise RuntimeError("database away")
        return retention.RetentionReport()

    monkeypatch.setattr(retention, "sweep", recording)
    start = trio.current_time()
    with trio.move_on_after(60 + 2 * 86400 + 1):
        await retention.retention_loop("the-store", 30, first_delay_s=60)
    assert [(round(t - start), s, d) for t, s, d in seen] == [(60, "the-store", 30), (86460, "the-store", 30),
                                                              (172860, "the-store", 30)]


async def test_the_loop_tells_the_runtime_when_it_removed_threads(autojump_clock, monkeypatch):
    """``removed(report)`` runs after a sweep that deleted a thread (the
    runtime then forgets the thread rows and histories it keeps), and not
    after one that deleted none."""
    reports = iter([retention.RetentionReport(threads=0, workers=3), retention.RetentionReport(threads=2)])

    async def fake_sweep(store, days, **kw):
        return next(reports)

    monkeypatch.setattr(retention, "sweep", fake_sweep)
    told = []
    with trio.move_on_after(60 + 86400 + 1):
        await retention.retention_loop("the-store", 30, first_delay_s=60, removed=told.append)
    assert [r.threads for r in told] == [2]
