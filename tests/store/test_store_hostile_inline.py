"""Hostile conditions for the SQLite writes made on the event loop's thread.

``StoreWriter._commit_inline`` and ``Database.run_write_soon`` commit small
transactions on the loop's thread with a busy timeout of 0 and no automatic
WAL checkpoint; ``Database.checkpoint_soon`` checkpoints in the background.
Each test attacks that: a write lock held elsewhere, a long reader, a file
made unwritable or removed, every pool slot busy, constraint violations
inside the transaction, a background checkpoint running at shutdown, two
writers on one file, and PostgreSQL (never inline).  The loop must keep
running (a ticker task measures the longest gap between its ticks; the
bounds are seconds, the normal gap is about 10 ms), no write may be lost or
duplicated, and seqs stay 1..n.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import stat
import subprocess
import threading
import time
import types
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from ongridd.errors import StoreError
from ongridd.store import Store, open_store, sessions
from ongridd.store import engine as engine_module
from ongridd.store import writer as writer_module
from ongridd.store.writer import PendingWrite, StoreWriter, running_writer

#: a loop blocked by a database call shows a gap of the whole lock hold (4 s) or a busy timeout;
#: an unblocked one about 10 ms
LOOP_STALL_LIMIT_S = 2.0
HOLD_S = 4.0
#: the pool settings every connection must have outside a loop-thread transaction
NORMAL_SETTINGS = (60_000, 1000)


class Ticker:
    """A task that sleeps 10 ms at a time and records the longest gap between its wake-ups (s)."""

    def __init__(self) -> None:
        self.max_gap = 0.0
        self.ticks = 0

    async def run(self) -> None:
        last = time.monotonic()
        while True:
            await trio.sleep(0.01)
            now = time.monotonic()
            self.max_gap = max(self.max_gap, now - last)
            last = now
            self.ticks += 1


@contextlib.asynccontextmanager
async def ticking() -> AsyncIterator[Ticker]:
    ticker = Ticker()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker.run)
        yield ticker
        nursery.cancel_scope.cancel()


def _db_path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


async def _pool_settings(store: Store, n: int = 8) -> list[tuple[int, int]]:
    """``(busy_timeout ms, wal_autocheckpoint)`` of ``n`` distinct pool connections (all
    checked out at once: each call waits at a barrier until every other one holds its own)."""
    barrier = threading.Barrier(n, timeout=30)

    def read(engine: Any) -> tuple[int, int]:
        proxy = engine.raw_connection()
        try:
            cur = proxy.dbapi_connection.cursor()
            got = (int(cur.execute("PRAGMA busy_timeout").fetchone()[0]),
                   int(cur.execute("PRAGMA wal_autocheckpoint").fetchone()[0]))
            cur.close()
            barrier.wait()
            return got
        finally:
            proxy.close()

    got: list[tuple[int, int]] = []

    async def one() -> None:
        got.append(await store._db.run_raw(read))

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(one)
    return got


async def _seqs(store: Store, sid: str) -> list[int]:
    return [m["seq"] for m in await store.load_messages(sid)]


# ---- the write lock held by another connection -------------------------------------------


@pytest.mark.parametrize("begin", ["BEGIN IMMEDIATE", "BEGIN EXCLUSIVE"])
async def test_lock_held_elsewhere_the_loop_keeps_running_and_nothing_is_lost(sqlite_url, begin):
    """Another connection holds the write lock for seconds while writes of
    three sessions are queued and five callers race to create one
    coordinator row: the loop keeps ticking, nothing commits while the lock
    is held, everything commits after, seqs 1..n, exactly one creator."""
    async with open_store(sqlite_url) as store, ticking() as ticker:
        coord, _ = await store.get_or_create_coordinator("u", "locked")
        owner = coord["id"]
        sids = [owner] + [(await store.create_session(agent_id="w", user_id="u", parent_session_id=owner,
                                                      status="running"))["id"] for _ in range(2)]
        async with running_writer(store, linger_s=0) as writer:
            assert await writer.append_message(owner, owner=owner, role="user", content="warm").wait() == 1
            other = sqlite3.connect(_db_path(sqlite_url), timeout=0, isolation_level=None, check_same_thread=False)
            try:
                other.execute(begin)
                # released from another thread: a blocked loop could not release it itself
                timer = threading.Timer(HOLD_S, other.execute, ("ROLLBACK",))
                timer.start()
                pending: list[PendingWrite] = []
                created: list[tuple[dict[str, Any], bool]] = []

                async def create() -> None:
                    created.append(await store.get_or_create_coordinator("u", "racing"))

                async with trio.open_nursery() as nursery:
                    for _ in range(5):
                        nursery.start_soon(create)
                    for i in range(90):
                        pending.append(writer.append_message(sids[i % 3], owner=owner, role="user",
                                                             content=f"m{i}"))
                        if i % 10 == 0:
                            await trio.sleep(0.05)
                    await trio.sleep(0.5)
                    assert not any(p.is_done for p in pending) and not created  # the lock is still held
                    with trio.fail_after(120):
                        assert await writer.flush()
                timer.join()
            finally:
                other.close()
            assert writer.failed == 0 and all(p.error is None for p in pending)
        assert ticker.max_gap < LOOP_STALL_LIMIT_S, f"the loop stalled for {ticker.max_gap:.2f} s"
        assert sum(made for _row, made in created) == 1 and len({row["id"] for row, _ in created}) == 1
        assert await _seqs(store, owner) == list(range(1, 32))
        for k, sid in enumerate(sids[1:], start=1):
            rows = await store.load_messages(sid)
            assert [r["seq"] for r in rows] == list(range(1, 31))
            assert [r["content"] for r in rows] == [f"m{i}" for i in range(k, 90, 3)]
        assert await _pool_settings(store) == [NORMAL_SETTINGS] * 8


# ---- a long reader, WAL growth, background checkpoints ---------------------------------


async def test_a_long_reader_never_blocks_inline_commits_or_their_checkpoints(sqlite_url):
    """A reader keeps one snapshot open across hundreds of loop-thread
    commits and several background checkpoints: every commit goes through
    on the loop's thread, checkpoints run (PASSIVE: they skip what the reader
    still needs), the reader's snapshot stays the same, and nothing is lost."""
    async with open_store(sqlite_url) as store, ticking() as ticker:
        coord, _ = await store.get_or_create_coordinator("u", "reader")
        sid = coord["id"]
        reader = sqlite3.connect(_db_path(sqlite_url), isolation_level=None, check_same_thread=False)
        try:
            reader.execute("BEGIN")
            (before,) = reader.execute("SELECT count(*) FROM chat_messages").fetchone()
            async with running_writer(store, linger_s=0) as writer:
                n = 4 * writer_module.INLINE_CHECKPOINT_EVERY + 10
                for i in range(n):
                    assert await writer.append_message(sid, owner=sid, role="user", content=f"r{i}").wait() == i + 1
                with trio.fail_after(30):
                    while store._db.checkpoints < 2:
                        await trio.sleep(0.01)
                # every commit on the loop's thread, but the one after each checkpoint that found the
                # WAL long (it goes through a thread, where SQLite's own checkpoint lets the WAL reset)
                assert writer.transactions == n and n - writer.inline_commits <= store._db.checkpoints
                assert reader.execute("SELECT count(*) FROM chat_messages").fetchone() == (before,)
        finally:
            reader.close()
        assert await _seqs(store, sid) == list(range(1, n + 1))
        assert ticker.max_gap < LOOP_STALL_LIMIT_S
        assert await _pool_settings(store) == [NORMAL_SETTINGS] * 8


