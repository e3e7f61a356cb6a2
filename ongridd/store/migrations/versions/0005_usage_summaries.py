"""Token usage per session, and stored summaries of a thread's older turns.

``chat_sessions`` gains four counters, summed over every model call the
session made: ``model_calls``, ``prompt_tokens``, ``completion_tokens`` and
``cached_tokens`` (cached prompt tokens, where the provider reports them).
They start at 0; rows from before this revision read 0.

``thread_summaries`` holds the summaries that stand in for a coordinator
thread's older turns in model requests (the history budget).  A row covers
the thread's messages with ``seq`` up to and including ``through_seq``;
``source`` is ``model`` (made by a separate, audited model call whose session
is ``summarizer_session_id``) or ``fallback`` (the user messages and final
answers, cut to fit).  The full transcript stays in ``chat_messages``.

Revision ID: 0005_usage_summaries
Revises: 0004_change_origins
Create Date: 2026-12-01

"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_usage_summaries"
down_revision: str | Sequence[str] | None = "0004_change_origins"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COUNTERS = ("model_calls", "prompt_tokens", "completion_tokens", "cached_tokens")


def upgrade() -> None:
    # NOT NULL with a constant server default: plain ALTER on SQLite and PostgreSQL
    for name in _COUNTERS:
        op.add_column("chat_sessions", sa.Column(name, sa.BigInteger, nullable=False, server_default="0"))
    op.create_table(
        "thread_summaries",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("session_id", sa.String(36), nullable=False),
        sa.Column("through_seq", sa.Integer, nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("summarizer_session_id", sa.String(36), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_thread_summaries"),
        sa.ForeignKeyConstraint(["session_id"], ["chat_sessions.id"], ondelete="CASCADE",
                                name="fk_thread_summaries_session_id_chat_sessions"),
        sa.ForeignKeyConstraint(["summarizer_session_id"], ["chat_sessions.id"], ondelete="SET NULL",
                                name="fk_thread_summaries_summarizer_session_id_chat_sessions"),
    )
    op.create_index("ix_thread_summaries_session_id_through_seq", "thread_summaries",
                    ["session_id", "through_seq"])


def downgrade() -> None:
    op.drop_table("thread_summaries")
    with op.batch_alter_table("chat_sessions") as batch:
        for name in reversed(_COUNTERS):
            batch.drop_column(name)
