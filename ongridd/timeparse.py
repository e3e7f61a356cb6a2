"""The one time grammar of every signal tool: values as a model writes them, turned into unix seconds.

Accepted time values (``parse_time``):

- a number, or a numeric string: unix seconds (``1714557600``, ``"1714557600.5"``);
  a negative number counts back from now (``-3600`` is an hour ago);
- RFC 3339 / ISO 8601 text: ``"2024-05-01T10:00:00Z"``, ``"2024-05-01T12:00:00+02:00"``,
  ``"2024-05-01 10:00:00"`` (no offset means UTC), fractions of any length;
- ``"now"``, and relative values: ``"-1h"``, ``"now-90m"``, ``"-1h30m"``, ``"now"``
  (durations use Prometheus units ``ms s m h d w y``).

Durations (``parse_duration``): a positive number of seconds, or text such as
``"15s"``, ``"1m30s"``, ``"2h"``.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from ongridd.errors import ToolError
from ongridd.unicodetext import ascii_digits

_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_FRACTION_RE = re.compile(r"(\.\d+)")
_NUMBER_RE = re.compile(r"^[+-]?\d+(?:\.\d+)?\Z")


def parse_duration(value: object, *, field: str) -> float:
    """A duration in seconds (> 0) from a number or text like ``"1h30m"``.

    Raises ToolError naming ``field`` when the value is not a positive duration.
    """
    if isinstance(value, bool):
        raise ToolError(f"{field}: expected a duration such as '30s' or '5m', got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        if _NUMBER_RE.match(text):
            seconds = float(text)
        else:
            seconds = _parse_unit_duration(text, field=field)
    else:
        raise ToolError(f"{field}: expected a duration such as '30s' or '5m', got {type(value).__name__}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ToolError(f"{field}: the duration must be positive, got {value!r}")
    return seconds


def _parse_unit_duration(text: str, *, field: str) -> float:
    pos = 0
    total = 0.0
    for match in _DURATION_RE.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ToolError(
            f"{field}: cannot read {text!r} as a duration; use e.g. '30s', '5m', '1h30m' or a number of seconds"
        )
    return total


#: the times a date can be written for (0001-01-01T00:00:00Z … 9999-12-31T23:59:59Z), unix seconds
EARLIEST_S, LATEST_S = -62135596800.0, 253402300799.0


def parse_time(value: object, *, now: float, field: str) -> float:
    """A point in time as unix seconds, between :data:`EARLIEST_S` and :data:`LATEST_S`.

    ``now``: the reference for ``"now"`` and relative values (unix seconds).
    Raises ToolError naming ``field`` and the accepted forms, or the range a time must lie in
    (a far-off one cannot be written as a date, and was a crash where it was written back).
    """
    seconds = _parse_time(value, now=now, field=field)
    if not EARLIEST_S <= seconds <= LATEST_S:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "…"
        raise ToolError(f"{field}: {shown} is outside the times that can be written as a date (years 1 to 9999)")
    return seconds


def _parse_time(value: object, *, now: float, field: str) -> float:
    if isinstance(value, bool):
        raise ToolError(f"{field}: expected a time, got {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ToolError(f"{field}: expected a finite unix time, got {value!r}")
        return now + float(value) if value < 0 else float(value)
    if not isinstance(value, str):
        raise ToolError(f"{field}: expected a time (RFC 3339, unix seconds or '-1h'), got {type(value).__name__}")
    text = value.strip()
    low = text.lower()
    if not low:
        raise ToolError(f"{field}: empty time value")
    if low == "now":
        return now
    if _NUMBER_RE.match(low):
        number = float(low)
        return now + number if number < 0 else number
    relative = low[3:].strip() if low.startswith("now") else low
    if relative[:1] in "+-" and ascii_digits(relative[1:2]):
        sign = -1.0 if relative[0] == "-" else 1.0
        return now + sign * _parse_unit_duration(relative[1:].strip(), field=field)
    return _parse_iso(text, field=field)


def _parse_iso(text: str, *, field: str) -> float:
    iso = text.strip()
    if iso[-1:] in "zZ":
        iso = iso[:-1] + "+00:00"
    # Python 3.11 reads at most 6 fraction digits; Go and Prometheus write 9.
    iso = _FRACTION_RE.sub(lambda m: m.group(1)[:7], iso, count=1)
    try:
        parsed = datetime.fromisoformat(iso)
    except ValueError:
        raise ToolError(
            f"{field}: cannot read {text!r} as a time; use RFC 3339 ('2024-05-01T10:00:00Z'), "
            "unix seconds, 'now' or a relative value such as '-1h' or 'now-1h'"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def iso_utc(ts: float) -> str:
    """Unix seconds → ``2024-05-01T10:00:00Z`` (milliseconds shown only when non-zero)."""
    dt = datetime.fromtimestamp(ts, tz=UTC)
    if dt.microsecond:
        return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def format_duration(seconds: float) -> str:
    """Seconds → the shortest Prometheus duration text (``90`` → ``1m30s``)."""
    remaining = int(round(seconds * 1000))
    if remaining <= 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
