"""A thread's row says why its last turn ended without an answer.

``chat_sessions.last_turn_error``: for a coordinator row, the error its last
failed or stopped turn ended with (``provider_error: …``, ``internal: …``,
``stopped: …``, as the turn's ``error`` frame said it);
``last_turn_error_seq``: the thread's last message ``seq`` when that turn
ended, so a later turn (one answered, or one cut off by a crash, which
writes nothing) makes it stale.  NULL for rows of other kinds and for turns
that ended before this revision.

Revision ID: 0007_last_turn_error
Revises: 0006_turn_seq
Create Date: 2026-12-06

"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_last_turn_error"
down_revision: str | Sequence[str] | None = "0006_turn_seq"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # nullable columns without a default: plain ALTER on SQLite and PostgreSQL
    op.add_column("chat_sessions", sa.Column("last_turn_error", sa.Text, nullable=True))
    op.add_column("chat_sessions", sa.Column("last_turn_error_seq", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chat_sessions") as batch:  # SQLite: copy-and-move
        batch.drop_column("last_turn_error_seq")
        batch.drop_column("last_turn_error")
