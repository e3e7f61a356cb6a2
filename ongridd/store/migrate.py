"""Run the Alembic migrations shipped inside the package (no alembic.ini needed).

Both functions are blocking (call them in a worker thread).  They take an
engine from :func:`ongridd.store.engine.create_engine` and raise
SQLAlchemy errors, which :class:`ongridd.store.engine.Database` turns into
StoreError.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import Engine

from ongridd.errors import StoreError
from ongridd.store.engine import read_tx, write_tx

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# Any fixed 64-bit number: serialises concurrent migrations of daemons sharing one PostgreSQL.
_PG_LOCK_KEY = 0x4F6E67726964  # "Ongrid"


def alembic_config() -> AlembicConfig:
    """An Alembic config pointing at the packaged migrations directory."""
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def head_revision() -> str:
    """The newest revision id this code knows."""
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"migrations must have exactly one head, found {heads}")
    return heads[0]


def upgrade_to_head(engine: Engine) -> tuple[str | None, str]:
    """Bring the schema to the head revision in one transaction.

    On SQLite the transaction is ``BEGIN IMMEDIATE`` (DDL is transactional
    there, so a failure leaves no half-made schema); on PostgreSQL an
    advisory lock serialises daemons migrating the same database.  Returns
    ``(revision before, revision after)``.
    """
    cfg = alembic_config()
    with write_tx(engine) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
        before = MigrationContext.configure(conn).get_current_revision()
        cfg.attributes["connection"] = conn
        try:
            command.upgrade(cfg, "head")
        except CommandError as exc:
            raise StoreError(
                f"cannot migrate the database schema from revision {before}: {exc} "
                "(was it created by a newer ongridd?)"
            ) from None
        after = MigrationContext.configure(conn).get_current_revision()
    return before, after or head_revision()


def check_at_head(engine: Engine) -> str:
    """Verify without changing anything that the schema is at the head revision.

    Raises StoreError saying what to do when it is not.  Returns the revision.
    """
    head = head_revision()
    with read_tx(engine) as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    if current != head:
        raise StoreError(
            f"database schema is at revision {current or 'none (empty database)'}, this version of "
            f"ongridd needs {head}; start the daemon with migrations enabled to upgrade it"
        )
    return current