async def test_sustained_inline_commits_keep_the_wal_bounded(sqlite_url):
    """Thousands of back-to-back loop-thread commits (each awaited, so every
    one is eligible): the background checkpoints must keep the WAL file
    within a few checkpoint intervals' worth of frames.  The WAL is reset only
    by the commit after a checkpoint that copied all of it; commits go on while
    a background checkpoint runs, so it is reset about every second interval
    of INLINE_CHECKPOINT_EVERY commits (at most 3 frames each here: a message
    row and its index entry), and one more interval may pass while a
    checkpoint thread lags on a loaded machine.  Seen: 10.8-11.2 MB, idle or
    with both cores busy; a WAL never reset reaches about 40 MB."""
    async with open_store(sqlite_url) as store:
        coord, _ = await store.get_or_create_coordinator("u", "wal")
        sid = coord["id"]
        page_size = sqlite3.connect(_db_path(sqlite_url)).execute("PRAGMA page_size").fetchone()[0]
        limit = 3 * writer_module.INLINE_CHECKPOINT_EVERY * 3 * (page_size + 24)  # three intervals' frames
        wal = Path(f"{_db_path(sqlite_url)}-wal")
        async with running_writer(store, linger_s=0) as writer:
            for i in range(4000):
                await writer.append_message(sid, owner=sid, role="user", content="x" * 200 + str(i)).wait()
            # all but a few on the loop's thread: when a background checkpoint finds the WAL long,
            # one commit goes through a thread, where SQLite's own checkpoint lets the WAL be reset
            assert writer.transactions == 4000 and 4000 - 100 <= writer.inline_commits < 4000
            with trio.fail_after(30):  # the last checkpoint has finished
                while store._db._checkpointing:
                    await trio.sleep(0.01)
            size = wal.stat().st_size
        assert size <= limit, (f"WAL grew to {size / 1e6:.1f} MB over 4000 loop-thread commits "
                               f"(limit {limit / 1e6:.1f} MB); {store._db.checkpoints} background checkpoints")


