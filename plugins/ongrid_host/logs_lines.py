"""Pieces of ``search_logs`` that look at bytes: splitting a stream into
bounded lines, matching a pattern, and reading a timestamp from a line.

- :class:`LineSplitter` turns chunks of a byte stream into lines of at most
  ``max_line`` bytes (the rest of a longer line is counted, not kept), so a
  file of any size — or one endless line — is read in constant memory.
- :class:`Matcher`: a literal (case-insensitive, the default) or a regular
  expression run by RE2 (google-re2: linear time, no backtracking, so no
  pattern can stall the daemon), on bytes.
- :func:`line_timestamp`: unix seconds from the start of a line in one of
  the common forms — RFC 3339 / ISO 8601 (``2024-05-01T10:00:00Z``,
  ``2024-05-01 10:00:00,123``), syslog (``May  1 10:00:00``, no year: the
  file's year, local time) and the nginx/Apache access-log form
  (``[10/Oct/2000:13:55:36 -0700]``) — or None.
"""

from __future__ import annotations

import calendar
import functools
import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import attrs
import re2

from ongridd.plugins.api import ToolError, bytes_hold_secret, redact

MAX_PATTERN_CHARS = 1000
#: RE2's memory budget for one compiled pattern (bytes)
RE2_MAX_MEM = 8 << 20
#: a timestamp is looked for in the first this many bytes of a line
_STAMP_WINDOW = 80

_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct",
                                        "nov", "dec"), start=1)}
# All three are anchored and without nested repetition: linear on the
# (bounded) window they look at.
_ISO = re.compile(rb"\[?(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?"
                  rb"\s?(Z|z|[+-]\d{2}:?\d{2})?")
_SYSLOG = re.compile(rb"([A-Z][a-z]{2}) ([ \d]\d) (\d{2}):(\d{2}):(\d{2})")
_NGINX = re.compile(rb"\[(\d{2})/([A-Z][a-z]{2})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})\]")


class LineSplitter:
    """Feed byte chunks; get ``(line_no, line_bytes, cut_bytes)`` for each
    complete line (1-based numbers; ``cut_bytes``: how much of a line over
    ``max_line`` bytes was dropped).  :meth:`finish` yields the last line
    when the stream does not end with a newline.  Memory: at most
    ``max_line`` bytes are held besides the chunk being split."""

    def __init__(self, max_line: int):
        self.max_line = max_line
        self.line_no = 0
        self._buf = bytearray()
        self._cut = 0

    def feed(self, chunk: bytes) -> Iterator[tuple[int, bytes, int]]:
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                self._keep(chunk, start, len(chunk))
                return
            if not self._buf and not self._cut and nl - start <= self.max_line:
                line = chunk[start:nl]
                cut = 0
            else:
                self._keep(chunk, start, nl)
                line, cut = bytes(self._buf), self._cut
                self._buf.clear()
                self._cut = 0
            self.line_no += 1
            yield self.line_no, line, cut
            start = nl + 1

    def skip(self, chunk: bytes) -> bytes:
        """Take ``chunk`` without splitting it (none of its lines is wanted):
        count its lines and keep the unfinished last one.  Returns the
        chunk's complete-lines part (for a caller that wants its last
        timestamp); the first of those lines may lack its start (held before)."""
        last_nl = chunk.rfind(b"\n")
        if last_nl < 0:
            self._keep(chunk, 0, len(chunk))
            return b""
        self.line_no += chunk.count(b"\n", 0, last_nl + 1)
        self._buf.clear()
        self._cut = 0
        self._keep(chunk, last_nl + 1, len(chunk))
        return chunk[:last_nl]

    @property
    def pending(self) -> bytes:
        """The start of the unfinished line held so far (at most ``max_line`` bytes)."""
        return bytes(self._buf)

    def _keep(self, chunk: bytes, start: int, end: int) -> None:
        room = self.max_line - len(self._buf)
        take = min(room, end - start)
        if take > 0:
            self._buf += chunk[start:start + take]
        self._cut += (end - start) - max(take, 0)

    def finish(self) -> Iterator[tuple[int, bytes, int]]:
        if self._buf or self._cut:
            self.line_no += 1
            line, cut = bytes(self._buf), self._cut
            self._buf.clear()
            self._cut = 0
            yield self.line_no, line, cut


@attrs.frozen
class Matcher:
    """``line(b)``: does this one line match.  ``block(b)``: could any line of
    this multi-line block match (False means certainly none does; it lets a
    reader skip the per-line work for most of a large file)."""

    line: Callable[[bytes], bool]
    block: Callable[[bytes], bool]


