"""The store writer: queued writes are delayed, never dropped (SQLite and PostgreSQL).

Ordering and seqs, batching (many writes, one transaction), a bad row
retried alone, transient errors retried, the submitting task's
cancellation, the shutdown drain, and a write that finally fails being
logged and reported to its owner.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa
import trio
from sqlalchemy.engine import make_url

from ongridd.errors import NotFound, StoreError
from ongridd.store import Store, open_store
from ongridd.store.rows import utcnow
from ongridd.store.writer import StoreWriter, running_writer


def _events(caplog, name: str) -> list[dict]:
    return [getattr(r, "ongrid_fields", {}) | {"level": r.levelname} for r in caplog.records if r.msg == name]


async def _worker(store: Store, parent: str, agent: str = "w") -> str:
    row = await store.create_session(agent_id=agent, user_id="u", parent_session_id=parent, status="pending")
    return row["id"]


async def test_order_seq_and_batching(store):
    """Interleaved messages of three sessions keep their order with seqs
    1..n each; 300 writes queued at once take three transactions of 100."""
    coord, _ = await store.get_or_create_coordinator("u", "t")
    sids = [coord["id"], await _worker(store, coord["id"]), await _worker(store, coord["id"])]
    async with running_writer(store, max_batch=100) as writer:
        pending = [writer.append_message(sids[i % 3], owner=coord["id"], role="user", content=f"m{i}")
                   for i in range(300)]
        assert await writer.flush(coord["id"])
        assert writer.transactions == 3 and writer.committed == 300
        assert [p.result for p in pending[:6]] == [1, 1, 1, 2, 2, 2]
    for k, sid in enumerate(sids):
        rows = await store.load_messages(sid)
        assert [r["seq"] for r in rows] == list(range(1, 101))
        assert [r["content"] for r in rows] == [f"m{i}" for i in range(k, 300, 3)]


async def test_seqs_stay_gapless_with_direct_appends_racing(store):
    """Writer batches and direct ``Store.append_message`` calls on the same
    session never collide: 1..n without gaps or duplicates."""
    coord, _ = await store.get_or_create_coordinator("u", "race")
    sid = coord["id"]
    async with running_writer(store, max_batch=7) as writer:
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(lambda i=i: store.append_message(sid, role="user", content=f"direct{i}"))
            for i in range(40):
                writer.append_message(sid, owner=sid, role="assistant", content=f"queued{i}")
        await writer.flush(sid)
    rows = await store.load_messages(sid)
    assert [r["seq"] for r in rows] == list(range(1, 61))
    queued = [r["content"] for r in rows if r["content"].startswith("queued")]
    assert queued == [f"queued{i}" for i in range(40)]  # the writer's own order is kept


async def test_a_bad_row_is_retried_alone_and_reported(store, caplog):
    """One write naming an unknown session fails alone (logged as an error
    with what and session, reported to its owner); the rest of its batch is
    committed."""
    coord, _ = await store.get_or_create_coordinator("u", "bad")
    sid = coord["id"]
    missing = "00000000-0000-4000-8000-000000000000"
    caplog.set_level(logging.WARNING, logger="ongridd")
    async with running_writer(store) as writer:
        first = writer.append_message(sid, owner=sid, role="user", content="before")
        bad = writer.add_audit(session_id=missing, owner=sid, tool_name="t", arguments="{}", result="r",
                               status="ok", duration_ms=1)
        audit_ok = writer.add_audit(session_id=sid, owner=sid, tool_name="t", arguments="{}", result="r",
                                    status="ok", duration_ms=2)
        last = writer.append_message(sid, owner=sid, role="assistant", content="after")
        await writer.flush(sid)
        assert (first.result, last.result) == (1, 2)
        assert isinstance(bad.error, NotFound)
        with pytest.raises(NotFound):
            await bad.wait()
        assert isinstance(await audit_ok.wait(), str)
        failures = writer.take_failures(sid)
        assert len(failures) == 1 and failures[0].startswith(f"audit of session {missing}:")
        assert writer.take_failures(sid) == []  # taken once
    assert [r["content"] for r in await store.load_messages(sid)] == ["before", "after"]
    assert [a["duration_ms"] for a in await store.list_audit(sid)] == [2]
    (err,) = _events(caplog, "store_write_failed")
    assert err["level"] == "ERROR" and err["what"] == "audit" and err["session_id"] == missing
    assert _events(caplog, "store_batch_failed")  # the batch was split, not dropped


async def test_invalid_values_fail_at_once_and_are_reported(store, caplog):
    coord, _ = await store.get_or_create_coordinator("u", "invalid")
    caplog.set_level(logging.ERROR, logger="ongridd")
    async with running_writer(store) as writer:
        bad = writer.append_message(coord["id"], owner=coord["id"], role="robot", content="x")
        assert bad.done.is_set() and isinstance(bad.error, ValueError)
        assert writer.take_failures(coord["id"])[0].startswith("message of session")
    assert _events(caplog, "store_write_failed")


async def test_cancelling_the_submitter_does_not_drop_the_write(db_url):
    """The old failure: every pool slot busy longer than the submitter is
    willing to wait.  The submitter gives up waiting; the write still lands."""
    async with open_store(db_url, pool_size=1) as store:
        coord, _ = await store.get_or_create_coordinator("u", "cancel")
        sid = coord["id"]
        release = threading.Event()
        async with running_writer(store) as writer, trio.open_nursery() as nursery:
            # hold the only database slot
            nursery.start_soon(store._db.run, "hold the slot", lambda _engine: release.wait(10))
            await trio.sleep(0.05)
            with trio.move_on_after(0.3) as scope:
                pending = writer.append_message(sid, owner=sid, role="user", content="kept")
                await pending.wait()
            assert scope.cancelled_caught and not pending.done.is_set()
            release.set()
            assert await writer.flush(sid, timeout_s=10)
            assert pending.result == 1
        assert [r["content"] for r in await store.load_messages(sid)] == ["kept"]


async def test_shutdown_drains_every_queued_write(store):
    coord, _ = await store.get_or_create_coordinator("u", "drain")
    sid = coord["id"]
    async with running_writer(store, max_batch=10) as writer:
        for i in range(95):
            writer.append_message(sid, owner=sid, role="user", content=str(i))
        writer.close_session(sid, "completed", owner=sid)  # a coordinator row: refused quietly (False)
        assert writer.queued == 96
    assert writer.queued == 0 and writer.committed == 96
    assert len(await store.load_messages(sid)) == 95
    late = writer.append_message(sid, owner=sid, role="user", content="after the writer stopped")
    assert isinstance(late.error, StoreError) and "stopped" in str(late.error)


async def test_cancelling_the_writers_nursery_does_not_stop_it_before_aclose(store):
    """A turn cancelled together with the writer's nursery still hands over
    its last write, and aclose() commits it."""
    coord, _ = await store.get_or_create_coordinator("u", "shield")
    sid = coord["id"]
    writer = StoreWriter(store)
    with trio.CancelScope() as outer:
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            outer.cancel()
            try:
                await trio.sleep_forever()
            finally:
                writer.append_message(sid, owner=sid, role="user", content="from a finally")
                with trio.CancelScope(shield=True):
                    await writer.aclose()
    assert [r["content"] for r in await store.load_messages(sid)] == ["from a finally"]


async def test_drain_timeout_fails_and_logs_what_is_left(db_url, caplog):
    caplog.set_level(logging.ERROR, logger="ongridd")
    async with open_store(db_url, pool_size=1) as store:
        coord, _ = await store.get_or_create_coordinator("u", "timeout")
        sid = coord["id"]
        release = threading.Event()
        writer = StoreWriter(store)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store._db.run, "hold the slot", lambda _engine: release.wait(10))
            await trio.sleep(0.05)
            await nursery.start(writer.run)
            pending = [writer.append_message(sid, owner=sid, role="user", content=str(i)) for i in range(3)]
            with trio.CancelScope(shield=True):
                await writer.aclose(timeout_s=0.3)
            release.set()
        assert all(isinstance(p.error, StoreError) and "stopped" in str(p.error) for p in pending)
    assert _events(caplog, "store_writer_drain_timeout")
    assert len(_events(caplog, "store_write_failed")) == 3


async def test_writes_of_every_kind_in_one_batch(store):
    """Create, mark running, message, audit and close of a worker queued back
    to back commit in one transaction, in that order."""
    coord, _ = await store.get_or_create_coordinator("u", "kinds")
    owner = coord["id"]
    async with running_writer(store) as writer:
        created = writer.create_session(owner=owner, agent_id="w", user_id="u", parent_session_id=owner,
                                        description="d")
        sid = created.session_id
        running = writer.mark_running(sid, owner=owner)
        msg = writer.append_message(sid, owner=owner, role="user", content="brief")
        aud = writer.add_audit(session_id=sid, owner=owner, tool_name="t", arguments="{}", result="r",
                               status="ok", duration_ms=0)
        closed = writer.close_session(sid, "completed", "done", owner=owner)
        await writer.flush(owner)
        assert writer.transactions == 1
        assert (await created.wait())["status"] == "pending"
        assert (await running.wait())["status"] == "running"
        assert await msg.wait() == 1 and await aud.wait() and await closed.wait() is True
    row = await store.get_session(sid)
    assert (row["status"], row["close_reason"]) == ("completed", "done") and row["started_at"] and row["closed_at"]



def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.parametrize("split", [False, True], ids=["one batch", "retried one by one"])
async def test_rows_carry_the_time_their_write_was_made_not_the_commits(store, split):
    """A write held by the group commit keeps the time it was submitted: the
    audit and the session tree say when each step happened, not when the
    batch was committed — on the batched path and on the one-write-at-a-time
    path a failed batch is retried on."""
    coord, _ = await store.get_or_create_coordinator("u", f"times-{split}")
    owner = coord["id"]
    async with running_writer(store, linger_s=30.0) as writer:
        first = utcnow()
        created = writer.create_session(owner=owner, agent_id="w", user_id="u", parent_session_id=owner)
        sid = created.session_id
        writer.mark_running(sid, owner=owner)
        writer.append_message(sid, owner=owner, role="user", content="brief")
        writer.add_audit(session_id=sid, owner=owner, tool_name="t", arguments="{}", result="r",
                         status="ok", duration_ms=0)
        if split:  # a row of an unknown session: the batch fails and each write is retried alone
            writer.add_audit(session_id="00000000-0000-4000-8000-000000000000", owner=owner, tool_name="t",
                             arguments="{}", result="r", status="ok", duration_ms=0)
        writer.close_session(sid, "completed", "done", owner=owner)
        last = utcnow() + timedelta(microseconds=8)  # the per-batch strictly-increasing nudge
        await trio.sleep(0.3)  # held: nobody waits yet
        committing = utcnow()
        assert await writer.flush(owner)
    row = await store.get_session(sid)
    times = [row["created_at"], row["started_at"], row["closed_at"],
             (await store.load_messages(sid))[0]["created_at"], (await store.list_audit(sid))[0]["created_at"]]
    assert all(first <= _when(t) <= last < committing for t in times), (first, times, committing)
    assert times[:3] == sorted(times[:3]) and len(set(times)) == len(times)  # submission order, distinct


# ---- transient errors --------------------------------------------------------


@contextlib.asynccontextmanager
async def _locked_sqlite(tmp_path):
    """``(store, session id, other)``: a store with a short busy timeout and a
    second connection ``other`` holding the write lock (``BEGIN IMMEDIATE``)."""
    path = tmp_path / "ongrid.db"
    async with open_store(f"sqlite:///{path}", busy_timeout_s=0.05) as store:
        coord, _ = await store.get_or_create_coordinator("u", "locked")
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            yield store, coord["id"], other
        finally:
            other.close()


async def test_sqlite_database_locked_is_retried_until_it_commits(tmp_path, caplog):
    """Another process holds the SQLite write lock for a while (the writer's
    busy timeout is short): the writer backs off and retries, nothing is lost."""
    caplog.set_level(logging.WARNING, logger="ongridd")
    async with _locked_sqlite(tmp_path) as (store, sid, other):
        async with running_writer(store) as writer:
            pending = writer.append_message(sid, owner=sid, role="user", content="waited")
            pending.commit_soon()  # no group-commit hold: the writer meets the lock at once
            await trio.sleep(0.6)
            assert not pending.done.is_set()
            other.execute("ROLLBACK")
            assert await writer.flush(sid, timeout_s=10)
            assert pending.result == 1 and writer.failed == 0
        assert [r["content"] for r in await store.load_messages(sid)] == ["waited"]
    retries = _events(caplog, "store_write_retry")
    assert retries and "locked" in retries[0]["error"]


async def test_transient_errors_past_the_retry_window_fail_and_are_reported(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="ongridd")
    async with _locked_sqlite(tmp_path) as (store, sid, _other):
        async with running_writer(store, retry_for_s=0.5) as writer:
            pending = [writer.append_message(sid, owner=sid, role="user", content=str(i)) for i in range(3)]
            assert await writer.flush(sid, timeout_s=10)
        assert all(isinstance(p.error, StoreError) and "locked" in str(p.error) for p in pending)
        assert len(writer.take_failures(sid)) == 3
    assert len(_events(caplog, "store_write_failed")) == 3


@pytest.mark.postgres
async def test_postgres_lock_timeout_is_retried_until_it_commits(pg_url, caplog):
    """PostgreSQL: another transaction holds the session row past the
    writer's ``lock_timeout`` (SQLSTATE 55P03): retried, then committed."""
    caplog.set_level(logging.WARNING, logger="ongridd")
    url = make_url(pg_url)
    options = url.query.get("options", "")
    short = url.update_query_dict({"options": f"{options} -clock_timeout=100"}).render_as_string(hide_password=False)
    async with open_store(short) as store:
        coord, _ = await store.get_or_create_coordinator("u", "pglock")
        sid = coord["id"]
        engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                tx = conn.begin()
                conn.execute(sa.text("SELECT id FROM chat_sessions WHERE id = :i FOR UPDATE"), {"i": sid})
                async with running_writer(store) as writer:
                    pending = writer.append_message(sid, owner=sid, role="user", content="waited")
                    pending.commit_soon()  # no group-commit hold: the writer meets the lock at once
                    await trio.sleep(0.6)
                    assert not pending.done.is_set()
                    tx.rollback()
                    assert await writer.flush(sid, timeout_s=10)
                    assert pending.result == 1 and writer.failed == 0
        finally:
            engine.dispose()
        assert [r["content"] for r in await store.load_messages(sid)] == ["waited"]
    retries = _events(caplog, "store_write_retry")
    assert retries and "lock" in retries[0]["error"].lower()


