"""Fixtures for the store tests: a SQLite file in tmp_path and a fresh PostgreSQL schema.

PostgreSQL: ``ONGRID_TEST_PG_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``).  Each test gets its
own schema ``ongrid_test_<random>`` (selected through the connection's
``search_path`` option) that is dropped afterwards.  When the server is not
reachable the test is skipped with the reason — or fails when ``CI=true``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from ongridd.store import open_store

PG_URL = os.environ.get("ONGRID_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
from tests.conftest import need  # noqa: E402  (one skip-or-fail rule for the whole suite)


@functools.cache
def pg_unreachable_reason() -> str | None:
    """None when PostgreSQL answers at PG_URL, else why not (cached for the run)."""
    engine = sa.create_engine(PG_URL, connect_args={"connect_timeout": 3}, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001 - any failure means the server is not usable here
        return f"PostgreSQL not reachable at {make_url(PG_URL).render_as_string(hide_password=True)}: {exc}"
    finally:
        engine.dispose()
    return None


def _admin(sql: str) -> None:
    engine = sa.create_engine(PG_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(sql))
    finally:
        engine.dispose()


@contextlib.contextmanager
def fresh_pg_schema(prefix: str = "ongrid_test") -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh, empty schema, dropped
    on the way out.  Skips (or fails in CI) when the server is not reachable."""
    reason = pg_unreachable_reason()
    need(reason is None, reason or "")
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    _admin(f'CREATE SCHEMA "{schema}"')
    url = make_url(PG_URL).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        _admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def pg_url():
    """A PostgreSQL URL whose search_path is a fresh, empty schema (dropped after the test)."""
    with fresh_pg_schema() as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path):
    """A SQLite URL for ``<tmp_path>/ongrid.db`` (the state dir exists, the file not yet)."""
    return f"sqlite:///{tmp_path / 'ongrid.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request):
    """Each test using this runs on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("pg_url")


@pytest.fixture
async def store(db_url):
    async with open_store(db_url) as s:
        yield s
