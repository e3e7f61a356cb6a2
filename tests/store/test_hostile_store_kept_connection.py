"""Hostile conditions for the one SQLite connection an engine keeps for the
event loop's thread (``raw_write_tx(nowait=True)``, outside the pool, busy
timeout 0 and no automatic checkpoint set once).

An exception inside its transaction, a COMMIT that fails, a ROLLBACK that
fails, the engine dropped without being closed, a store closed and opened
again, a close that is cancelled: the next loop-thread transaction must
work, the write lock must never stay held by a discarded connection, and no
file descriptor of the database, its WAL or its shared memory may be left
open.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import weakref
from pathlib import Path
from typing import Any

import pytest
import trio

from ongridd.store import Store, fastsql, open_store
from ongridd.store.engine import create_engine, normalize_url
from ongridd.store.writer import running_writer


def open_fds(directory: Path) -> dict[str, int]:
    """This process's open descriptors of files in ``directory`` (name → count)."""
    found: dict[str, int] = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory) + os.sep):
            name = os.path.basename(target)
            found[name] = found.get(name, 0) + 1
    return found


@pytest.fixture
def engine(tmp_path):
    eng = create_engine(normalize_url(f"sqlite:///{tmp_path / 'kept.db'}"))
    with eng.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        conn.exec_driver_sql("CREATE TABLE child (id INTEGER PRIMARY KEY, parent_id INTEGER REFERENCES parent(id))")
    yield eng
    fastsql.close_nowait_connection(eng)
    eng.dispose()


def run(tx: fastsql.RawTx, sql: str) -> None:
    tx.connection.dbapi_connection.execute(sql)


def other_writer_can_lock(path: Path) -> bool:
    con = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        con.close()


def rows(path: Path) -> list[int]:
    con = sqlite3.connect(path)
    try:
        return [r[0] for r in con.execute("SELECT id FROM parent ORDER BY id")]
    finally:
        con.close()


def test_an_exception_or_a_failed_commit_leaves_the_kept_connection_usable(engine, tmp_path) -> None:
    path = tmp_path / "kept.db"
    with pytest.raises(RuntimeError), fastsql.raw_write_tx(engine, nowait=True) as tx:
        run(tx, "INSERT INTO parent VALUES (1)")
        raise RuntimeError("inside the transaction")
    kept = fastsql._NOWAIT[engine]
    assert not kept.dbapi_connection.in_transaction and other_writer_can_lock(path)
    # COMMIT itself fails (a deferred foreign key): rolled back, the connection stays
    with pytest.raises(Exception, match="FOREIGN KEY"), fastsql.raw_write_tx(engine, nowait=True) as tx:
        run(tx, "PRAGMA defer_foreign_keys = ON")
        run(tx, "INSERT INTO parent VALUES (2)")
        run(tx, "INSERT INTO child VALUES (1, 99)")
    assert fastsql._NOWAIT[engine] is kept and not kept.dbapi_connection.in_transaction
    assert other_writer_can_lock(path)
    with fastsql.raw_write_tx(engine, nowait=True) as tx:
        run(tx, "INSERT INTO parent VALUES (3)")
    assert rows(path) == [3]
    settings = kept.dbapi_connection.execute("PRAGMA busy_timeout").fetchone()[0], \
        kept.dbapi_connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    assert settings == (0, 0)


class _RollbackFails:
    """A DBAPI connection whose ROLLBACK fails (as on an I/O error), all else real."""

    def __init__(self, real: sqlite3.Connection):
        self._real = real

    def rollback(self) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_a_kept_connection_whose_rollback_failed_is_closed_not_left_holding_the_lock(engine, tmp_path) -> None:
    path = tmp_path / "kept.db"
    with fastsql.raw_write_tx(engine, nowait=True) as tx:
        run(tx, "INSERT INTO parent VALUES (1)")
    kept = fastsql._NOWAIT[engine]
    real = kept.dbapi_connection
    kept.dbapi_connection = _RollbackFails(real)
    caught: list[BaseException] = []
    try:
        with fastsql.raw_write_tx(engine, nowait=True) as tx:
            run(tx, "INSERT INTO parent VALUES (2)")
            raise RuntimeError("fails inside, and the rollback fails too")
    except RuntimeError as exc:
        caught.append(exc)  # the traceback (and its frames) stays referenced
    assert not kept.is_valid
    with pytest.raises(sqlite3.ProgrammingError):
        real.execute("SELECT 1")  # closed at once, not when garbage collected
    assert other_writer_can_lock(path)
    with fastsql.raw_write_tx(engine, nowait=True) as tx:  # a new kept connection
        run(tx, "INSERT INTO parent VALUES (3)")
    assert fastsql._NOWAIT[engine] is not kept
    assert rows(path) == [1, 3] and caught


def test_an_engine_dropped_without_closing_takes_its_kept_connection_with_it(tmp_path) -> None:
    eng = create_engine(normalize_url(f"sqlite:///{tmp_path / 'dropped.db'}"))
    with eng.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    with fastsql.raw_write_tx(eng, nowait=True) as tx:
        run(tx, "INSERT INTO parent VALUES (1)")
    assert open_fds(tmp_path)
    gone = weakref.ref(eng)
    del eng, tx, conn
    gc.collect()
    assert gone() is None, "the kept connection keeps its engine alive"
    assert open_fds(tmp_path) == {}


async def test_a_store_closed_and_opened_again_leaves_no_descriptor_open(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'ongrid.db'}"
    for round_ in range(4):
        async with open_store(url) as store:
            coord, _ = await store.get_or_create_coordinator("u", "reopen")
            async with running_writer(store, linger_s=0) as writer:
                for i in range(3):
                    await writer.append_message(coord["id"], owner=coord["id"], role="user",
                                                content=f"{round_}.{i}").wait()
                assert writer.inline_commits > 0
            assert set(open_fds(tmp_path)) <= {"ongrid.db", "ongrid.db-wal", "ongrid.db-shm"}
        assert open_fds(tmp_path) == {}, round_
    async with open_store(url) as store:
        coord, _ = await store.get_or_create_coordinator("u", "reopen")
        assert len(await store.load_messages(coord["id"])) == 12


async def test_a_cancelled_close_still_closes_the_kept_connection(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'ongrid.db'}"
    store = await Store.open(url)
    db = store._db
    try:
        coord, _ = await store.get_or_create_coordinator("u", "cancelled")
        async with running_writer(store, linger_s=0) as writer:
            await writer.append_message(coord["id"], owner=coord["id"], role="user", content="x").wait()
            assert writer.inline_commits == 1
        raw = fastsql._NOWAIT[db.engine].dbapi_connection
        db._checkpoint_idle.clear()  # as while a background checkpoint runs: close waits for it
        with trio.CancelScope() as scope:
            scope.cancel()
            await db.aclose()
        with pytest.raises(sqlite3.ProgrammingError):
            raw.execute("SELECT 1")
    finally:
        db._checkpoint_idle.set()
        fastsql.close_nowait_connection(db.engine)
        db.engine.dispose()