async def test_group_commit_holds_unawaited_writes_and_a_waiter_ends_the_hold(store):
    """Writes nobody waits for are held (up to ``linger_s``) and then
    committed together; a waiter, ``commit_soon`` or ``flush`` ends the hold
    at once, taking everything queued before."""
    coord, _ = await store.get_or_create_coordinator("u", "group")
    sid = coord["id"]
    async with running_writer(store, linger_s=30.0) as writer:
        first = [writer.append_message(sid, owner=sid, role="user", content=f"held {i}") for i in range(3)]
        await trio.sleep(0.2)
        assert not any(w.done.is_set() for w in first) and writer.transactions == 0  # held, not lost
        last = writer.append_message(sid, owner=sid, role="assistant", content="awaited")
        with trio.fail_after(10):
            assert await last.wait() == 4  # the waiter's write and all before it: one transaction
        assert writer.transactions == 1 and all(w.done.is_set() for w in first)
        soon = writer.append_message(sid, owner=sid, role="user", content="soon")
        soon.commit_soon()
        with trio.fail_after(10):
            await soon.done.wait()
        assert writer.transactions == 2
        writer.append_message(sid, owner=sid, role="assistant", content="flushed")
        with trio.fail_after(10):
            assert await writer.flush(sid)
        assert writer.transactions == 3
        writer.append_message(sid, owner=sid, role="user", content="left for the drain")
    # aclose does not wait out the hold: the drain commits what is left
    assert writer.queued == 0
    assert [r["content"] for r in await store.load_messages(sid)][-1] == "left for the drain"


