"""Change events made outside Ongrid: when they happened and who reported them.

``occurred_at`` is the time of the change itself (a deploy recorded after the
fact carries its own time; Ongrid's own changes: the time they were made) and
is what listings filter and sort by; rows from before this revision get
their ``created_at``.  ``recorded_by`` is the authenticated caller of
``POST /api/changes`` (None for Ongrid's own changes).

Revision ID: 0004_change_origins
Revises: 0003_tool_call_ids
Create Date: 2026-12-01

"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_change_origins"
down_revision: str | Sequence[str] | None = "0003_tool_call_ids"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # nullable columns without defaults: plain ALTER on SQLite and PostgreSQL
    op.add_column("change_events", sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("change_events", sa.Column("recorded_by", sa.Text, nullable=True))
    op.execute("UPDATE change_events SET occurred_at = created_at WHERE occurred_at IS NULL")
    op.create_index("ix_change_events_occurred_at", "change_events", ["occurred_at"])
    op.create_index("ix_change_events_subject_occurred_at", "change_events", ["subject", "occurred_at"])


def downgrade() -> None:
    op.drop_index("ix_change_events_subject_occurred_at", table_name="change_events")
    op.drop_index("ix_change_events_occurred_at", table_name="change_events")
    with op.batch_alter_table("change_events") as batch:
        batch.drop_column("recorded_by")
        batch.drop_column("occurred_at")
