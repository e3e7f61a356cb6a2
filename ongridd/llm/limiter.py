"""One provider's shared rate-limit hold (docs/architecture.md §15, ``llm``).

When a provider answers 429 (or 503) with ``Retry-After``, every call to
that provider — of any turn, worker or reviewer — waits until the retry
time, not only the call that was told.  The hold lives in the provider
object, of which the daemon has one per configured endpoint.
"""

from __future__ import annotations

import email.utils
import math
from datetime import UTC, datetime

import trio

#: the longest a Retry-After is honoured (a provider asking for an hour is
#: asked again after this; the call's own retry budget still applies)
RETRY_AFTER_MAX_S = 60.0


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds
    (``"2"``, ``"1.5"``) or an HTTP-date (``"Wed, 21 Oct 2026 07:28:00
    GMT"``, counted from ``now``, default the system clock).  ``None`` for
    a missing or unreadable value; never negative; capped at
    RETRY_AFTER_MAX_S."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if math.isnan(seconds):
        return None
    return min(max(0.0, seconds), RETRY_AFTER_MAX_S)  # "1e400" (infinity): the longest wait, not none


class RateLimitHold:
    """A "not before" time shared by every call to one provider (Trio clock)."""

    def __init__(self) -> None:
        self._until = -math.inf

    def hold(self, delay_s: float) -> None:
        """No call starts before ``delay_s`` seconds from now (a later hold
        already in place stays)."""
        self._until = max(self._until, trio.current_time() + max(0.0, delay_s))

    def remaining_s(self) -> float:
        """Seconds until calls may start again (0 when not held)."""
        return max(0.0, self._until - trio.current_time())

    async def wait(self) -> float:
        """Sleep until the hold has passed (a hold extended meanwhile is
        waited for too); returns the seconds waited.  Cancellation: just
        stops waiting."""
        waited = 0.0
        while (left := self.remaining_s()) > 0:
            await trio.sleep(left)
            waited += left
        return waited


__all__ = ["RETRY_AFTER_MAX_S", "RateLimitHold", "parse_retry_after"]