async def test_group_commit_ends_after_linger_s_with_nobody_waiting(store):
    coord, _ = await store.get_or_create_coordinator("u", "linger")
    sid = coord["id"]
    async with running_writer(store, linger_s=0.05) as writer:
        pending = [writer.append_message(sid, owner=sid, role="user", content=str(i)) for i in range(5)]
        with trio.fail_after(10):
            while not all(w.done.is_set() for w in pending):
                await trio.sleep(0.01)
        assert writer.transactions == 1 and [w.result for w in pending] == [1, 2, 3, 4, 5]


async def test_linger_must_not_be_negative(store):
    with pytest.raises(ValueError, match="linger_s"):
        StoreWriter(store, linger_s=-1)


async def test_sqlite_small_batches_commit_on_the_loops_thread_and_never_wait_there(sqlite_url):
    """SQLite: a small batch with nothing queued behind it is committed on the
    event loop's thread; when another connection holds the write lock it goes
    to a thread instead (which waits), so the loop keeps running meanwhile;
    the pool's connections keep their busy timeout and WAL checkpointing."""
    import sqlite3

    async with open_store(sqlite_url) as store:
        coord, _ = await store.get_or_create_coordinator("u", "inline")
        sid = coord["id"]
        async with running_writer(store, linger_s=0) as writer:
            assert await writer.append_message(sid, owner=sid, role="user", content="one").wait() == 1
            assert writer.inline_commits == 1 and writer.transactions == 1
            other = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), timeout=0, isolation_level=None,
                                    check_same_thread=False)
            try:
                other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
                pending = writer.append_message(sid, owner=sid, role="assistant", content="two")
                ticks = 0
                with trio.move_on_after(0.5):
                    while True:  # the loop is not blocked by the waiting commit
                        await trio.sleep(0.01)
                        ticks += 1
                assert ticks >= 10 and not pending.is_done
                other.execute("ROLLBACK")
                with trio.fail_after(30):
                    assert await pending.wait() == 2
                assert writer.inline_commits == 1 and writer.transactions == 2  # that one went to a thread
            finally:
                other.close()

            def settings(engine):
                with engine.connect() as conn:
                    return (conn.exec_driver_sql("PRAGMA busy_timeout").scalar(),
                            conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar())

            for _ in range(3):  # every pooled connection the inline path used is back to normal
                assert await store._db.run_raw(settings) == (60_000, 1000)


