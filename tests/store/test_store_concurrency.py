"""Concurrent read-modify-writes through the engine lose nothing (SQLite: ``BEGIN IMMEDIATE``)."""

from __future__ import annotations

import functools

import sqlalchemy as sa
import trio

from ongridd.store.engine import Database, create_engine, normalize_url, write_tx

counter_md = sa.MetaData()
counter = sa.Table(
    "rmw_counter_test",
    counter_md,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("value", sa.Integer, nullable=False),
)


def _setup(engine):
    with write_tx(engine) as conn:
        counter_md.create_all(conn)
        conn.execute(sa.insert(counter).values(id=1, value=0))


def _increment(engine):
    # Read, then write the value read + 1: the exact shape that lost updates (trap 2).
    with write_tx(engine) as conn:
        value = conn.execute(
            sa.select(counter.c.value).where(counter.c.id == 1).with_for_update()
        ).scalar_one()
        conn.execute(sa.update(counter).where(counter.c.id == 1).values(value=value + 1))


def _read(engine):
    with engine.connect() as conn:
        return conn.execute(sa.select(counter.c.value).where(counter.c.id == 1)).scalar_one()


async def test_fifty_concurrent_read_modify_writes_lose_nothing(db_url):
    """50 threads at once, each with its own connection, straight into the engine.

    More threads than the Store's pool allows, so every increment really runs
    at the same time: this checks the engine setup itself (BEGIN IMMEDIATE,
    busy timeout).
    """
    url = normalize_url(db_url)
    db = Database(create_engine(url, pool_size=50), url, 50)
    threads = trio.CapacityLimiter(50)
    try:
        await db.run("setup", _setup)
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for _ in range(50):
                    nursery.start_soon(
                        functools.partial(trio.to_thread.run_sync, db.call, "increment", _increment, limiter=threads)
                    )
        assert await db.run_read("read", _read) == 50
    finally:
        await db.aclose()


async def test_concurrent_incident_upserts_make_one_row(store):
    ps = store.plugin_store
    results = []

    async def upsert(i):
        results.append(
            await ps.upsert_incident(
                fingerprint="fp-disk-1",
                alertname="DiskFull",
                status="firing",
                severity="critical",
                labels={"instance": "web-1", "n": i},
                annotations={},
                starts_at="2026-01-01T00:00:00Z",
                ends_at=None,
            )
        )

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(upsert, i)
    assert len({r["id"] for r in results}) == 1
    assert len(await ps.list_incidents(limit=100)) == 1
