"""Small value helpers shared by the store modules: ids, UTC times, row → dict.

Times are timezone-aware UTC ``datetime`` objects inside the store and ISO
8601 strings with a ``Z`` suffix and microseconds outside it
(``2026-01-02T03:04:05.000006Z``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, overload

from ongridd.secretset import redact
from ongridd.unicodetext import valid_text

#: session statuses (docs/architecture.md §11, §12)
COORDINATOR_STATUS = "open"
ACTIVE_STATUSES = ("pending", "running")
TERMINAL_STATUSES = ("completed", "failed", "killed")
SESSION_STATUSES = (COORDINATOR_STATUS, *ACTIVE_STATUSES, *TERMINAL_STATUSES)
MESSAGE_ROLES = ("system", "user", "assistant", "tool")
DECISIONS = ("approve", "reject")
INCIDENT_STATUSES = ("firing", "resolved", "acknowledged")


#: random bytes drawn from the OS at once for this many ids (one ``getrandom`` call, not one per id)
_ID_BATCH = 256
_id_pool = bytearray()
_id_lock = threading.Lock()


def _forget_id_pool() -> None:  # a forked child must not hand out its parent's next ids
    global _id_pool, _id_lock
    _id_pool, _id_lock = bytearray(), threading.Lock()


os.register_at_fork(after_in_child=_forget_id_pool)


def new_id() -> str:
    """A new UUID version 7 (RFC 9562) in canonical text form (with dashes):
    the Unix time in milliseconds in the first 48 bits, then 74 random bits
    from ``os.urandom``, drawn for ``_ID_BATCH`` ids at a time.  Time-ordered
    ids put the index entries of rows written together (a turn's sessions,
    messages and audit rows) on the same few b-tree pages, where random ones
    touch a page per row: fewer pages per commit and per WAL checkpoint (about
    4 % of an agent flow, measured).  Thread-safe; a forked child draws its own."""
    global _id_pool
    with _id_lock:
        if not _id_pool:
            _id_pool = bytearray(os.urandom(16 * _ID_BATCH))
        raw = _id_pool[-16:]
        del _id_pool[-16:]
    raw[0:6] = (time.time_ns() // 1_000_000).to_bytes(6, "big")  # unix_ts_ms
    raw[6] = (raw[6] & 0x0F) | 0x70  # version 7
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def to_utc(value: datetime) -> datetime:
    """``value`` as aware UTC; a naive datetime is taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def iso(value: datetime | None) -> str | None:
    """``2026-01-02T03:04:05.000006Z`` for an aware or naive-UTC datetime; None stays None."""
    if value is None:
        return None
    if value.year >= 1000 and (value.tzinfo is UTC or value.tzinfo is None):
        return utc_text(value, "T") + "Z"  # (strftime writes a year below 1000 unpadded; isoformat pads it)
    return to_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


#: the last second :func:`utc_text` wrote: ``((year, month, day, hour, minute, second, sep),
#: its text up to the seconds)`` (rows written close together share it; one tuple, swapped whole,
#: so threads may share it)
_last_second: tuple[tuple[int, int, int, int, int, int, str], str] = ((0, 0, 0, 0, 0, 0, ""), "")


def utc_text(value: datetime, sep: str) -> str:
    """``value`` in UTC as ``2026-01-02{sep}03:04:05.000006`` (no offset; a naive datetime is
    taken to be UTC already), as ``datetime.isoformat`` writes it.  The text up to the
    seconds is reused from the previous call in the same second (``isoformat`` is slow:
    it formats through ``PyUnicode_FromFormat``)."""
    global _last_second
    zone = value.tzinfo
    if zone is not UTC:
        if zone is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        if value.year < 1000:  # isoformat pads the year, as the text here does
            return value.isoformat(sep, "microseconds")
    key = (value.year, value.month, value.day, value.hour, value.minute, value.second, sep)
    last_key, head = _last_second
    if key != last_key:
        head = value.replace(microsecond=0, tzinfo=None).isoformat(sep, "seconds")
        _last_second = (key, head)
    return f"{head}.{value.microsecond:06d}"


def parse_time(value: str | datetime | None, field: str) -> datetime | None:
    """Parse an ISO 8601 time (``Z`` or an offset; no offset means UTC).

    Raises ValueError naming ``field`` when the text is not a time.
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        return to_utc(value)
    if not isinstance(value, str):
        raise ValueError(f"{field}: expected an ISO 8601 time string, got {type(value).__name__}")
    text = value.strip()
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{field}: not an ISO 8601 time: {value!r}") from None
    return to_utc(parsed)


def check_choice(value: Any, allowed: Iterable[str], field: str) -> str:
    """Return ``value`` if it is one of ``allowed``, else raise ValueError naming ``field``."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{field}: {value!r} is not one of {', '.join(allowed)}")
    return str(value)


@overload
def check_text(value: Any, field: str, *, optional: Literal[False] = False) -> str: ...
@overload
def check_text(value: Any, field: str, *, optional: bool) -> str | None: ...
def check_text(value: Any, field: str, *, optional: bool = False) -> str | None:
    """A non-empty string (or None when ``optional``), else ValueError naming ``field``."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field}: expected a non-empty string, got {value!r}")
    return value


def row_dict(row: Any, time_keys: Iterable[str] = ()) -> dict[str, Any]:
    """A SQLAlchemy row as a plain dict, the ``time_keys`` rendered with :func:`iso`."""
    out = dict(row._mapping) if not isinstance(row, Mapping) else dict(row)
    for key in time_keys:
        if key in out:
            out[key] = iso(out[key])
    return out


@overload
def clean_text(value: str) -> str: ...
@overload
def clean_text(value: None) -> None: ...
@overload
def clean_text(value: str | None) -> str | None: ...
def clean_text(value: str | None) -> str | None:
    """``value`` as it may be stored: every secret the daemon holds redacted
    (see :mod:`ongridd.secretset`; every free-text column goes through
    here), and NUL characters and unpaired surrogates (which UTF-8, so
    neither backend, can carry: :mod:`ongridd.unicodetext`) replaced by
    U+FFFD (PostgreSQL text cannot hold NUL; done on every backend so both
    store the same text).  None stays None."""
    if value is None:
        return value
    value = valid_text(redact(value))
    if "\x00" not in value:
        return value
    return value.replace("\x00", "\ufffd")