async def test_inline_max_zero_and_postgres_always_use_a_thread(db_url):
    async with open_store(db_url) as store:
        coord, _ = await store.get_or_create_coordinator("u", "threaded")
        sid = coord["id"]
        for kwargs in ({"inline_max": 0}, {}):
            async with running_writer(store, linger_s=0, **kwargs) as writer:
                await writer.append_message(sid, owner=sid, role="user", content="x").wait()
                sqlite_default = "sqlite" in db_url and not kwargs
                assert writer.inline_commits == (1 if sqlite_default else 0)


async def test_commits_on_the_loops_thread_get_their_wal_checkpoints_in_the_background(sqlite_url):
    from ongridd.store import writer as writer_module

    async with open_store(sqlite_url) as store:
        coord, _ = await store.get_or_create_coordinator("u", "checkpoint")
        sid = coord["id"]
        async with running_writer(store, linger_s=0) as writer:
            for i in range(writer_module.INLINE_CHECKPOINT_EVERY + 5):
                await writer.append_message(sid, owner=sid, role="user", content=f"m{i}").wait()
            assert writer.inline_commits == writer.transactions == writer_module.INLINE_CHECKPOINT_EVERY + 5
            with trio.fail_after(10):
                while store._db.checkpoints < 1:
                    await trio.sleep(0.01)
        assert len(await store.load_messages(sid)) == writer_module.INLINE_CHECKPOINT_EVERY + 5
    assert not store._db.checkpoint_soon()  # closed: nothing starts