async def test_a_background_checkpoint_that_never_ends_does_not_let_the_wal_grow(sqlite_url, monkeypatch):
    """The checkpoint thread gets no CPU (here: ``checkpoint_soon`` reports one
    still running, for ever): after INLINE_CHECKPOINT_LAG_MAX loop-thread
    commits the next batch goes through a thread, where SQLite's own
    checkpoint runs, so the WAL stays about as small as without inline commits."""
    monkeypatch.setattr(engine_module.Database, "checkpoint_soon", lambda self: False)
    async with open_store(sqlite_url) as store:
        coord, _ = await store.get_or_create_coordinator("u", "stuck")
        sid = coord["id"]
        page_size = sqlite3.connect(_db_path(sqlite_url)).execute("PRAGMA page_size").fetchone()[0]
        limit = 2 * NORMAL_SETTINGS[1] * (page_size + 24)
        async with running_writer(store, linger_s=0) as writer:
            for i in range(3000):
                await writer.append_message(sid, owner=sid, role="user", content="x" * 200 + str(i)).wait()
            assert writer.inline_commits >= 3000 - 3000 // writer_module.INLINE_CHECKPOINT_LAG_MAX - 50
        size = Path(f"{_db_path(sqlite_url)}-wal").stat().st_size
        assert size <= limit, f"WAL grew to {size / 1e6:.1f} MB (limit {limit / 1e6:.1f} MB)"
        assert [m["seq"] for m in await store.load_messages(sid)] == list(range(1, 3001))


# ---- the database file made unwritable, removed ---------------------------------------


@contextlib.contextmanager
def _unwritable_file(path: Path) -> Iterator[None]:
    """Mode 0444, and the immutable flag when running as root (root ignores modes)."""
    path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    immutable = False
    try:
        if os.geteuid() == 0:
            immutable = subprocess.run(["chattr", "+i", str(path)], check=False, capture_output=True).returncode == 0
            if not immutable:
                pytest.skip("cannot make a file unwritable here (root without chattr)")
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=False)
        path.chmod(0o644)