def make_matcher(pattern: str, *, regex: bool) -> Matcher:
    """A :class:`Matcher` for ``pattern``.

    Literal (``regex=False``): the UTF-8 bytes of ``pattern`` anywhere in the
    line, ignoring ASCII case.  Regex: RE2 syntax (no backreferences or
    look-around; ``(?i)`` for case-insensitive; ``^``/``$`` anchor at the
    line's ends), searched anywhere in the line.  Raises ToolError for an
    empty, too long or invalid pattern (RE2's message quoted).
    """
    if not pattern:
        raise ToolError("pattern: must not be empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError(f"pattern: at most {MAX_PATTERN_CHARS} characters, got {len(pattern)}")
    raw = pattern.encode("utf-8", "surrogatepass")
    if not regex:
        needle = raw.lower()
        if b"\n" in needle:
            raise ToolError("pattern: lines are matched one by one; a pattern cannot contain a newline")
        literal: Callable[[bytes], bool] = lambda data: needle in data.lower()  # noqa: E731
        return Matcher(line=_as_shown(literal), block=literal)
    line_re = _compile(raw)
    # In the block test ^ and $ must also match at inner line ends; \A and
    # \z would not, so such patterns are tried line by line only.
    block_re = None if (b"\\A" in raw or b"\\z" in raw) else _compile(b"(?m)" + raw)
    line_search = line_re.search
    line_test = _as_shown(lambda data: line_search(data) is not None)
    if block_re is None:
        return Matcher(line=line_test, block=lambda data: True)
    block_search = block_re.search
    return Matcher(line=line_test, block=lambda data: block_search(data) is not None)


def _as_shown(test: Callable[[bytes], bool]) -> Callable[[bytes], bool]:
    """``test``, but a line holding one of the daemon's secrets matches only when its redacted
    form (as the hit would be shown) does: whether ``bot1234[0-4]`` matches the raw line would
    answer a question about the secret, and a pattern narrowed call by call would rebuild it.
    Costs nothing for a line that does not match."""
    def matches(data: bytes) -> bool:
        if not test(data):
            return False
        if not bytes_hold_secret(data):
            return True
        return test(redact(data.decode("utf-8", "replace")).encode("utf-8", "surrogatepass"))

    return matches


def _compile(raw: bytes) -> Any:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = RE2_MAX_MEM
    try:
        return re2.compile(raw, options)
    except re2.error as exc:
        text = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ToolError(f"pattern: not a valid RE2 regular expression ({text}); RE2 has no backreferences "
                        "or look-around; or search literally with regex: false") from None


def last_timestamp(block: bytes, *, year: int | None = None, tries: int = 20) -> float | None:
    """The timestamp of the last of the final ``tries`` lines of ``block`` that has one, or None."""
    end = len(block)
    for _ in range(tries):
        if end <= 0:
            return None
        start = block.rfind(b"\n", 0, end) + 1
        ts = line_timestamp(block[start:end], year=year)
        if ts is not None:
            return ts
        end = start - 1
    return None


def line_timestamp(line: bytes, *, year: int | None = None) -> float | None:
    """Unix seconds of the timestamp at (or near) the start of ``line``, or None.

    ``year``: the year for syslog lines (they carry none); default this
    year.  Times without an offset are read as the local time of this
    process (ISO forms with no offset: UTC, as RFC 3339 readers do).
    """
    head = line[:_STAMP_WINDOW]
    m = _ISO.search(head)
    if m and m.start() <= 40:
        return _iso_seconds(m)
    m = _NGINX.search(head)
    if m and m.start() <= 40:
        d, mon, y, hh, mm, ss, sign, oh, om = m.groups()
        month = _MONTHS.get(mon.decode().lower())
        if month is None:
            return None
        try:
            base = calendar.timegm((int(y), month, int(d), int(hh), int(mm), int(ss), 0, 0, 0))
        except (ValueError, OverflowError):
            return None
        offset = (int(oh) * 3600 + int(om) * 60) * (-1 if sign == b"-" else 1)
        return float(base - offset)
    m = _SYSLOG.match(head)
    if m:
        month = _MONTHS.get(m.group(1).decode().lower())
        if month is None:
            return None
        try:
            return time.mktime((year or time.localtime().tm_year, month, int(m.group(2)), int(m.group(3)),
                                int(m.group(4)), int(m.group(5)), 0, 0, -1))
        except (ValueError, OverflowError):
            return None
    return None


@functools.lru_cache(maxsize=4096)
def _utc_seconds(y: bytes, mo: bytes, d: bytes, hh: bytes, mm: bytes, ss: bytes) -> float | None:
    """Seconds of a UTC date and time given as digits (cached: log lines repeat them)."""
    try:
        dt = datetime(int(y), int(mo), int(d), int(hh), int(mm), int(ss))
    except ValueError:
        return None
    return float(calendar.timegm(dt.timetuple()))


def _iso_seconds(m: re.Match[bytes]) -> float | None:
    y, mo, d, hh, mm, ss, frac, tz = m.groups()
    seconds = _utc_seconds(y, mo, d, hh, mm, ss)
    if seconds is None:
        return None
    if frac:
        seconds += int(frac) / 10 ** len(frac)
    if tz and tz not in (b"Z", b"z"):
        sign = -1 if tz[:1] == b"-" else 1
        digits = tz[1:].replace(b":", b"")
        seconds -= sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)
    return seconds