def _held(store: Store) -> list[tuple[str, str]]:
    from ongridd.store.schema import pending_messages

    with store._db.engine.connect() as conn:
        return [(r.session_id, r.content) for r in conn.execute(
            sa.select(pending_messages).order_by(pending_messages.c.created_at))]


@pytest.mark.parametrize("same_batch", [True, False], ids=["one batch", "two batches"])
async def test_a_held_message_is_deleted_with_the_message_that_carries_it(store, same_batch):
    """``hold_message`` keeps a message in ``pending_messages`` (its id known
    at once); the ``append_message`` that ``settles`` it deletes it in the
    same transaction — whether both are in one batch or the hold was
    committed long before."""
    coord, _ = await store.get_or_create_coordinator("u", f"held-{same_batch}")
    sid = coord["id"]
    async with running_writer(store) as writer:
        writer.append_message(sid, owner=sid, role="user", content="first")
        held = writer.hold_message(sid, owner=sid, content="also web-2")
        other = writer.hold_message(sid, owner=sid, content="and web-3")
        assert held.values["id"] and held.values["id"] != other.values["id"]
        if not same_batch:
            assert await held.wait() == held.values["id"]
            assert _held(store) == [(sid, "also web-2"), (sid, "and web-3")]
        carried = writer.append_message(sid, owner=sid, role="user", content="also web-2", name="joined_turn",
                                        settles=[held.values["id"]])
        assert await carried.wait() == 2
        assert writer.take_failures(sid) == []
    assert _held(store) == [(sid, "and web-3")]  # only what was settled is gone
    assert [(m["content"], m["name"]) for m in await store.load_messages(sid)] == [
        ("first", None), ("also web-2", "joined_turn")]


