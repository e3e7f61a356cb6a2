"""Worker and reviewer rows name the turn that started them.

``chat_sessions.turn_seq``: for a worker or reviewer row, the ``seq`` of the
coordinator's user message whose turn started it, so a thread's workers
group by turn.  NULL for coordinator rows and for rows written before this
revision.

Revision ID: 0006_turn_seq
Revises: 0005_usage_summaries
Create Date: 2026-12-01

"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_turn_seq"
down_revision: str | Sequence[str] | None = "0005_usage_summaries"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # a nullable column without a default: plain ALTER on SQLite and PostgreSQL
    op.add_column("chat_sessions", sa.Column("turn_seq", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chat_sessions") as batch:  # SQLite: copy-and-move
        batch.drop_column("turn_seq")
