"""Prebuilt statements on the DBAPI cursor (ongridd/store/fastsql.py), on
SQLite and PostgreSQL: the rows they write read back exactly as rows
SQLAlchemy writes, results come back processed the same way, and errors
reach the caller as SQLAlchemy would raise them, with nothing of the failed
transaction committed."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from ongridd.store import open_store
from ongridd.store.engine import is_transient, is_unique_violation, write_tx
from ongridd.store.fastsql import Counter, Prepared, raw_write_tx
from ongridd.store.schema import chat_messages, chat_sessions

KEYS = ("session_id", "seq", "role", "content", "tool_calls", "tool_call_id", "name", "created_at")
INSERT = Prepared(sa.insert(chat_messages), KEYS)
BY_SEQ = Prepared(sa.select(chat_messages.c.seq, chat_messages.c.content, chat_messages.c.tool_calls,
                            chat_messages.c.created_at)
                  .where(chat_messages.c.session_id == sa.bindparam("sid"))
                  .order_by(chat_messages.c.seq))
RENAME = Prepared(sa.update(chat_sessions).where(chat_sessions.c.id == sa.bindparam("sid"),
                                                 chat_sessions.c.status == "open")
                  .values(description=sa.bindparam("text")).returning(chat_sessions.c.id, chat_sessions.c.created_at))


def _row(sid: str, seq: int, when: datetime) -> dict:
    return {"session_id": sid, "seq": seq, "role": "assistant", "content": f"é {seq}\ufffd",
            "tool_calls": [{"id": "c1", "name": "t", "arguments": "{\"a\": \"ü\"}"}] if seq % 2 else None,
            "tool_call_id": None, "name": None, "created_at": when}


async def test_rows_read_back_as_sqlalchemy_writes_them(store):
    coord, _ = await store.get_or_create_coordinator("u", "fastsql")
    sid = coord["id"]
    when = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)

    def write(engine: sa.Engine) -> None:
        with raw_write_tx(engine) as conn:
            assert INSERT.executemany(conn, [_row(sid, 1, when), _row(sid, 2, when)]) in (2, -1)
        with write_tx(engine) as conn:  # the same rows through SQLAlchemy
            conn.execute(sa.insert(chat_messages), [_row(sid, 3, when), _row(sid, 4, when)])

    before = Counter.statements, Counter.commits
    await store._db.run("write", write)
    assert (Counter.statements - before[0], Counter.commits - before[1]) == (1, 1)

    def read(engine: sa.Engine) -> tuple[list, list]:
        with raw_write_tx(engine) as conn:
            fast = BY_SEQ.fetchall(conn, {"sid": sid})
        with write_tx(engine) as conn:
            slow = [dict(r._mapping) for r in conn.execute(BY_SEQ.stmt, {"sid": sid})]
        return fast, slow

    fast, slow = await store._db.run("read", read)
    assert fast == slow and [r["seq"] for r in fast] == [1, 2, 3, 4]
    assert [r["created_at"] for r in fast] == [when] * 4
    assert fast[0]["tool_calls"] == fast[2]["tool_calls"] == _row(sid, 1, when)["tool_calls"]
    assert fast[0]["content"] == "é 1\ufffd" and fast[1]["tool_calls"] is None
    loaded = await store.load_messages(sid)
    assert [m["content"] for m in loaded] == [f"é {i}\ufffd" for i in range(1, 5)]
    assert {m["created_at"] for m in loaded} == {"2026-01-02T03:04:05.000006Z"}

    def rename(engine: sa.Engine) -> list:
        with raw_write_tx(engine) as conn:
            return RENAME.fetchall(conn, {"sid": sid, "text": "renamed"})  # status == "open": a fixed bind

    (returned,) = await store._db.run("rename", rename)
    assert returned["id"] == sid and returned["created_at"].tzinfo is not None
    assert (await store.get_session(sid))["description"] == "renamed"


async def test_a_failed_statement_rolls_the_transaction_back_with_sqlalchemy_errors(store):
    coord, _ = await store.get_or_create_coordinator("u", "fastsql-fail")
    sid = coord["id"]
    when = datetime.now(UTC)

    def duplicate(engine: sa.Engine) -> None:
        with raw_write_tx(engine) as conn:
            INSERT.executemany(conn, [_row(sid, 1, when)])
            INSERT.executemany(conn, [_row(sid, 1, when)])  # (session_id, seq) is unique

    with pytest.raises(sa.exc.IntegrityError) as caught:
        await store._db.run_raw(duplicate)
    assert is_unique_violation(caught.value) and not is_transient(caught.value)
    assert await store.load_messages(sid) == []  # the first insert went with the transaction

    def unknown_session(engine: sa.Engine) -> None:
        with raw_write_tx(engine) as conn:
            INSERT.executemany(conn, [_row("00000000-0000-4000-8000-000000000000", 1, when)])

    with pytest.raises(sa.exc.IntegrityError):  # the foreign key
        await store._db.run_raw(unknown_session)


async def test_sqlite_write_lock_held_elsewhere_is_a_transient_error(tmp_path):
    path = tmp_path / "ongrid.db"
    async with open_store(f"sqlite:///{path}", busy_timeout_s=0.05) as store:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            def begin(engine: sa.Engine) -> None:
                with raw_write_tx(engine):
                    pass

            with pytest.raises(sa.exc.OperationalError) as caught:
                await store._db.run_raw(begin)
            assert is_transient(caught.value) and "locked" in str(caught.value)
        finally:
            other.close()
        await store._db.run_raw(begin)  # free again: the pooled connection is still usable


def test_statements_with_expanding_parameters_are_refused():
    stmt = sa.select(chat_sessions.c.id).where(chat_sessions.c.id.in_(sa.bindparam("ids", expanding=True)))
    with pytest.raises(ValueError, match="expanding"):
        Prepared(stmt).compiled(sa.create_engine("sqlite://").dialect)