async def test_database_file_made_unwritable_checkpoints_fail_quietly_and_writes_go_on(sqlite_url, caplog):
    """The main file becomes unwritable mid-run (the WAL is not): commits go
    on into the WAL, the background checkpoints fail and are logged (never
    raised, never stuck), the pool keeps its settings, and once the file is
    writable again a checkpoint succeeds."""
    caplog.set_level(logging.WARNING, logger="ongridd")
    every = writer_module.INLINE_CHECKPOINT_EVERY
    async with open_store(sqlite_url) as store, ticking() as ticker:
        coord, _ = await store.get_or_create_coordinator("u", "ro")
        sid = coord["id"]
        async with running_writer(store, linger_s=0) as writer:
            with _unwritable_file(_db_path(sqlite_url)):
                for i in range(2 * every + 5):
                    p = writer.append_message(sid, owner=sid, role="user", content=f"ro{i}")
                    with trio.fail_after(60):
                        await p.settled()
                    assert p.error is None, p.error
                with trio.fail_after(30):
                    while not [r for r in caplog.records if r.msg == "store_checkpoint_failed"]:
                        await trio.sleep(0.01)
                    while store._db._checkpointing:
                        await trio.sleep(0.01)
                done = store._db.checkpoints
            for i in range(every + 1):
                await writer.append_message(sid, owner=sid, role="user", content=f"rw{i}").wait()
            with trio.fail_after(30):
                while store._db.checkpoints == done:
                    await trio.sleep(0.01)
        assert await _seqs(store, sid) == list(range(1, 3 * every + 7))
        assert ticker.max_gap < LOOP_STALL_LIMIT_S
        assert await _pool_settings(store) == [NORMAL_SETTINGS] * 8


async def test_state_dir_removed_mid_run_no_hang_and_no_loop_block(tmp_path):
    """The state dir disappears under a running writer: every later write
    settles (committed, or a StoreError) within a bound, coordinator
    creation returns or raises StoreError, the background checkpoint's
    failure is only logged, and the loop never stalls."""
    state = tmp_path / "state"
    state.mkdir()
    url = f"sqlite:///{state / 'ongrid.db'}"
    async with open_store(url) as store, ticking() as ticker:
        coord, _ = await store.get_or_create_coordinator("u", "gone")
        sid = coord["id"]
        async with running_writer(store, linger_s=0, retry_for_s=2) as writer:
            await writer.append_message(sid, owner=sid, role="user", content="before").wait()
            shutil.rmtree(state)
            pending = []
            with trio.fail_after(120):
                for i in range(2 * writer_module.INLINE_CHECKPOINT_EVERY):
                    pending.append(writer.append_message(sid, owner=sid, role="user", content=f"after{i}"))
                    await pending[-1].settled()
                try:
                    await store.get_or_create_coordinator("u", "after")
                except StoreError:
                    pass
            assert all(p.error is None or isinstance(p.error, StoreError) for p in pending)
        assert ticker.max_gap < LOOP_STALL_LIMIT_S


async def test_a_checkpoint_after_the_database_file_was_removed_creates_no_new_database(tmp_path):
    """The database files are deleted under a running store (the state dir
    stays): the background checkpoint opens the path by name and must not
    create a new, empty database there (nor count that as a checkpoint)."""
    url = f"sqlite:///{tmp_path / 'ongrid.db'}"
    async with open_store(url) as store:
        coord, _ = await store.get_or_create_coordinator("u", "removed")
        sid = coord["id"]
        async with running_writer(store, linger_s=0) as writer:
            await writer.append_message(sid, owner=sid, role="user", content="before").wait()
            for suffix in ("", "-wal", "-shm"):
                (tmp_path / f"ongrid.db{suffix}").unlink()
            before = store._db.checkpoints
            for i in range(2 * writer_module.INLINE_CHECKPOINT_EVERY):
                await writer.append_message(sid, owner=sid, role="user", content=f"after{i}").settled()
            with trio.fail_after(30):
                while store._db._checkpointing:
                    await trio.sleep(0.01)
        assert not (tmp_path / "ongrid.db").exists(), "a background checkpoint created a new, empty database file"
        assert store._db.checkpoints == before


