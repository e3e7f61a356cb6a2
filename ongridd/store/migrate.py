"""Run the Alembic migrations shipped inside the package (no alembic.ini needed).

Both functions are blocking (call them in a worker thread).  They take an
engine from :func:`ongridd.store.engine.create_engine` and raise
SQLAlchemy errors, which :class:`ongridd.store.engine.Database` turns into
StoreError.

Alembic (and the template engine it pulls in) is imported only when a
migration has to run: an empty database is created at the head from
``schema.py`` and stamped; a database already at the head revision is recognised
by reading ``alembic_version`` with one query and comparing it with the head
found by reading the revision files' ``revision`` / ``down_revision`` lines
(:func:`head_from_files`).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ongridd.errors import StoreError
from ongridd.store.engine import read_tx, write_tx

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# Any fixed 64-bit number: serialises concurrent migrations of daemons sharing one PostgreSQL.
_PG_LOCK_KEY = 0x4F6E67726964  # "Ongrid"
#: alembic's default version table (env.py does not rename it)
VERSION_TABLE = "alembic_version"

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

_REVISION_LINE = re.compile(r"^(revision|down_revision)\s*(?::[^=\n]*)?=\s*(.*?)\s*$", re.MULTILINE)
_QUOTED = re.compile(r"""^(?:"([^"\\]*)"|'([^'\\]*)')$""")


def alembic_config() -> AlembicConfig:
    """An Alembic config pointing at the packaged migrations directory."""
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def head_revision() -> str:
    """The newest revision id this code knows (through Alembic's script directory)."""
    from alembic.script import ScriptDirectory

    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"migrations must have exactly one head, found {heads}")
    return heads[0]


@functools.cache
def head_from_files(versions_dir: Path = MIGRATIONS_DIR / "versions") -> str | None:
    """The head revision read from the ``revision = "…"`` and ``down_revision =
    "…" | None`` lines of the revision files in ``versions_dir``, without
    importing Alembic; None when that is not clear-cut (a file without both
    lines, a merge revision, several heads, unreadable files): callers then
    ask Alembic.  Read once per process."""
    revisions: set[str] = set()
    downs: set[str] = set()
    try:
        files = sorted(versions_dir.glob("*.py"))
        for path in files:
            found: dict[str, str | None] = {}
            for key, raw in _REVISION_LINE.findall(path.read_text(encoding="utf-8")):
                if key in found:
                    return None
                quoted = _QUOTED.match(raw)
                if quoted:
                    found[key] = quoted.group(1) if quoted.group(1) is not None else quoted.group(2)
                elif raw == "None" and key == "down_revision":
                    found[key] = None
                else:
                    return None
            revision = found.get("revision")
            if not revision or "down_revision" not in found or revision in revisions:
                return None
            revisions.add(revision)
            if found["down_revision"] is not None:
                downs.add(found["down_revision"])
    except (OSError, UnicodeDecodeError):
        return None
    heads = revisions - downs
    return heads.pop() if len(heads) == 1 and downs <= revisions else None


def _at_head_quick(conn: Connection) -> str | None:
    """The head revision when ``conn``'s database is recorded at it (one row in
    the version table equal to :func:`head_from_files`), else None (an empty,
    older, newer or odd database: Alembic decides)."""
    head = head_from_files()
    if head is None or not sa.inspect(conn).has_table(VERSION_TABLE):
        return None
    rows = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    return head if list(rows) == [head] else None


def _current_revision(conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def create_at_head(conn: Connection, head: str) -> None:
    """An empty database: create the schema of ``schema.py`` at once and
    record it at ``head`` in Alembic's version table, as Alembic's own
    "create from scratch, then stamp" recipe does (the migration chain and
    ``schema.py`` describe the same schema, checked by the test suite).
    Skips importing Alembic and replaying every revision (~0.1 s of a
    first start-up)."""
    from ongridd.store.schema import metadata

    metadata.create_all(conn)
    version = sa.Table(VERSION_TABLE, sa.MetaData(),
                       sa.Column("version_num", sa.String(32), nullable=False),
                       sa.PrimaryKeyConstraint("version_num", name=f"{VERSION_TABLE}_pkc"))
    version.create(conn)
    conn.execute(version.insert().values(version_num=head))


def upgrade_to_head(engine: Engine) -> tuple[str | None, str]:
    """Bring the schema to the head revision in one transaction.

    On SQLite the transaction is ``BEGIN IMMEDIATE`` (DDL is transactional
    there, so a failure leaves no half-made schema); on PostgreSQL an
    advisory lock serialises daemons migrating the same database.  A
    database already at the head is recognised without Alembic and left
    as it is; an empty one is created at the head (:func:`create_at_head`).
    Returns ``(revision before, revision after)``.
    """
    with write_tx(engine) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
        quick = _at_head_quick(conn)
        if quick is not None:
            return quick, quick
        head = head_from_files()
        if head is not None and not sa.inspect(conn).get_table_names():
            create_at_head(conn, head)
            return None, head
        from alembic import command
        from alembic.util import CommandError

        cfg = alembic_config()
        before = _current_revision(conn)
        cfg.attributes["connection"] = conn
        try:
            command.upgrade(cfg, "head")
        except CommandError as exc:
            raise StoreError(
                f"cannot migrate the database schema from revision {before}: {exc} "
                "(was it created by a newer ongridd?)"
            ) from None
        after = _current_revision(conn)
    return before, after or head_revision()


def check_at_head(engine: Engine) -> str:
    """Verify without changing anything that the schema is at the head revision.

    Raises StoreError saying what to do when it is not.  Returns the revision.
    """
    with read_tx(engine) as conn:
        quick = _at_head_quick(conn)
        if quick is not None:
            return quick
        current = _current_revision(conn)
    head = head_revision()
    if current != head:
        raise StoreError(
            f"database schema is at revision {current or 'none (empty database)'}, this version of "
            f"ongridd needs {head}; start the daemon with migrations enabled to upgrade it"
        )
    return current
