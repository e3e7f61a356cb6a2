"""Server-sent events (the ``text/event-stream`` format of streamed chat
completions), decoded incrementally from bytes.

:class:`SSEDecoder` follows the WHATWG event-stream rules that matter to a
model API: lines end in LF, CRLF or CR; ``data:`` lines of one event are
joined with newlines; an empty line ends the event; ``:`` lines are comments;
``event:`` names the event; ``id:`` and ``retry:`` are read and ignored;
an event without a ``data`` line is not dispatched.  Unlike a browser, the
end of the stream (:meth:`SSEDecoder.close`) dispatches an unterminated event.
"""

from __future__ import annotations

import attrs

#: the longest event (or unterminated line) accepted, in bytes
MAX_EVENT_BYTES = 16 * 1024 * 1024


class SSEError(ValueError):
    """The stream is not a valid event stream (an event over the size bound)."""


@attrs.frozen
class SSEEvent:
    """One event: ``event`` (``None`` when unnamed) and its ``data`` text."""

    data: str
    event: str | None = None


class SSEDecoder:
    """Feed bytes as they arrive; each call returns the events they completed.

    A CR ends its line at once (a LF right after it, in this chunk or the
    next, is the rest of a CRLF); a UTF-8 byte order mark opening the stream
    is dropped.  An unterminated line is kept in pieces, so a long line fed
    in many small chunks costs linear time.

    Raises :class:`SSEError` when an event or a line grows past
    ``max_event_bytes``."""

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self._parts: list[bytes] = []  # the unterminated line, in pieces
        self._partial = 0  # its length
        self._skip_lf = False  # the last byte fed was a CR
        self._first_line = True
        self._data: list[str] = []
        self._event: str | None = None
        self._size = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if not chunk:
            return []
        if b"\n" not in chunk and b"\r" not in chunk:
            self._skip_lf = False
            self._parts.append(chunk)
            self._partial += len(chunk)
            if self._partial > self.max_event_bytes:
                raise SSEError(f"an event-stream line longer than {self.max_event_bytes} bytes")
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]  # the LF of a CRLF split across two chunks
        if self._parts:
            self._parts.append(chunk)
            buffer = b"".join(self._parts)
        else:
            buffer = chunk
        if b"\r" in buffer:
            self._skip_lf = buffer.endswith(b"\r")
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if self._first_line:
            self._first_line = False
            if buffer.startswith(b"\xef\xbb\xbf"):  # a byte order mark opening the stream
                buffer = buffer[3:]
        lines = buffer.split(b"\n")
        rest = lines.pop()
        if len(rest) > self.max_event_bytes:
            raise SSEError(f"an event-stream line longer than {self.max_event_bytes} bytes")
        if rest:
            self._parts = [rest]
        elif self._parts:
            self._parts = []
        self._partial = len(rest)
        out: list[SSEEvent] = []
        for raw in lines:
            if not raw:
                if self._data:
                    out.append(SSEEvent("\n".join(self._data), self._event))
                self._data, self._event, self._size = [], None, 0
                continue
            line = raw.decode("utf-8", errors="replace")
            if line[0] == ":":
                continue
            field, sep, value = line.partition(":")
            if sep and value[:1] == " ":
                value = value[1:]
            if field == "data":
                self._size += len(raw)
                if self._size > self.max_event_bytes:
                    raise SSEError(f"an event-stream event larger than {self.max_event_bytes} bytes")
                self._data.append(value)
            elif field == "event":
                self._event = value or None  # an empty name is the default type, as no name
        return out

    def close(self) -> list[SSEEvent]:
        """The end of the stream: an event the server did not end with an
        empty line (or whose last line has no line end) still counts."""
        out = self.feed(b"\n") if self._parts else []  # ends the last line (never after a CR)
        if self._data:
            out.append(SSEEvent("\n".join(self._data), self._event))
        self._data, self._event, self._size = [], None, 0
        self._skip_lf = False
        return out


__all__ = ["MAX_EVENT_BYTES", "SSEDecoder", "SSEError", "SSEEvent"]