# ---- every pool slot taken by threads ---------------------------------------------------


async def test_every_pool_slot_busy_the_loop_never_waits_for_the_pool(sqlite_url):
    """All 8 pool connections are checked out by threads that hold them for
    seconds: loop-thread commits and coordinator creation do not wait for
    the pool on the loop's thread (they queue for a thread); after the
    release everything commits in order."""
    async with open_store(sqlite_url) as store, ticking() as ticker:
        coord, _ = await store.get_or_create_coordinator("u", "pool")
        sid = coord["id"]
        async with running_writer(store, linger_s=0) as writer:
            assert await writer.append_message(sid, owner=sid, role="user", content="m0").wait() == 1
            inline_before = writer.inline_commits
            release = threading.Event()
            holding = 0
            lock = threading.Lock()

            def hold(engine: Any) -> None:
                nonlocal holding
                proxy = engine.raw_connection()
                try:
                    with lock:
                        holding += 1
                    release.wait(HOLD_S)
                finally:
                    proxy.close()

            async with trio.open_nursery() as nursery:
                for _ in range(8):
                    nursery.start_soon(store._db.run, "hold a connection", hold)
                with trio.fail_after(30):
                    while holding < 8:
                        await trio.sleep(0.01)
                pending = [writer.append_message(sid, owner=sid, role="user", content=f"m{i}") for i in range(1, 6)]
                created: list[Any] = []

                async def create() -> None:
                    created.append(await store.get_or_create_coordinator("u", "pool-new"))

                nursery.start_soon(create)
                await trio.sleep(0.5)
                assert not any(p.is_done for p in pending) and not created
                release.set()
                with trio.fail_after(60):
                    assert await writer.flush()
            assert [p.result for p in pending] == [2, 3, 4, 5, 6]
            assert created and created[0][1] is True
            assert writer.inline_commits == inline_before  # none of them ran on the loop's thread
        assert ticker.max_gap < LOOP_STALL_LIMIT_S
        assert await _seqs(store, sid) == list(range(1, 7))
        assert await _pool_settings(store) == [NORMAL_SETTINGS] * 8


# ---- errors inside the loop-thread transaction -------------------------------------------


