"""Audit rows and review proposals carry the model's tool-call id.

A gated call's audit row (``audit_logs``) and the proposal the review gate
recorded for it (``mutating_proposals``) share ``(session_id, tool_call_id)``,
which is how an audit listing shows each gated call's decision.  Both columns
are nullable: rows written before this revision have no id and no link.

Revision ID: 0003_tool_call_ids
Revises: 0002_channels
Create Date: 2026-12-01

"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_tool_call_ids"
down_revision: str | Sequence[str] | None = "0002_channels"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # ADD COLUMN of a nullable column with no default: plain ALTER on SQLite and PostgreSQL
    op.add_column("audit_logs", sa.Column("tool_call_id", sa.Text, nullable=True))
    op.add_column("mutating_proposals", sa.Column("tool_call_id", sa.Text, nullable=True))
    op.create_index("ix_mutating_proposals_session_id_tool_call_id", "mutating_proposals",
                    ["session_id", "tool_call_id"])


def downgrade() -> None:
    op.drop_index("ix_mutating_proposals_session_id_tool_call_id", table_name="mutating_proposals")
    with op.batch_alter_table("mutating_proposals") as batch:
        batch.drop_column("tool_call_id")
    with op.batch_alter_table("audit_logs") as batch:
        batch.drop_column("tool_call_id")
