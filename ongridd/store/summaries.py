"""Stored summaries of a coordinator thread's older turns (table ``thread_summaries``).

Blocking functions on an engine (the async :class:`ongridd.store.store.Store`
runs them in worker threads).  A row covers the thread's messages with
``seq <= through_seq``; the newest row (highest ``through_seq``) is the one
model requests use.  Rows are never updated: a new summary is a new row, so
the transcript API can show every summary where it was made.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ongridd.store.engine import read_tx, write_tx
from ongridd.store.messages import MESSAGE_COLUMNS
from ongridd.store.rows import check_choice, clean_text, new_id, row_dict, utcnow
from ongridd.store.schema import chat_messages, thread_summaries

SUMMARY_SOURCES = ("model", "fallback")
_COLUMNS = (thread_summaries.c.id, thread_summaries.c.session_id, thread_summaries.c.through_seq,
            thread_summaries.c.content, thread_summaries.c.source, thread_summaries.c.summarizer_session_id,
            thread_summaries.c.created_at)


def add_summary(engine: Engine, session_id: str, through_seq: int, content: str, source: str,
                summarizer_session_id: str | None) -> dict[str, Any]:
    """Insert a summary row; returns it as a dict (``created_at`` ISO text).
    ``content`` is stored as every free-text column is (held secrets
    redacted, NUL as U+FFFD: :func:`ongridd.store.rows.clean_text`).
    ValueError for an unknown ``source`` or a negative ``through_seq``."""
    check_choice(source, SUMMARY_SOURCES, "source")
    if through_seq < 0:
        raise ValueError(f"through_seq: expected >= 0, got {through_seq}")
    values = {"id": new_id(), "session_id": session_id, "through_seq": int(through_seq),
              "content": clean_text(content), "source": source, "summarizer_session_id": summarizer_session_id,
              "created_at": utcnow()}
    with write_tx(engine) as conn:
        conn.execute(sa.insert(thread_summaries).values(**values))
        row = conn.execute(sa.select(*_COLUMNS).where(thread_summaries.c.id == values["id"])).one()
    return row_dict(row, ("created_at",))


def latest_summary(engine: Engine, session_id: str) -> dict[str, Any] | None:
    """The summary with the highest ``through_seq`` of the session (the newest
    of equals), or None."""
    query = (sa.select(*_COLUMNS).where(thread_summaries.c.session_id == session_id)
             .order_by(thread_summaries.c.through_seq.desc(), thread_summaries.c.created_at.desc()).limit(1))
    with read_tx(engine) as conn:
        row = conn.execute(query).first()
    return row_dict(row, ("created_at",)) if row is not None else None


def summaries_between(engine: Engine, session_id: str, after_seq: int, through_seq: int | None) -> list[dict[str, Any]]:
    """Summaries with ``after_seq < through_seq <= through_seq`` (no upper
    bound when None), in ``through_seq`` order."""
    query = sa.select(*_COLUMNS).where(thread_summaries.c.session_id == session_id,
                                       thread_summaries.c.through_seq > after_seq)
    if through_seq is not None:
        query = query.where(thread_summaries.c.through_seq <= through_seq)
    query = query.order_by(thread_summaries.c.through_seq, thread_summaries.c.created_at)
    with read_tx(engine) as conn:
        rows = conn.execute(query).all()
    return [row_dict(r, ("created_at",)) for r in rows]


def messages_after(engine: Engine, session_id: str, after_seq: int) -> list[dict[str, Any]]:
    """The session's messages with ``seq > after_seq`` in seq order (as
    :func:`ongridd.store.messages.load_messages`): the incremental read a
    thread's in-memory history uses (an index range scan on (session_id, seq))."""
    query = (sa.select(*MESSAGE_COLUMNS)
             .where(chat_messages.c.session_id == session_id, chat_messages.c.seq > after_seq)
             .order_by(chat_messages.c.seq))
    with read_tx(engine) as conn:
        rows = conn.execute(query).all()
    return [row_dict(r, ("created_at",)) for r in rows]
