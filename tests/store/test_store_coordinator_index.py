"""``uq_chat_sessions_coordinator`` is partial on both backends, however the schema was made.

schema.py gives the index its PostgreSQL ``WHERE`` only when a PostgreSQL
table is created (so SQLite start-ups do not import SQLAlchemy's PostgreSQL
dialect); these tests hold both creation paths (``create_all`` at the head,
the Alembic chain) to one rule: one coordinator row (no parent) per
(user, thread), any number of child rows beside it.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from ongridd.store import migrate
from ongridd.store.engine import create_engine, normalize_url
from ongridd.store.schema import chat_sessions


def _row(parent: str | None) -> dict:
    return {"id": str(uuid.uuid4()), "agent_id": "a", "parent_session_id": parent, "user_id": "u",
            "thread_id": "t", "status": "open", "created_at": datetime.now(UTC)}


def _check_partial(engine: sa.Engine) -> None:
    coordinator = _row(None)
    with engine.begin() as conn:
        conn.execute(chat_sessions.insert(), [coordinator, _row(coordinator["id"]), _row(coordinator["id"])])
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        conn.execute(chat_sessions.insert(), [_row(None)])
    with engine.connect() as conn:
        count = conn.execute(sa.select(sa.func.count()).select_from(chat_sessions)).scalar()
        index = next(ix for ix in sa.inspect(conn).get_indexes("chat_sessions")
                     if ix["name"] == "uq_chat_sessions_coordinator")
    assert count == 3
    assert index["unique"] and index["column_names"] == ["user_id", "thread_id"]
    if engine.dialect.name == "postgresql":
        assert "parent_session_id IS NULL" in index["dialect_options"]["postgresql_where"]


@pytest.mark.parametrize("path", ["create_at_head", "alembic"])
def test_the_coordinator_index_is_partial(db_url, path):
    engine = create_engine(normalize_url(db_url))
    try:
        if path == "create_at_head":
            assert migrate.upgrade_to_head(engine) == (None, migrate.head_revision())
        else:
            from alembic import command

            with engine.begin() as conn:
                cfg = migrate.alembic_config()
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
        _check_partial(engine)
    finally:
        engine.dispose()


def _schema_imports_postgresql(store_dir: str) -> bool:
    """Whether importing ``<store_dir>/schema.py`` (not the package's __init__: the writer) loads
    SQLAlchemy's PostgreSQL dialect (a fresh interpreter)."""
    code = ("import sys, types\n"
            "pkg = types.ModuleType('ongridd.store')\n"
            f"pkg.__path__ = [{store_dir!r}]\n"
            "sys.modules['ongridd.store'] = pkg\n"
            "import ongridd.store.schema\n"
            "print('sqlalchemy.dialects.postgresql' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.split() == ["True"]


def test_the_schema_does_not_import_the_postgresql_dialect():
    assert not _schema_imports_postgresql(str(Path(migrate.__file__).parent))
