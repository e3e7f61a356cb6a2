"""Alembic environment for Ongrid.

The daemon runs migrations programmatically (``ongridd.store.migrate``): it
passes an open connection, already inside a transaction, as
``config.attributes["connection"]``, so every revision runs in that one
transaction.  For developers running the ``alembic`` command line (e.g.
``alembic revision --autogenerate``), a URL in ``sqlalchemy.url`` is used
instead, through the same engine setup as the daemon.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from ongridd.store.schema import metadata

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from ongridd.store.engine import create_engine, normalize_url, write_tx

    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("set sqlalchemy.url (or pass a connection) to run Ongrid migrations")
    engine = create_engine(normalize_url(url))
    try:
        with write_tx(engine) as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("Ongrid migrations run online only")
run_migrations_online()
