"""Alembic migrations create the docs/architecture.md §12 tables, on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from ongridd.errors import StoreError
from ongridd.store import Store, open_store
from ongridd.store.engine import create_engine, normalize_url
from ongridd.store.migrate import head_revision
from ongridd.store.schema import TABLE_NAMES, metadata

REQUIRED_COLUMNS = {
    "chat_sessions": {
        "id", "agent_id", "parent_session_id", "user_id", "thread_id", "description", "status",
        "created_at", "started_at", "closed_at", "close_reason",
    },
    "chat_messages": {"session_id", "seq", "role", "content", "tool_calls", "tool_call_id", "created_at"},
    "audit_logs": {"id", "session_id", "tool_name", "arguments", "result", "status", "duration_ms", "created_at"},
    "mutating_proposals": {
        "id", "session_id", "action", "target", "reason", "blast_radius", "operator", "decision",
        "decision_reason", "reviewer_session_id", "created_at", "decided_at",
    },
    "incidents": {
        "id", "fingerprint", "alertname", "status", "severity", "labels", "annotations", "starts_at",
        "ends_at", "updated_at",
    },
    "change_events": {"id", "kind", "subject", "actor", "detail", "created_at"},
}


def _inspect(url: str):
    engine = create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:
            insp = sa.inspect(conn)
            tables = set(insp.get_table_names())
            columns = {t: {c["name"] for c in insp.get_columns(t)} for t in tables}
            indexes = {t: {i["name"]: i for i in insp.get_indexes(t)} for t in tables}
            uniques = {t: {u["name"] for u in insp.get_unique_constraints(t)} for t in tables}
            revision = MigrationContext.configure(conn).get_current_revision()
            diffs = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
            journal = conn.exec_driver_sql("PRAGMA journal_mode").scalar() if conn.dialect.name == "sqlite" else None
    finally:
        engine.dispose()
    return tables, columns, indexes, uniques, revision, diffs, journal


async def test_migrations_create_every_table(db_url):
    async with open_store(db_url):
        pass
    tables, columns, indexes, uniques, revision, diffs, journal = _inspect(db_url)
    assert set(TABLE_NAMES) <= tables
    for table, required in REQUIRED_COLUMNS.items():
        assert required <= columns[table], (table, required - columns[table])
    assert revision == head_revision()
    # The migration and schema.py describe the same schema.
    assert diffs == []
    assert "ix_chat_sessions_parent_session_id" in indexes["chat_sessions"]
    coord = indexes["chat_sessions"]["uq_chat_sessions_coordinator"]
    assert coord["unique"] and coord["column_names"] == ["user_id", "thread_id"]
    assert "ix_audit_logs_session_id_created_at" in indexes["audit_logs"]
    assert "uq_incidents_fingerprint" in uniques["incidents"]
    assert "uq_chat_messages_session_id_seq" in uniques["chat_messages"]
    if db_url.startswith("sqlite"):
        assert journal == "wal"


def _upgrade_with_alembic(db_url: str, target: str, then: Callable[[sa.Connection], None] | None = None) -> None:
    """Run the migration chain up to ``target`` with Alembic itself (then ``then(conn)``, same transaction)."""
    from alembic import command

    from ongridd.store.migrate import alembic_config

    engine = create_engine(normalize_url(db_url))
    try:
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, target)
            if then is not None:
                then(conn)
    finally:
        engine.dispose()


def test_the_migration_chain_from_empty_builds_the_schema_of_schema_py(db_url):
    """A new database is created from schema.py and stamped (no Alembic run);
    an old one is upgraded through the revisions: both must give one schema."""
    _upgrade_with_alembic(db_url, "head")
    tables, _, _, _, revision, diffs, _ = _inspect(db_url)
    assert set(TABLE_NAMES) <= tables and revision == head_revision()
    assert diffs == []


async def test_an_empty_database_is_created_at_the_head_without_running_alembic(db_url):
    from ongridd.store import migrate

    engine = create_engine(normalize_url(db_url))
    try:
        assert migrate.upgrade_to_head(engine) == (None, head_revision())
        # the version table is Alembic's own shape: Alembic reads it and sees the head
        with engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_revision() == head_revision()
        assert migrate.upgrade_to_head(engine) == (head_revision(), head_revision())
    finally:
        engine.dispose()


def test_a_first_start_up_does_not_import_alembic(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys, sqlalchemy as sa\n"
        "from ongridd.store.engine import create_engine\n"
        "from ongridd.store.migrate import upgrade_to_head\n"
        f"engine = create_engine(sa.engine.make_url('sqlite:///{tmp_path}/fresh.db'))\n"
        "print(upgrade_to_head(engine)[1], 'alembic' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == [head_revision(), "False"], out.stderr


async def test_reopen_is_idempotent_and_keeps_rows(db_url):
    async with open_store(db_url) as store:
        row, created = await store.get_or_create_coordinator("alice", "main")
        assert created
    async with open_store(db_url) as store:
        again, created = await store.get_or_create_coordinator("alice", "main")
        assert not created and again["id"] == row["id"]
    async with open_store(db_url, migrate=False) as store:
        assert (await store.get_session(row["id"]))["user_id"] == "alice"


async def test_migrate_false_on_empty_database_is_refused(db_url):
    with pytest.raises(StoreError, match=f"needs {head_revision()}"):
        await Store.open(db_url, migrate=False)


async def test_schema_from_a_newer_version_is_refused(db_url):
    async with open_store(db_url):
        pass
    engine = create_engine(normalize_url(db_url))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999_future'"))
    finally:
        engine.dispose()
    with pytest.raises(StoreError, match="9999_future"):
        await Store.open(db_url)
    with pytest.raises(StoreError, match="9999_future"):
        await Store.open(db_url, migrate=False)


async def test_migrations_ship_inside_the_package():
    from ongridd.store.migrate import MIGRATIONS_DIR

    assert MIGRATIONS_DIR.parent.name == "store"
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert (MIGRATIONS_DIR / "script.py.mako").is_file()
    assert list((MIGRATIONS_DIR / "versions").glob("0001_*.py"))


async def test_a_0005_database_gains_turn_seq_and_keeps_its_rows(db_url):
    """Upgrading from the revision before: worker rows read turn_seq NULL, new ones carry it."""

    def old_row(conn: sa.Connection) -> None:
        conn.execute(sa.text(
                "INSERT INTO chat_sessions (id, agent_id, parent_session_id, user_id, thread_id, status, created_at) "
                "VALUES ('00000000-0000-4000-8000-000000000001', 'default', NULL, 'alice', 'main', 'open', "
                "CURRENT_TIMESTAMP)"))

    _upgrade_with_alembic(db_url, "0005_usage_summaries", then=old_row)
    async with open_store(db_url) as store:
        old = await store.get_session("00000000-0000-4000-8000-000000000001")
        assert old is not None and old["turn_seq"] is None
        worker = await store.create_session(agent_id="disk", user_id="alice", status="pending", turn_seq=3,
                                            parent_session_id=old["id"])
        assert (await store.get_session(worker["id"]))["turn_seq"] == 3
