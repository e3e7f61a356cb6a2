"""The tables of docs/architecture.md §12 as SQLAlchemy Core metadata.

This module describes the schema the code expects; the Alembic revisions in
``ongridd/store/migrations/versions`` create it (a test checks the two agree).

Ids of sessions, proposals, incidents, audit rows and change events are UUID
strings with dashes (``String(36)``).  Message rows have an integer surrogate
key and a per-session ``seq`` (1, 2, 3, …; unique per session) that orders a
history.  Every time column holds timezone-aware UTC (see :class:`UTCDateTime`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from ongridd.store.rows import to_utc, utc_text

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

# uq_chat_sessions_coordinator's predicate: only coordinator rows (no parent) are unique per (user, thread)
COORDINATOR_ONLY = "parent_session_id IS NULL"


class UTCDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend.

    PostgreSQL stores ``timestamp with time zone``.  SQLite has no time type:
    the value is stored as naive UTC text and given ``tzinfo=UTC`` again when
    read.  Naive datetimes passed in are taken to be UTC.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = to_utc(value)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return to_utc(value)

    def fast_bind_processor(self, dialect: Dialect) -> Any:
        """For :mod:`ongridd.store.fastsql`: on SQLite, one function giving the text that
        :meth:`process_bind_param` then SQLAlchemy's SQLite ``DATETIME`` would store
        (``2026-01-02 03:04:05.000006``, naive UTC) for a ``datetime``; anything else goes the
        general way (and is refused there as it would be).  None elsewhere: use the general way."""
        if dialect.name != "sqlite":
            return None
        general = self.dialect_impl(dialect).bind_processor(dialect)

        def process(value: Any) -> Any:
            if type(value) is datetime:
                return utc_text(value, " ")
            return general(value) if general is not None else value

        return process


ID = sa.String(36)
JSONType = sa.JSON(none_as_null=True)
# The message key: BIGINT identity on PostgreSQL, the rowid alias on SQLite.
MessageKey = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

chat_sessions = sa.Table(
    "chat_sessions",
    metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("agent_id", sa.Text, nullable=False),
    sa.Column("parent_session_id", ID, sa.ForeignKey("chat_sessions.id", ondelete="CASCADE"), nullable=True),
    sa.Column("user_id", sa.Text, nullable=False),
    sa.Column("thread_id", sa.Text, nullable=True),
    sa.Column("description", sa.Text, nullable=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("started_at", UTCDateTime, nullable=True),
    sa.Column("closed_at", UTCDateTime, nullable=True),
    sa.Column("close_reason", sa.Text, nullable=True),
    # token usage summed over the session's model calls (revision 0005)
    sa.Column("model_calls", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("prompt_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("completion_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cached_tokens", sa.BigInteger, nullable=False, server_default="0"),
    # a worker's or reviewer's turn: the seq of the coordinator's user message that started it (revision 0006)
    sa.Column("turn_seq", sa.Integer, nullable=True),
    # a thread's last turn that ended without an answer: its error, and the thread's last message seq
    # then (revision 0007; stale once a later message exists)
    sa.Column("last_turn_error", sa.Text, nullable=True),
    sa.Column("last_turn_error_seq", sa.Integer, nullable=True),
    sa.Index("ix_chat_sessions_parent_session_id", "parent_session_id"),
    sa.Index("ix_chat_sessions_status", "status"),
    # One long-lived coordinator row per (user, thread).  The PostgreSQL predicate is added by
    # _partial_on_postgresql below, not here: a ``postgresql_*`` keyword makes SQLAlchemy import
    # its whole PostgreSQL dialect, which a daemon on SQLite never uses.
    sa.Index(
        "uq_chat_sessions_coordinator",
        "user_id",
        "thread_id",
        unique=True,
        sqlite_where=sa.text(COORDINATOR_ONLY),
    ),
)


@sa.event.listens_for(chat_sessions, "before_create")
def _partial_on_postgresql(table: sa.Table, connection: Any, **_kw: Any) -> None:
    """Give ``uq_chat_sessions_coordinator`` its ``WHERE`` on PostgreSQL too.

    Runs when ``metadata.create_all`` (or ``chat_sessions.create``) is about
    to create the table, i.e. before its indexes' DDL is compiled.  Alembic's
    index comparison does not read the predicate; the revisions state it
    for both dialects themselves.
    """
    if connection.dialect.name == "postgresql":
        index = next(ix for ix in table.indexes if ix.name == "uq_chat_sessions_coordinator")
        index.dialect_kwargs["postgresql_where"] = sa.text(COORDINATOR_ONLY)  # the same value each time

chat_messages = sa.Table(
    "chat_messages",
    metadata,
    sa.Column("id", MessageKey, primary_key=True, autoincrement=True),
    sa.Column("session_id", ID, sa.ForeignKey("chat_sessions.id", ondelete="CASCADE"), nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("content", sa.Text, nullable=True),
    sa.Column("tool_calls", JSONType, nullable=True),
    sa.Column("tool_call_id", sa.Text, nullable=True),
    sa.Column("name", sa.Text, nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint("session_id", "seq", name="uq_chat_messages_session_id_seq"),
)

audit_logs = sa.Table(
    "audit_logs",
    metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("session_id", ID, sa.ForeignKey("chat_sessions.id", ondelete="CASCADE"), nullable=False),
    sa.Column("tool_name", sa.Text, nullable=False),
    sa.Column("arguments", sa.Text, nullable=False),
    sa.Column("result", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("duration_ms", sa.Integer, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    # the model's tool-call id (None for rows from before it was recorded)
    sa.Column("tool_call_id", sa.Text, nullable=True),
    sa.Index("ix_audit_logs_session_id_created_at", "session_id", "created_at"),
)

mutating_proposals = sa.Table(
    "mutating_proposals",
    metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("session_id", ID, sa.ForeignKey("chat_sessions.id", ondelete="CASCADE"), nullable=False),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("blast_radius", sa.String(16), nullable=False),
    sa.Column("operator", sa.Text, nullable=False),
    sa.Column("decision", sa.String(16), nullable=True),
    sa.Column("decision_reason", sa.Text, nullable=True),
    sa.Column(
        "reviewer_session_id", ID, sa.ForeignKey("chat_sessions.id", ondelete="SET NULL"), nullable=True
    ),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("decided_at", UTCDateTime, nullable=True),
    # the gated call's tool-call id: (session_id, tool_call_id) links a proposal to its audit row
    sa.Column("tool_call_id", sa.Text, nullable=True),
    sa.Index("ix_mutating_proposals_session_id", "session_id"),
    sa.Index("ix_mutating_proposals_session_id_tool_call_id", "session_id", "tool_call_id"),
)

incidents = sa.Table(
    "incidents",
    metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("fingerprint", sa.Text, nullable=False),
    sa.Column("alertname", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("severity", sa.Text, nullable=True),
    sa.Column("labels", JSONType, nullable=False),
    sa.Column("annotations", JSONType, nullable=False),
    sa.Column("starts_at", UTCDateTime, nullable=True),
    sa.Column("ends_at", UTCDateTime, nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint("fingerprint", name="uq_incidents_fingerprint"),
    sa.Index("ix_incidents_status", "status"),
    sa.Index("ix_incidents_updated_at", "updated_at"),
)

change_events = sa.Table(
    "change_events",
    metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("detail", JSONType, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    # when the change happened (a deploy recorded afterwards: its own time);
    # always set since revision 0004 (older rows: created_at)
    sa.Column("occurred_at", UTCDateTime, nullable=True),
    # the authenticated caller who recorded a change made outside Ongrid
    # (POST /api/changes); None for Ongrid's own changes
    sa.Column("recorded_by", sa.Text, nullable=True),
    sa.Index("ix_change_events_kind_created_at", "kind", "created_at"),
    sa.Index("ix_change_events_created_at", "created_at"),
    sa.Index("ix_change_events_occurred_at", "occurred_at"),
    sa.Index("ix_change_events_subject_occurred_at", "subject", "occurred_at"),
)

# Channel bridges: event ids seen (kept 10 minutes, so a platform retry never
# starts a second turn, also across a restart) and the origin of each turn
# started from an IM conversation (platform, IM user, conversation).
channel_events = sa.Table(
    "channel_events",
    metadata,
    sa.Column("platform", sa.String(32), primary_key=True),
    sa.Column("event_id", sa.String(200), primary_key=True),
    sa.Column("seen_at", UTCDateTime, nullable=False),
    sa.Index("ix_channel_events_seen_at", "seen_at"),
)

turn_origins = sa.Table(
    "turn_origins",
    metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("session_id", ID, sa.ForeignKey("chat_sessions.id", ondelete="CASCADE"), nullable=False),
    sa.Column("message_seq", sa.Integer, nullable=True),
    sa.Column("platform", sa.String(32), nullable=False),
    sa.Column("im_user", sa.Text, nullable=False),
    sa.Column("conversation", sa.Text, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Index("ix_turn_origins_session_id", "session_id"),
)

# Summaries standing in for a coordinator thread's older turns in model
# requests (the history budget): a row covers messages with seq <= through_seq;
# source is "model" (an audited summary call, its session in
# summarizer_session_id) or "fallback" (user messages and final answers, cut).
thread_summaries = sa.Table(
    "thread_summaries",
    metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("session_id", ID, sa.ForeignKey("chat_sessions.id", ondelete="CASCADE"), nullable=False),
    sa.Column("through_seq", sa.Integer, nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column(
        "summarizer_session_id", ID, sa.ForeignKey("chat_sessions.id", ondelete="SET NULL"), nullable=True
    ),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Index("ix_thread_summaries_session_id_through_seq", "session_id", "through_seq"),
)

# Messages a person sent while a turn of their thread was running, held here
# from the moment they are accepted until the turn's model reads them (they
# are then appended to chat_messages in the same transaction as this row is
# deleted).  A row found at startup is a message a crash cut off before that:
# the startup recovery appends it to its thread.
pending_messages = sa.Table(
    "pending_messages",
    metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("session_id", ID, sa.ForeignKey("chat_sessions.id", ondelete="CASCADE"), nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Index("ix_pending_messages_session_id", "session_id"),
)

TABLE_NAMES = (
    "chat_sessions",
    "chat_messages",
    "audit_logs",
    "mutating_proposals",
    "incidents",
    "change_events",
    "channel_events",
    "turn_origins",
    "thread_summaries",
    "pending_messages",
)