async def test_errors_inside_inline_transactions_leave_every_pool_connection_normal(sqlite_url, monkeypatch):
    """With all 8 pool connections made, loop-thread transactions fail in
    three ways, rotating through every connection: a foreign key violation
    (a row of an unknown session), a unique violation (the writer's cached
    seq overtaken by a direct append) and the write lock held elsewhere.
    Each batch falls back to a thread (one write at a time where a row is
    bad) and keeps its good writes; afterwards all 8 connections have the
    normal busy timeout and automatic checkpoint again."""
    seen: list[str] = []
    real = writer_module._apply_batch_nowait

    def spy(engine: Any, batch: list[PendingWrite], seqs: dict[str, int]) -> Any:
        try:
            out = real(engine, batch, seqs)
        except Exception as exc:
            seen.append(type(exc).__name__)
            raise
        seen.append("ok")
        return out

    monkeypatch.setattr(writer_module, "_apply_batch_nowait", spy)
    missing = "00000000-0000-4000-8000-000000000000"
    async with open_store(sqlite_url) as store:
        coord, _ = await store.get_or_create_coordinator("u", "errors")
        sid = coord["id"]
        assert await _pool_settings(store) == [NORMAL_SETTINGS] * 8  # the pool now holds 8 connections
        expected: list[str] = []
        async with running_writer(store, linger_s=0) as writer:
            for round_ in range(10):
                # a foreign key violation inline: the good message is kept, the bad audit row fails alone
                good = writer.append_message(sid, owner=sid, role="user", content=f"fk{round_}")
                bad = writer.add_audit(session_id=missing, owner=sid, tool_name="t", arguments="{}", result="r",
                                       status="ok", duration_ms=1)
                await bad.settled()
                assert good.error is None and bad.error is not None
                expected.append(f"fk{round_}")
                # a unique violation inline: the seq the writer cached is overtaken by a direct append
                await writer.append_message(sid, owner=sid, role="user", content=f"warm{round_}").wait()
                expected.append(f"warm{round_}")
                assert writer.committed_seq(sid) == len(expected)
                await store.append_message(sid, role="user", content=f"direct{round_}")
                expected.append(f"direct{round_}")
                assert (await writer.append_message(sid, owner=sid, role="user", content=f"uq{round_}").wait()
                        == len(expected) + 1)
                expected.append(f"uq{round_}")
                # the write lock held elsewhere: a thread commits it once the lock is free
                other = sqlite3.connect(_db_path(sqlite_url), timeout=0, isolation_level=None,
                                        check_same_thread=False)
                try:
                    other.execute("BEGIN IMMEDIATE")
                    pending = writer.append_message(sid, owner=sid, role="user", content=f"lk{round_}")
                    await trio.sleep(0.05)
                    other.execute("ROLLBACK")
                finally:
                    other.close()
                with trio.fail_after(60):
                    await pending.wait()
                expected.append(f"lk{round_}")
        assert {"IntegrityError", "OperationalError"} <= set(seen)
        assert [m["content"] for m in await store.load_messages(sid)] == expected
        assert await _seqs(store, sid) == list(range(1, len(expected) + 1))
        assert await _pool_settings(store) == [NORMAL_SETTINGS] * 8


# ---- shutdown during a background checkpoint ------------------------------------------


async def test_closing_while_a_background_checkpoint_runs(sqlite_url, monkeypatch):
    """A background checkpoint is slow (its connection takes a while to
    open, as on a busy disk) when the writer and the store are closed:
    both closes return without hanging (the store waits a bounded while for
    the checkpoint), no write is lost, and a checkpoint that opens the file
    only after ``Store.aclose`` returned checkpoints nothing."""
    gate = threading.Event()
    entered = threading.Event()
    opened_after_close: list[bool] = []
    closed = threading.Event()
    real_connect = sqlite3.connect

    def slow_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        entered.set()
        gate.wait(30)
        opened_after_close.append(closed.is_set())
        return real_connect(*args, **kwargs)

    fake = types.SimpleNamespace(connect=slow_connect, Error=sqlite3.Error, OperationalError=sqlite3.OperationalError,
                                 Connection=sqlite3.Connection)
    monkeypatch.setattr(engine_module, "sqlite3", fake)
    try:
        async with open_store(sqlite_url) as store:
            coord, _ = await store.get_or_create_coordinator("u", "closing")
            sid = coord["id"]
            writer = StoreWriter(store, linger_s=0)
            async with trio.open_nursery() as nursery:
                await nursery.start(writer.run)
                for i in range(writer_module.INLINE_CHECKPOINT_EVERY):
                    await writer.append_message(sid, owner=sid, role="user", content=f"c{i}").wait()
                with trio.fail_after(30):
                    await trio.to_thread.run_sync(entered.wait, 30)
                assert store._db._checkpointing
                last = writer.append_message(sid, owner=sid, role="user", content="last")
                with trio.fail_after(30):
                    await writer.aclose()
            assert last.result == writer_module.INLINE_CHECKPOINT_EVERY + 1
            assert await _seqs(store, sid) == list(range(1, writer_module.INLINE_CHECKPOINT_EVERY + 2))
            monkeypatch.setattr(engine_module, "CHECKPOINT_CLOSE_WAIT_S", 0.5)
            with trio.fail_after(30):
                await store.aclose()
            closed.set()
            still_running = store._db._checkpointing
    finally:
        gate.set()
        for _ in range(300):  # let the checkpoint thread finish before the test's files go
            if not store._db._checkpointing:
                break
            await trio.sleep(0.01)
    assert still_running  # the bounded wait ran out: the connection was still opening
    assert opened_after_close == [True] and store._db.checkpoints == 0, (
        "a checkpoint that opened the database after Store.aclose must leave it alone")


