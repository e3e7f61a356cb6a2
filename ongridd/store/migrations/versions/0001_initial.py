"""The tables of docs/architecture.md §12: sessions, messages, audit, proposals, incidents, change events.

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-29

"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_initial"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the column types (a revision never imports the live schema).
ID = sa.String(36)
TS = sa.DateTime(timezone=True)
JSONType = sa.JSON(none_as_null=True)
MessageKey = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "chat_sessions",
        sa.Column("id", ID, nullable=False),
        sa.Column("agent_id", sa.Text, nullable=False),
        sa.Column("parent_session_id", ID, nullable=True),
        sa.Column("user_id", sa.Text, nullable=False),
        sa.Column("thread_id", sa.Text, nullable=True),
        sa.Column("description", sa.Text, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("closed_at", TS, nullable=True),
        sa.Column("close_reason", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_chat_sessions"),
        sa.ForeignKeyConstraint(
            ["parent_session_id"],
            ["chat_sessions.id"],
            name="fk_chat_sessions_parent_session_id_chat_sessions",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_chat_sessions_parent_session_id", "chat_sessions", ["parent_session_id"])
    op.create_index("ix_chat_sessions_status", "chat_sessions", ["status"])
    op.create_index(
        "uq_chat_sessions_coordinator",
        "chat_sessions",
        ["user_id", "thread_id"],
        unique=True,
        sqlite_where=sa.text("parent_session_id IS NULL"),
        postgresql_where=sa.text("parent_session_id IS NULL"),
    )

    op.create_table(
        "chat_messages",
        sa.Column("id", MessageKey, autoincrement=True, nullable=False),
        sa.Column("session_id", ID, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text, nullable=True),
        sa.Column("tool_calls", JSONType, nullable=True),
        sa.Column("tool_call_id", sa.Text, nullable=True),
        sa.Column("name", sa.Text, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_chat_messages"),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["chat_sessions.id"],
            name="fk_chat_messages_session_id_chat_sessions",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("session_id", "seq", name="uq_chat_messages_session_id_seq"),
    )

    op.create_table(
        "audit_logs",
        sa.Column("id", ID, nullable=False),
        sa.Column("session_id", ID, nullable=False),
        sa.Column("tool_name", sa.Text, nullable=False),
        sa.Column("arguments", sa.Text, nullable=False),
        sa.Column("result", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("duration_ms", sa.Integer, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_logs"),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["chat_sessions.id"],
            name="fk_audit_logs_session_id_chat_sessions",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_audit_logs_session_id_created_at", "audit_logs", ["session_id", "created_at"])

    op.create_table(
        "mutating_proposals",
        sa.Column("id", ID, nullable=False),
        sa.Column("session_id", ID, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("blast_radius", sa.String(16), nullable=False),
        sa.Column("operator", sa.Text, nullable=False),
        sa.Column("decision", sa.String(16), nullable=True),
        sa.Column("decision_reason", sa.Text, nullable=True),
        sa.Column("reviewer_session_id", ID, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("decided_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_mutating_proposals"),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["chat_sessions.id"],
            name="fk_mutating_proposals_session_id_chat_sessions",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["reviewer_session_id"],
            ["chat_sessions.id"],
            name="fk_mutating_proposals_reviewer_session_id_chat_sessions",
            ondelete="SET NULL",
        ),
    )
    op.create_index("ix_mutating_proposals_session_id", "mutating_proposals", ["session_id"])

    op.create_table(
        "incidents",
        sa.Column("id", ID, nullable=False),
        sa.Column("fingerprint", sa.Text, nullable=False),
        sa.Column("alertname", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("severity", sa.Text, nullable=True),
        sa.Column("labels", JSONType, nullable=False),
        sa.Column("annotations", JSONType, nullable=False),
        sa.Column("starts_at", TS, nullable=True),
        sa.Column("ends_at", TS, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_incidents"),
        sa.UniqueConstraint("fingerprint", name="uq_incidents_fingerprint"),
    )
    op.create_index("ix_incidents_status", "incidents", ["status"])
    op.create_index("ix_incidents_updated_at", "incidents", ["updated_at"])

    op.create_table(
        "change_events",
        sa.Column("id", ID, nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("actor", sa.Text, nullable=False),
        sa.Column("detail", JSONType, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_change_events"),
    )
    op.create_index("ix_change_events_kind_created_at", "change_events", ["kind", "created_at"])
    op.create_index("ix_change_events_created_at", "change_events", ["created_at"])


def downgrade() -> None:
    op.drop_table("change_events")
    op.drop_table("incidents")
    op.drop_table("mutating_proposals")
    op.drop_table("audit_logs")
    op.drop_table("chat_messages")
    op.drop_table("chat_sessions")