async def test_a_batch_retried_write_by_write_still_settles_with_its_message(store):
    """A bad row splits the batch into one transaction per write (the
    checked path): the held message and the message that carries it are
    still written and deleted together."""
    coord, _ = await store.get_or_create_coordinator("u", "held-checked")
    sid = coord["id"]
    missing = "00000000-0000-4000-8000-000000000000"
    async with running_writer(store) as writer:
        held = writer.hold_message(sid, owner=sid, content="keep me")
        bad = writer.append_message(missing, owner=sid, role="user", content="nowhere")
        carried = writer.append_message(sid, owner=sid, role="user", content="keep me", settles=[held.values["id"]])
        await writer.flush()
        assert isinstance(bad.error, NotFound) and carried.result == 1 and held.result == held.values["id"]
    assert _held(store) == []
    assert [m["content"] for m in await store.load_messages(sid)] == ["keep me"]


async def test_holding_an_empty_message_fails_at_once(store):
    coord, _ = await store.get_or_create_coordinator("u", "held-empty")
    async with running_writer(store) as writer:
        bad = writer.hold_message(coord["id"], owner=coord["id"], content=None)  # type: ignore[arg-type]
        assert bad.done.is_set() and isinstance(bad.error, ValueError)
    assert _held(store) == []


async def test_held_messages_never_stored_are_dropped(store):
    """``drop_held`` deletes held messages without a message carrying them
    (a turn stopped before it ran), in the batch that held them or later."""
    coord, _ = await store.get_or_create_coordinator("u", "held-dropped")
    sid = coord["id"]
    async with running_writer(store) as writer:
        early = writer.hold_message(sid, owner=sid, content="waits for a slot")
        await early.wait()
        late = writer.hold_message(sid, owner=sid, content="sent meanwhile")
        kept = writer.hold_message(sid, owner=sid, content="another turn's")
        await writer.drop_held(sid, [early.values["id"], late.values["id"]], owner=sid).wait()
        assert writer.take_failures(sid) == [] and kept.result == kept.values["id"]
    assert _held(store) == [(sid, "another turn's")]
    assert await store.load_messages(sid) == []
