"""Messages held for a running turn (``pending_messages``).

A message a person sends while a turn of their thread runs is read by that
turn's model at its next call, and only then takes its place (a ``seq``) in
the thread's history, after the tool results the model saw before it.  Until
then it is held in ``pending_messages``: written when it is accepted, and
deleted in the same transaction as the ``chat_messages`` row that finally
carries it (the store writer's ``message`` write with ``settles``).  So a
crash between the two never loses it and never stores it twice: the startup
recovery appends every row still held to its thread (:func:`recover_pending_in`),
as a user message at the end of its history (unanswered, like a message a
stopped turn never read: not named :data:`JOINED_NAME`, which says the turn
answered it).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ongridd.store.fastsql import Conn, Prepared
from ongridd.store.messages import append_message_in
from ongridd.store.schema import pending_messages

#: ``chat_messages.name`` of a user message sent while its thread's turn was queued or running, which
#: that turn answered (the transcript marks it ``joined``; never sent to the model: ``name`` is wire
#: only for tool messages)
JOINED_NAME = "joined_turn"

_PENDING_KEYS = ("id", "session_id", "content", "created_at")
_INSERT_PENDING = Prepared(sa.insert(pending_messages), _PENDING_KEYS)
_DELETE_PENDING = Prepared(sa.delete(pending_messages).where(pending_messages.c.id == sa.bindparam("pid")))


def hold_many(conn: Conn, rows: Sequence[dict[str, Any]]) -> None:
    """Insert held messages (``{id, session_id, content, created_at}`` each) in ``conn``'s transaction."""
    if rows:
        _INSERT_PENDING.executemany(conn, rows)


def settle_many(conn: Conn, ids: Sequence[str]) -> None:
    """Delete the held messages ``ids`` in ``conn``'s transaction (an id not held: nothing)."""
    if ids:
        _DELETE_PENDING.executemany(conn, [{"pid": pid} for pid in ids])


def recover_pending_in(conn: Connection, now: datetime) -> int:
    """Append every held message to its thread (a user message, in the order
    they were accepted, with the time it was sent) and delete them; the
    number appended.  Runs in the startup recovery's transaction, before
    any client is accepted (so nothing is held meanwhile)."""
    rows = conn.execute(sa.select(pending_messages).order_by(pending_messages.c.created_at,
                                                               pending_messages.c.id)).all()
    seqs: dict[str, int] = {}
    for row in rows:
        append_message_in(conn, row.session_id, {"role": "user", "content": row.content}, row.created_at, seqs)
    if rows:
        conn.execute(sa.delete(pending_messages))
    return len(rows)
