"""Prebuilt statements executed on the DBAPI cursor, and write transactions
on a pooled DBAPI connection.

The store writer's hot statements (multi-row inserts, status updates, usage
increments, the coordinator row's lookup and insert) are SQLAlchemy Core
statements compiled **once per dialect** into their SQL text, parameter
order and bind processors (the same processors SQLAlchemy would apply: UTC
times, JSON, PostgreSQL casts; results get SQLAlchemy's result processors),
then executed straight on the DBAPI cursor.  :func:`raw_write_tx` runs them
in a transaction on a connection checked out of the engine's pool (pool
events, PostgreSQL pre-ping and the reset on check-in as for any
connection; SQLite: ``BEGIN IMMEDIATE`` as :func:`ongridd.store.engine.write_tx`).
That skips SQLAlchemy's per-call machinery (connection and transaction
objects, statement cache lookup, execution context, result set-up), which
costs several times the database work for small statements.  Schema,
migrations and every other query keep going through SQLAlchemy.

``Counter`` counts the statements (an ``executemany`` once; BEGIN and
COMMIT not) and the commits.  Errors are raised as SQLAlchemy would raise
them (``sqlalchemy.exc.DBAPIError`` subclasses wrapping the driver's error,
``connection_invalidated`` set for a lost connection, which is then
invalidated), so callers sort them the same way.  SQLAlchemy's statement
and transaction events do not see any of this.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Dialect, Engine


class Conn(Protocol):
    """What statements run on: a SQLAlchemy ``Connection`` or a :class:`RawTx`."""

    @property
    def dialect(self) -> Dialect: ...

    @property
    def connection(self) -> Any: ...  # .dbapi_connection

    def invalidate(self, exception: BaseException | None = None) -> None: ...


class Counter:
    """Statements and commits that went this way (benchmarks read them; no
    lock: figures, not invariants)."""

    statements = 0
    commits = 0


class RawTx:
    """A transaction on a pooled DBAPI connection (see :func:`raw_write_tx`)."""

    __slots__ = ("dialect", "connection")

    def __init__(self, dialect: Dialect, connection: Any):
        self.dialect = dialect
        self.connection = connection  # the pool's proxy: .dbapi_connection, .invalidate(), .close()

    def invalidate(self, exception: BaseException | None = None) -> None:
        self.connection.invalidate(exception)


@contextlib.contextmanager
def raw_write_tx(engine: Engine, *, nowait: bool = False) -> Iterator[RawTx]:
    """A write transaction (SQLite: ``BEGIN IMMEDIATE``) on a connection of
    ``engine``'s pool, committed when the block ends, rolled back when it
    raises; for :class:`Prepared` statements only.

    ``nowait`` (SQLite only): never wait — on the engine's one connection
    kept for this (see :func:`close_nowait_connection`), whose busy timeout
    is 0 (the write lock held elsewhere: the transient "database is locked"
    StoreError-to-be, at once) and which runs no automatic WAL checkpoint (a
    later ordinary commit, or the store's background checkpoint, does).  For
    work on the event loop's own thread, one transaction at a time."""
    dialect = engine.dialect
    error = dialect.loaded_dbapi.Error
    kept = nowait and dialect.name == "sqlite"
    proxy: Any
    try:
        proxy = _nowait_connection(engine) if kept else engine.raw_connection()
    except error as exc:  # could not connect (sorted as SQLAlchemy's engine.connect() would)
        raise _wrapped(dialect, None, None, exc, lost=bool(dialect.is_disconnect(exc, None, None))) from exc
    tx = RawTx(dialect, proxy)
    try:
        dbapi_conn = proxy.dbapi_connection
        assert dbapi_conn is not None  # checked out
        if dialect.name == "sqlite":  # sqlite3 runs with isolation_level None (engine.py): we begin
            _call(tx, "BEGIN IMMEDIATE", lambda: _begin_immediate(dbapi_conn))
        try:
            yield tx
            _call(tx, "COMMIT", dbapi_conn.commit)
            Counter.commits += 1
        except BaseException:
            with contextlib.suppress(Exception):  # a lost connection: invalidated below or by the pool
                dbapi_conn.rollback()
            raise
    finally:
        if not kept:
            proxy.close()  # back to the pool (reset there; an invalidated one is discarded)
        elif proxy.is_valid and _in_transaction(proxy):  # its rollback failed: closed, never reused
            proxy.invalidate()


# The connection each SQLite engine keeps for ``raw_write_tx(nowait=True)``: opened through
# the pool (its "connect" events ran), then detached from it, busy timeout 0 and no automatic
# checkpoint set once.  Only the event loop's thread uses it, one transaction at a time.  What is
# kept is the DBAPI connection alone (:class:`_Kept`): the pool's proxy would reference the pool
# and so the engine, which then could never leave this weak mapping.
_NOWAIT: weakref.WeakKeyDictionary[Engine, _Kept] = weakref.WeakKeyDictionary()


class _Kept:
    """An engine's kept SQLite connection, as :class:`RawTx` uses a pool proxy:
    ``dbapi_connection`` (None once discarded), ``is_valid``, ``invalidate()``.
    Discarding it closes the DBAPI connection at once: one left inside a
    transaction must not hold the write lock until it is garbage collected
    (a traceback may keep it referenced for long)."""

    __slots__ = ("dbapi_connection", "_finalizer")

    def __init__(self, dbapi_connection: Any):
        self.dbapi_connection: Any = dbapi_connection
        self._finalizer: weakref.finalize[..., Any] | None = None

    def close_with(self, engine: Engine) -> None:
        """Close the connection when ``engine`` is garbage collected (not at some later collection
        of the connection's own reference cycle)."""
        self._finalizer = weakref.finalize(engine, self.invalidate)

    @property
    def is_valid(self) -> bool:
        return self.dbapi_connection is not None

    def invalidate(self, exception: BaseException | None = None) -> None:
        """Close the DBAPI connection (an open transaction is rolled back by SQLite) and forget it."""
        dbapi_connection, self.dbapi_connection = self.dbapi_connection, None
        finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.detach()
        if dbapi_connection is not None:
            with contextlib.suppress(Exception):
                dbapi_connection.close()

    close = invalidate


def _nowait_connection(engine: Engine) -> _Kept:
    kept = _NOWAIT.get(engine)
    if kept is not None and kept.is_valid:
        return kept
    proxy = engine.raw_connection()
    try:
        proxy.detach()  # the pool forgets it (and will never close it): from here on it is ours
    except BaseException:
        proxy.invalidate()
        raise
    kept = _Kept(proxy.dbapi_connection)
    try:
        _run_all(kept.dbapi_connection, ["PRAGMA busy_timeout = 0", "PRAGMA wal_autocheckpoint = 0"])
    except BaseException:
        kept.invalidate()
        raise
    _NOWAIT[engine] = kept
    kept.close_with(engine)
    return kept


def _in_transaction(proxy: Any) -> bool:
    try:
        return bool(proxy.dbapi_connection.in_transaction)
    except Exception:  # noqa: BLE001 - a closed connection: unusable either way
        return True


def close_nowait_connection(engine: Engine) -> None:
    """Close the connection ``engine`` keeps for ``raw_write_tx(nowait=True)``,
    if it has one (idempotent; a later such transaction opens another).  Call
    it where the engine's pool is disposed of.  An engine garbage collected
    without this call takes its kept connection with it."""
    kept = _NOWAIT.pop(engine, None)
    if kept is not None:
        kept.invalidate()


def _run_all(dbapi_conn: Any, statements: list[str]) -> None:
    cursor = dbapi_conn.cursor()
    try:
        for statement in statements:
            cursor.execute(statement)
    finally:
        cursor.close()


def _begin_immediate(dbapi_conn: Any) -> None:
    cursor = dbapi_conn.cursor()
    try:
        cursor.execute("BEGIN IMMEDIATE")
    finally:
        cursor.close()


def _call(tx: RawTx, what: str, fn: Callable[[], Any]) -> Any:
    error = tx.dialect.loaded_dbapi.Error
    try:
        return fn()
    except error as exc:
        lost = bool(tx.dialect.is_disconnect(exc, tx.connection.dbapi_connection, None))
        if lost:
            tx.invalidate(exc)
        raise _wrapped(tx.dialect, what, (), exc, lost=lost) from exc


def _wrapped(dialect: Dialect, sql: str | None, params: Any, exc: Exception, *, lost: bool) -> BaseException:
    return sa.exc.DBAPIError.instance(sql, params, exc, dialect.loaded_dbapi.Error, dialect=dialect,
                                      connection_invalidated=lost)


class _Compiled:
    """One statement compiled for one dialect."""

    __slots__ = ("sql", "positional", "names", "procs", "processed", "consts", "result_keys", "result_procs")

    def __init__(self, stmt: Any, dialect: Dialect, keys: Sequence[str] | None):
        # for_executemany: no implicit RETURNING of an INSERT's key (nothing reads it back)
        compiled = stmt.compile(dialect=dialect, column_keys=list(keys) if keys is not None else None,
                                for_executemany=True)
        if compiled.literal_execute_params or compiled.post_compile_params:
            raise ValueError("fastsql: statements with expanding or literal-execute parameters are not supported")
        self.sql: str = compiled.string
        self.positional: bool = bool(compiled.positional)
        binds = {name: bind for bind, name in compiled.bind_names.items()}
        names: list[str] = list(compiled.positiontup or ()) if self.positional else list(binds)
        self.names = tuple(names)
        procs: list[Callable[[Any], Any] | None] = []
        #: the values of binds the statement itself fixes (``status == "pending"``)
        self.consts: dict[str, Any] = {}
        for name in names:
            bind = binds[name]
            fast = getattr(bind.type, "fast_bind_processor", None)  # a type's own shortcut, same result
            proc = fast(dialect) if fast is not None else None
            procs.append(proc if proc is not None else bind.type.dialect_impl(dialect).bind_processor(dialect))
            if not bind.required:
                self.consts[name] = bind.effective_value
        self.procs = tuple(procs)
        self.processed = tuple((i, p) for i, p in enumerate(procs) if p is not None)
        # the columns a SELECT or a RETURNING hands back, with the result processors SQLAlchemy would apply
        columns = list(getattr(stmt, "exported_columns", ()) or ())
        self.result_keys = tuple(col.key for col in columns)
        self.result_procs = tuple(col.type.dialect_impl(dialect).result_processor(dialect, None) for col in columns)

    def params(self, values: Mapping[str, Any]) -> Any:
        if self.consts:
            values = {**self.consts, **values}
        row = list(map(values.__getitem__, self.names))
        for i, proc in self.processed:
            row[i] = proc(row[i])
        return row if self.positional else dict(zip(self.names, row))


class Prepared:
    """A Core statement run on the DBAPI cursor (see the module doc).

    ``keys``: for an INSERT, the columns given (the others take their
    defaults), in any order; None for statements whose bind parameters are
    all named (``sa.bindparam``).  Each call passes every bind parameter
    by name.
    """

    def __init__(self, stmt: Any, keys: Iterable[str] | None = None):
        self.stmt = stmt
        self.keys = tuple(keys) if keys is not None else None
        self._by_dialect: dict[tuple[str, str, int], _Compiled] = {}

    def compiled(self, dialect: Dialect) -> _Compiled:
        key = (dialect.name, dialect.driver, id(dialect))
        found = self._by_dialect.get(key)
        if found is None:
            found = self._by_dialect[key] = _Compiled(self.stmt, dialect, self.keys)
        return found

    def execute(self, conn: Conn, values: Mapping[str, Any]) -> int:
        """Execute once; the row count."""
        c = self.compiled(conn.dialect)
        return _run(conn, c.sql, c.params(values), many=False)

    def fetchall(self, conn: Conn, values: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Execute a SELECT (or a statement with RETURNING) once; its rows as
        dicts by column key, values as SQLAlchemy would return them."""
        c = self.compiled(conn.dialect)
        rows: list[Any] = []
        _run(conn, c.sql, c.params(values), many=False, into=rows)
        keys, procs = c.result_keys, c.result_procs
        return [dict(zip(keys, [v if p is None else p(v) for v, p in zip(row, procs)])) for row in rows]

    def executemany(self, conn: Conn, rows: Sequence[Mapping[str, Any]]) -> int:
        """Execute for every row (one DBAPI ``executemany``); the row count
        (-1 when the driver does not say)."""
        c = self.compiled(conn.dialect)
        return _run(conn, c.sql, [c.params(r) for r in rows], many=True)


def _run(conn: Conn, sql: str, params: Any, *, many: bool, into: list[Any] | None = None) -> int:
    Counter.statements += 1
    dialect = conn.dialect
    dbapi_conn = conn.connection.dbapi_connection
    assert dbapi_conn is not None  # an open connection inside a transaction
    cursor = dbapi_conn.cursor()
    try:
        if many:
            cursor.executemany(sql, params)
        else:
            cursor.execute(sql, params)
        if into is not None:
            into.extend(cursor.fetchall())
        return int(cursor.rowcount)
    except dialect.loaded_dbapi.Error as exc:
        lost = bool(dialect.is_disconnect(exc, dbapi_conn, cursor))
        if lost:
            conn.invalidate(exc)
        raise _wrapped(dialect, sql, params, exc, lost=lost) from exc
    finally:
        try:
            cursor.close()
        except dialect.loaded_dbapi.Error:  # a cursor of a lost connection
            pass


__all__ = ["Conn", "Counter", "Prepared", "RawTx", "close_nowait_connection", "raw_write_tx"]
