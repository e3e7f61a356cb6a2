"""Bad databases give a clear StoreError, never a crash or a hang, and leave nothing half-created."""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest
import trio

from ongridd.errors import StoreError
from ongridd.store import Store
from ongridd.store.engine import normalize_url


def _writable(path: Path) -> bool:
    probe = path / ".probe"
    try:
        probe.write_text("x")
    except OSError:
        return False
    probe.unlink()
    return True


@contextlib.contextmanager
def unwritable_dir(path: Path):
    """Make ``path`` unwritable for this process: mode 0555, and the immutable
    flag when running as root (root ignores modes).  Skips when neither works."""
    path.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    immutable = False
    try:
        if _writable(path) and os.geteuid() == 0:
            immutable = subprocess.run(["chattr", "+i", str(path)], check=False, capture_output=True).returncode == 0
        if _writable(path):
            pytest.skip("cannot make a directory unwritable here (root without chattr)")
        yield path
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=False)
        path.chmod(0o755)


async def test_missing_state_dir(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(StoreError, match=r"state dir .*nope does not exist"):
        await Store.open(f"sqlite:///{missing / 'ongrid.db'}")
    assert not missing.exists()  # not created behind the operator's back


async def test_state_dir_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StoreError, match="is not a directory"):
        await Store.open(f"sqlite:///{f / 'ongrid.db'}")


async def test_unwritable_state_dir(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    with unwritable_dir(state):
        with pytest.raises(StoreError, match=r"state dir .*state is not writable"):
            await Store.open(f"sqlite:///{state / 'ongrid.db'}")
        assert list(state.iterdir()) == []


async def test_database_path_is_a_directory(tmp_path):
    (tmp_path / "ongrid.db").mkdir()
    with pytest.raises(StoreError, match="is a directory"):
        await Store.open(f"sqlite:///{tmp_path / 'ongrid.db'}")


async def test_file_that_is_not_a_database_is_reported_and_kept(tmp_path):
    db = tmp_path / "ongrid.db"
    db.write_bytes(b"this is not sqlite " * 100)
    with pytest.raises(StoreError) as info:
        await Store.open(f"sqlite:///{db}")
    assert "not a database" in str(info.value)
    assert "schema migration failed" in str(info.value)
    assert db.read_bytes().startswith(b"this is not sqlite")  # an existing file is never removed


async def test_locked_database_gives_store_error(tmp_path):
    url = f"sqlite:///{tmp_path / 'ongrid.db'}"
    store = await Store.open(url)
    await store.aclose()
    holder = sqlite3.connect(tmp_path / "ongrid.db", isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with trio.fail_after(30):
            with pytest.raises(StoreError, match="database is locked"):
                await Store.open(url, busy_timeout_s=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


async def test_locked_database_during_a_write(tmp_path):
    url = f"sqlite:///{tmp_path / 'ongrid.db'}"
    store = await Store.open(url, busy_timeout_s=0.2)
    try:
        holder = sqlite3.connect(tmp_path / "ongrid.db", isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError, match=r"get or create coordinator failed.*database is locked"):
                await store.get_or_create_coordinator("alice", "main")
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        # The lock is gone: the same call works now.
        row, created = await store.get_or_create_coordinator("alice", "main")
        assert created and row["status"] == "open"
    finally:
        await store.aclose()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def test_unreachable_postgres_fails_fast_without_the_password():
    url = f"postgresql://ongrid:s3cret-pw@127.0.0.1:{_closed_port()}/test"
    with trio.fail_after(20):
        with pytest.raises(StoreError) as info:
            await Store.open(url, connect_timeout_s=2)
    msg = str(info.value)
    assert "s3cret-pw" not in msg
    assert "***" in msg and "127.0.0.1" in msg
    assert "schema migration failed" in msg


async def test_postgres_wrong_database_name(pg_url):
    from sqlalchemy.engine import make_url

    url = make_url(pg_url).set(database="ongrid_no_such_db").render_as_string(hide_password=False)
    with trio.fail_after(20):
        with pytest.raises(StoreError, match="ongrid_no_such_db"):
            await Store.open(url, connect_timeout_s=2)


@pytest.mark.parametrize(
    "url, words",
    [
        ("postgresql+asyncpg://u@h/db", "unsupported driver"),
        ("sqlite+aiosqlite:////tmp/x.db", "unsupported driver"),
        ("mysql://u@h/db", "unsupported driver"),
        ("sqlite://", "in-memory"),
        ("sqlite:///:memory:", "in-memory"),
        ("not a url", "invalid database URL"),
    ],
)
async def test_unsupported_urls(url, words):
    with pytest.raises(StoreError, match=words):
        await Store.open(url)


def test_url_mapping():
    assert normalize_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgresql+psycopg://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("sqlite:////var/x.db").drivername == "sqlite+pysqlite"
    with pytest.raises(StoreError) as info:
        normalize_url("oracle://u:hunter2@h/db")
    assert "hunter2" not in str(info.value)


async def test_closed_store_refuses_calls(sqlite_url):
    store = await Store.open(sqlite_url)
    await store.aclose()
    await store.aclose()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await store.get_session("x")