# ---- two writers on one file -------------------------------------------------------------


@pytest.mark.parametrize("stores", ["one store", "two stores"])
async def test_two_writers_on_one_file_lose_and_duplicate_nothing(sqlite_url, stores):
    """Two StoreWriters (on one Store, or on two Stores — two pools — of one
    file) append to the same two sessions concurrently, awaited and not:
    every message lands once, seqs are 1..n, each writer's own order holds."""
    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(open_store(sqlite_url))
        second = first if stores == "one store" else await stack.enter_async_context(open_store(sqlite_url))
        coord, _ = await first.get_or_create_coordinator("u", "two")
        owner = coord["id"]
        worker = (await first.create_session(agent_id="w", user_id="u", parent_session_id=owner,
                                             status="running"))["id"]
        sids = [owner, worker]
        ticker = await stack.enter_async_context(ticking())
        a = await stack.enter_async_context(running_writer(first, linger_s=0))
        b = await stack.enter_async_context(running_writer(second, linger_s=0))
        n = 120

        async def feed(writer: StoreWriter, name: str, awaited: Callable[[int], bool]) -> None:
            for i in range(n):
                p = writer.append_message(sids[i % 2], owner=owner, role="user", content=f"{name}{i}")
                if awaited(i):
                    await p.wait()
                elif i % 7 == 0:
                    await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(feed, a, "a", lambda i: True)
            nursery.start_soon(feed, b, "b", lambda i: i % 3 == 0)
        with trio.fail_after(60):
            assert await a.flush() and await b.flush()
        assert a.failed == b.failed == 0
        assert a.inline_commits > 0 and b.inline_commits > 0
        for k, sid in enumerate(sids):
            rows = await first.load_messages(sid)
            assert [r["seq"] for r in rows] == list(range(1, n + 1))
            contents = [r["content"] for r in rows]
            for name in ("a", "b"):
                assert [c for c in contents if c.startswith(name)] == [f"{name}{i}" for i in range(k, n, 2)]
        assert ticker.max_gap < LOOP_STALL_LIMIT_S


# ---- PostgreSQL never on the loop's thread -------------------------------------------------


async def test_postgres_never_commits_on_the_loops_thread(db_url, monkeypatch):
    """Coordinator creation (``run_write_soon``) and writer batches: on
    SQLite the first try is on the loop's thread with ``nowait``; on
    PostgreSQL every call runs in a worker thread without it."""
    loop_thread = threading.get_ident()
    calls: list[tuple[str, bool, bool]] = []

    def recorder(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, nowait: bool = False, **kwargs: Any) -> Any:
            calls.append((name, threading.get_ident() == loop_thread, nowait))
            return fn(*args, nowait=nowait, **kwargs)
        return wrapped

    monkeypatch.setattr(sessions, "get_or_create_coordinator", recorder("coordinator", sessions.get_or_create_coordinator))
    monkeypatch.setattr(writer_module, "apply_batch_fast", recorder("batch", writer_module.apply_batch_fast))
    async with open_store(db_url) as store:
        coord, made = await store.get_or_create_coordinator("u", "pg")
        assert made
        assert (await store.get_or_create_coordinator("u", "pg"))[0]["id"] == coord["id"]
        sid = coord["id"]
        async with running_writer(store, linger_s=0) as writer:
            for i in range(5):
                assert await writer.append_message(sid, owner=sid, role="user", content=f"p{i}").wait() == i + 1
    assert {name for name, _, _ in calls} == {"coordinator", "batch"}
    if db_url.startswith("sqlite"):
        assert all(on_loop and nowait for _, on_loop, nowait in calls)
    else:
        assert not any(on_loop or nowait for _, on_loop, nowait in calls), calls
