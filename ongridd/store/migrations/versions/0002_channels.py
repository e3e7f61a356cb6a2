"""Channel bridges: seen platform event ids and the origin of IM turns.

Revision ID: 0002_channels
Revises: 0001_initial
Create Date: 2026-12-01

"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_channels"
down_revision: str | Sequence[str] | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the column types (a revision never imports the live schema).
ID = sa.String(36)
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "channel_events",
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("event_id", sa.String(200), nullable=False),
        sa.Column("seen_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("platform", "event_id", name="pk_channel_events"),
    )
    op.create_index("ix_channel_events_seen_at", "channel_events", ["seen_at"])
    op.create_table(
        "turn_origins",
        sa.Column("id", ID, nullable=False),
        sa.Column("session_id", ID, nullable=False),
        sa.Column("message_seq", sa.Integer, nullable=True),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("im_user", sa.Text, nullable=False),
        sa.Column("conversation", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_turn_origins"),
        sa.ForeignKeyConstraint(["session_id"], ["chat_sessions.id"], ondelete="CASCADE",
                                name="fk_turn_origins_session_id_chat_sessions"),
    )
    op.create_index("ix_turn_origins_session_id", "turn_origins", ["session_id"])


def downgrade() -> None:
    op.drop_table("turn_origins")
    op.drop_table("channel_events")
