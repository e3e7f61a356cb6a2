"""Messages that joined a running turn, held until its model reads them.

``pending_messages``: one row per message a person sent while a turn of
their thread was running, written when the message is accepted and deleted
in the transaction that appends it to ``chat_messages`` (when the turn's
model reads it, or when the turn ends without reading it).  A row left by a
crash is appended to its thread by the startup recovery.

Revision ID: 0008_pending_messages
Revises: 0007_last_turn_error
Create Date: 2026-12-06

"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_pending_messages"
down_revision: str | Sequence[str] | None = "0007_last_turn_error"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the column types (a revision never imports the live schema).
ID = sa.String(36)
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "pending_messages",
        sa.Column("id", ID, nullable=False),
        sa.Column("session_id", ID, nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_pending_messages"),
        sa.ForeignKeyConstraint(["session_id"], ["chat_sessions.id"], ondelete="CASCADE",
                                name="fk_pending_messages_session_id_chat_sessions"),
    )
    op.create_index("ix_pending_messages_session_id", "pending_messages", ["session_id"])


def downgrade() -> None:
    op.drop_table("pending_messages")
