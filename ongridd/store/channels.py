"""Channel-bridge persistence: seen platform event ids and turn origins.

``channel_events``: ``(platform, event_id) → seen_at``.  :meth:`ChannelStore.claim_event`
inserts the pair unless it was seen within ``EVENT_RETENTION_S`` (10 minutes)
and deletes older rows on the way, so a platform retry of one event never
starts a second turn — also after a daemon restart.

``turn_origins``: one row per turn a bridge started: ``session_id``,
``message_seq`` (the ``seq`` of the turn's user message in ``chat_messages``,
or None when the text was an interjection into a running turn), ``platform``,
``im_user``, ``conversation``, ``created_at``.  No secret ever goes in.

Errors: :class:`ongridd.errors.StoreError` (database), ValueError (bad
arguments, checked before the database is touched).  Cancellation: as
:class:`ongridd.store.engine.Database` (a started transaction completes).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ongridd.store.engine import Database, is_unique_violation, read_tx, write_tx
from ongridd.store.messages import next_seq
from ongridd.store.rows import check_text, new_id, row_dict, utcnow
from ongridd.store.schema import channel_events, turn_origins

EVENT_RETENTION_S = 600.0
MAX_EVENT_ID_CHARS = 200
MAX_PLATFORM_CHARS = 32
MAX_ORIGIN_FIELD_CHARS = 1000


def _claim(engine: Engine, platform: str, event_id: str, retention_s: float) -> bool:
    now = utcnow()
    with write_tx(engine) as conn:
        conn.execute(sa.delete(channel_events).where(channel_events.c.seen_at < now - timedelta(seconds=retention_s)))
        seen = conn.execute(sa.select(channel_events.c.seen_at).where(
            channel_events.c.platform == platform, channel_events.c.event_id == event_id)).first()
        if seen is not None:
            return False
        try:
            with conn.begin_nested():  # two deliveries racing past the check: the second insert loses
                conn.execute(sa.insert(channel_events).values(platform=platform, event_id=event_id, seen_at=now))
        except sa.exc.IntegrityError as exc:
            if is_unique_violation(exc):
                return False
            raise
    return True


def _record_origin(engine: Engine, values: dict[str, Any], predict_seq: bool) -> dict[str, Any]:
    now = utcnow()
    with write_tx(engine) as conn:
        seq = next_seq(conn, values["session_id"]) if predict_seq else None
        row = {"id": new_id(), "message_seq": seq, "created_at": now, **values}
        conn.execute(sa.insert(turn_origins).values(**row))
    return row_dict(row, ("created_at",))


def _list_origins(engine: Engine, session_id: str) -> list[dict[str, Any]]:
    with read_tx(engine) as conn:
        rows = conn.execute(sa.select(turn_origins).where(turn_origins.c.session_id == session_id)
                            .order_by(turn_origins.c.created_at, turn_origins.c.id)).all()
    return [row_dict(r, ("created_at",)) for r in rows]


def _bounded(value: Any, field: str, limit: int) -> str:
    text = check_text(value, field)
    if len(text) > limit:
        raise ValueError(f"{field}: at most {limit} characters, got {len(text)}")
    return text


class ChannelStore:
    """Async API over the two tables (each call runs in a worker thread)."""

    def __init__(self, db: Database):
        self._db = db

    async def claim_event(self, platform: str, event_id: str, *, retention_s: float = EVENT_RETENTION_S) -> bool:
        """True the first time ``(platform, event_id)`` is seen within
        ``retention_s`` seconds; False for a repeat (the caller then starts nothing)."""
        platform = _bounded(platform, "platform", MAX_PLATFORM_CHARS)
        event_id = _bounded(event_id, "event_id", MAX_EVENT_ID_CHARS)
        return await self._db.run("claim channel event", _claim, platform, event_id, retention_s)

    async def record_origin(self, *, session_id: str, platform: str, im_user: str, conversation: str,
                            predict_seq: bool) -> dict[str, Any]:
        """Record where a turn came from; ``predict_seq``: the turn is about
        to start on an idle thread whose writes are flushed, so its user
        message gets the next ``seq`` (stored as ``message_seq``)."""
        values = {
            "session_id": _bounded(session_id, "session_id", 36),
            "platform": _bounded(platform, "platform", MAX_PLATFORM_CHARS),
            "im_user": _bounded(im_user, "im_user", MAX_ORIGIN_FIELD_CHARS),
            "conversation": _bounded(conversation, "conversation", MAX_ORIGIN_FIELD_CHARS),
        }
        return await self._db.run("record turn origin", _record_origin, values, predict_seq)

    async def list_origins(self, session_id: str) -> list[dict[str, Any]]:
        """The origin rows of a session, oldest first."""
        return await self._db.run_read("list turn origins", _list_origins, session_id)
