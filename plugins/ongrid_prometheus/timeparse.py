"""The time grammar ``query_promql`` shares with every signal tool (see
:mod:`ongridd.timeparse` through the public plugin API): unix seconds,
RFC 3339, ``now``, relative ``now-1h`` / ``-15m``; durations ``30s``, ``1h30m``."""

from __future__ import annotations

from ongridd.plugins.api import format_duration, iso_utc, parse_duration, parse_time

__all__ = ["format_duration", "iso_utc", "parse_duration", "parse_time"]
