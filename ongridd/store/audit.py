"""Audit rows (one per tool call) and review-gate proposals: blocking operations."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ongridd.errors import NotFound, StoreError
from ongridd.store.engine import read_tx, write_tx
from ongridd.store.rows import new_id, row_dict, utcnow
from ongridd.store.schema import audit_logs, chat_sessions, mutating_proposals
from ongridd.store.sessions import subtree_rows

PROPOSAL_TIME_KEYS = ("created_at", "decided_at")


def add_audit(engine: Engine, values: dict[str, Any]) -> str:
    with write_tx(engine) as conn:
        return add_audit_in(conn, values, utcnow())


def add_audit_in(conn: Connection, values: dict[str, Any], now: datetime) -> str:
    """Insert one audit row inside ``conn``'s transaction; its id.  NotFound for an unknown session."""
    audit_id = new_id()
    known = conn.execute(sa.select(chat_sessions.c.id).where(chat_sessions.c.id == values["session_id"])).first()
    if known is None:
        raise NotFound(f"session {values['session_id']} does not exist")
    conn.execute(sa.insert(audit_logs).values(id=audit_id, created_at=now, **values))
    return audit_id


def list_audit(engine: Engine, session_id: str, include_children: bool) -> list[dict[str, Any]]:
    with read_tx(engine) as conn:
        if include_children:
            ids = [r["id"] for r in subtree_rows(conn, session_id)]
        else:
            ids = [session_id]
        if not ids:
            return []
        rows = conn.execute(audit_rows_query(ids)).all()
    return [row_dict(r, ("created_at",)) for r in rows]


def audit_rows_query(session_ids: list[str]) -> sa.Select[Any]:
    """Audit rows of ``session_ids`` with their session's ``agent_id``, oldest first."""
    return (
        sa.select(audit_logs, chat_sessions.c.agent_id)
        .join(chat_sessions, chat_sessions.c.id == audit_logs.c.session_id)
        .where(audit_logs.c.session_id.in_(session_ids))
        .order_by(audit_logs.c.created_at, audit_logs.c.id)
    )


def create_proposal(engine: Engine, values: dict[str, Any]) -> str:
    proposal_id = new_id()
    with write_tx(engine) as conn:
        known = conn.execute(sa.select(chat_sessions.c.id).where(chat_sessions.c.id == values["session_id"])).first()
        if known is None:
            raise NotFound(f"session {values['session_id']} does not exist")
        conn.execute(sa.insert(mutating_proposals).values(id=proposal_id, created_at=utcnow(), **values))
    return proposal_id


def decide_proposal(
    engine: Engine, proposal_id: str, decision: str, decision_reason: str | None, reviewer_session_id: str | None
) -> None:
    with write_tx(engine) as conn:
        row = conn.execute(
            sa.select(mutating_proposals.c.decision)
            .where(mutating_proposals.c.id == proposal_id)
            .with_for_update()
        ).first()
        if row is None:
            raise NotFound(f"proposal {proposal_id} does not exist")
        if row.decision is not None:
            raise StoreError(f"proposal {proposal_id} was already decided ({row.decision}); a decision is final")
        conn.execute(
            sa.update(mutating_proposals)
            .where(mutating_proposals.c.id == proposal_id)
            .values(
                decision=decision,
                decision_reason=decision_reason,
                reviewer_session_id=reviewer_session_id,
                decided_at=utcnow(),
            )
        )


def get_proposal(engine: Engine, proposal_id: str) -> dict[str, Any] | None:
    with read_tx(engine) as conn:
        row = conn.execute(sa.select(mutating_proposals).where(mutating_proposals.c.id == proposal_id)).first()
    return row_dict(row, PROPOSAL_TIME_KEYS) if row is not None else None
