"""Structured logging, configured once per process (:func:`configure`): one
JSON line per event on stderr under systemd or when stderr is not a terminal
(journald keeps it), a readable console line on a terminal; third-party and
plugin ``logging`` records go through the same formatter.

Use ``log = get_logger(__name__)`` then ``log.info("worker_closed",
session_id=..., status=...)``.  Field values are rendered with ``str`` for
non-JSON types.  Never pass secrets (tokens, API keys, database passwords);
:func:`redact_url` strips a password from a URL before it is logged, and
every line is passed through :func:`ongridd.secretset.redact` before it is
written, so a secret the daemon holds never reaches the log even by mistake.

Ongrid's own lines (a :class:`StructuredLogger` call without an exception)
skip ``logging``'s ``LogRecord`` when the JSON handler of :func:`configure`
is the only place they go: :func:`json_line` runs the same processors and
the line is written under the handler's lock, byte for byte the line
``logging`` would write, at about a third of the cost.  With any other
handler, filter or ``propagate = False`` on the way (a test capturing
records, a plugin's own handler) every line goes through ``logging``.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
import weakref
from typing import Any
from urllib.parse import urlsplit, urlunsplit


def _import_structlog() -> Any:
    """``import structlog`` without its optional ``rich`` integration.

    structlog imports ``rich`` when it is installed (for its rich exception
    renderer; ``ongrid`` installs rich for its terminal UI), which is most of
    the cost of importing structlog and on every daemon's start-up path.  The
    renderers here never use it (exceptions go through
    ``structlog.dev.plain_traceback``: no locals, they may hold secrets), so
    while structlog is imported ``rich`` is made to look absent, which
    structlog supports; if rich is already imported nothing is hidden, and it
    imports normally afterwards either way."""
    if "structlog" in sys.modules or "rich" in sys.modules:
        import structlog as module
        return module
    sys.modules["rich"] = None  # type: ignore[assignment]  # "import rich" raises ImportError
    try:
        import structlog as module
    finally:
        del sys.modules["rich"]
    return module


structlog = _import_structlog()

from ongridd.secretset import is_password_param, redact, url_query_passwords  # noqa: E402  (after structlog, above)

_CONFIGURED = False


_QUIET_LIBRARIES = ("httpx", "httpx2", "httpcore", "httpcore2", "hypercorn.access", "alembic", "openai",
                    "markdown_it")  # (markdown_it: a debug line per parser rule of every answer rendered)


def _ongrid_fields(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """Lift the fields of a :class:`StructuredLogger` call into the line."""
    fields = event_dict.pop("ongrid_fields", None)  # put there by ExtraAdder
    if fields:  # a call's own field wins over a bound context variable of the same name
        event_dict.update(fields)
    return event_dict


def _exc(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    if "exception" in event_dict:
        event_dict["exc"] = event_dict.pop("exception")
    return event_dict


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _one_line_event(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    # console lines: a message (a plugin's or library's, with user text in it) cannot
    # start a forged line or send a terminal escape; field values are already repr'd
    event = event_dict.get("event")
    if isinstance(event, str) and _CONTROL.search(event):
        event_dict["event"] = _CONTROL.sub(lambda m: repr(m.group())[1:-1], event)
    return event_dict


def _redacted(_logger: Any, _method: str, line: Any) -> Any:
    # the last line of defence: no held secret (literal or JSON-escaped) leaves in a log line
    return redact(line) if isinstance(line, str) else line


def wants_json(stream: Any) -> bool:
    """JSON lines under systemd (``JOURNAL_STREAM``/``INVOCATION_ID`` set) or
    when ``stream`` is not a terminal; the console format on a terminal."""
    if os.environ.get("JOURNAL_STREAM") or os.environ.get("INVOCATION_ID"):
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        return not (isatty and isatty())
    except ValueError:  # a closed stream
        return True


_TIMESTAMP = structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts")
_JSON = structlog.processors.JSONRenderer(ensure_ascii=False, default=str)
#: characters JSON may carry raw that some readers take for a line break (U+0085, U+2028, U+2029:
#: Python's ``str.splitlines``, JavaScript before ES2019), a terminal reads as a control (C1:
#: U+009B opens an escape sequence) or nobody sees (the format characters: bidi embeddings,
#: overrides, isolates and marks, zero-width spaces and joiners, the byte-order mark, tags):
#: written escaped (``\u2028``), so a line stays one line, prints as it is, and two lines
#: that differ look different.  The set is Unicode 14's categories Cc, Cf, Zl and Zp beyond ASCII
_JSON_UNSAFE = re.compile(
    "[\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")


def _escaped(line: str) -> str:
    """A JSON line with :data:`_JSON_UNSAFE` characters escaped (they can only stand in its
    strings, where ``\\uXXXX`` means the same character)."""
    if _JSON_UNSAFE.search(line) is None:
        return line
    return _JSON_UNSAFE.sub(_json_escape, line)


def _json_escape(match: re.Match[str]) -> str:
    """One character as JSON writes it escaped (beyond the BMP: its UTF-16 surrogate pair)."""
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xd800 + (code >> 10):04x}\\u{0xdc00 + (code & 0x3ff):04x}"


def _escape_unsafe(_logger: Any, _method: str, line: Any) -> Any:
    return _escaped(line) if isinstance(line, str) else line


def formatter(json_lines: bool) -> logging.Formatter:
    """The one formatter for every record, Ongrid's and any library's or
    plugin's: ``ts`` (UTC ISO 8601), ``level``, ``logger``, ``event`` (the
    message), the call's fields, the context variables bound with
    :func:`bound_context`, the stdlib ``extra`` keys, and ``exc``; rendered as
    one JSON object per line or as a readable console line, then redacted."""
    pre_chain: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        _TIMESTAMP,
        structlog.stdlib.ExtraAdder(),
        _ongrid_fields,
    ]
    render: Any = (_JSON if json_lines
                   else structlog.dev.ConsoleRenderer(colors=False,  # no locals: they may hold secrets
                                                      exception_formatter=structlog.dev.plain_traceback))
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=pre_chain,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *([structlog.processors.format_exc_info, _exc] if json_lines else [_one_line_event]),
            render,
            _redacted,
            *([_escape_unsafe] if json_lines else []),
        ],
    )


#: keys the formatter's processors act on (an exception to format, ``exc``, the record's own):
#: a line with one of them goes through ``logging``
_PROCESSED_KEYS = frozenset({"exc_info", "exception", "_record", "_from_structlog", "ongrid_fields"})


def json_line(logger_name: str, level: int, event: str, fields: dict[str, Any]) -> str | None:
    """The line :func:`formatter` (``json_lines=True``) writes for ``log.<level>(event,
    **fields)`` on the logger ``logger_name`` without an exception, made without a
    ``LogRecord``: the same processors, keys in the same order (``event``, the bound
    context variables, ``level``, ``logger``, ``ts``, the call's fields), redacted.  None
    when only the formatter makes that line: an event that is not a string, or a field or
    bound variable that one of its processors acts on (``exc_info``, ``exception``, …)."""
    if type(event) is not str:
        return None
    event_dict: dict[str, Any] = {"event": event}
    structlog.contextvars.merge_contextvars(None, "", event_dict)
    event_dict["level"] = logging.getLevelName(level).lower()
    event_dict["logger"] = logger_name
    _TIMESTAMP(None, "", event_dict)
    if fields:  # a call's own field wins over a bound context variable of the same name
        event_dict.update(fields)
    if not _PROCESSED_KEYS.isdisjoint(event_dict):
        return None
    return _escaped(redact(_JSON(None, "", event_dict)))


class _OngridHandler(logging.StreamHandler):
    """The root logger's stderr handler (:func:`configure`).  ``json_lines``: its
    formatter writes JSON lines, so :class:`StructuredLogger` may write its own
    lines through :meth:`write_line` (:func:`json_line`) instead of a ``LogRecord``."""

    _ongrid = True  # the mark code outside this module looks for (configure() tests the class)

    def __init__(self, stream: Any, json_lines: bool):
        super().__init__(stream)
        self.json_lines = json_lines
        self.setFormatter(formatter(json_lines))

    def write_line(self, line: str, logger_name: str, level: int) -> None:
        """Write one formatted line as :meth:`emit` would write a record's (a write that
        fails is handled as there: :meth:`handleError`)."""
        with self.lock:  # type: ignore[union-attr]  # set by createLock
            try:
                self.stream.write(line + self.terminator)
                self.flush()
            except Exception:  # noqa: BLE001 - as logging.StreamHandler.emit
                self.handleError(logging.makeLogRecord({"name": logger_name, "levelno": level, "msg": line}))


#: the handler :func:`configure` installed on the root logger (None before, or when replaced)
_HANDLER: _OngridHandler | None = None


def _direct_handler(log: logging.Logger, level: int) -> _OngridHandler | None:
    """The handler to write ``log``'s line of ``level`` to directly: the JSON handler of
    :func:`configure` when it is the only one the line would reach and nothing filters it
    on the way (no filter, handler or ``propagate = False`` on ``log`` or its parents, no
    filter on the handler); None otherwise (the line then goes through ``logging``, as a
    test's capturing handler or a plugin's own handler needs)."""
    handler = _HANDLER
    if handler is None or not handler.json_lines or handler.filters or level < handler.level:
        return None
    current: logging.Logger | None = log
    while current is not None:
        if current.filters or current.disabled:
            return None
        if current.parent is None:  # the root
            return handler if current.handlers == [handler] else None
        if current.handlers or not current.propagate:
            return None
        current = current.parent
    return None


class RedactingFilter(logging.Filter):
    """Redacts held secrets from a record of a handler we do not format
    (the root logger's handlers, ``logging.lastResort``): the message is
    rendered, redacted and frozen; exception text is redacted when cached."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string must not lose the record
            message = str(record.msg)
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


_REDACTING_FILTER = RedactingFilter()


class Throttle:
    """At most one line per ``every_s`` seconds (monotonic clock) of one kind
    that a sender may make the daemon write at will: a refused webhook, a
    refused websocket handshake.  A flood of forged requests then writes one
    line a second, not one per request (journald's own rate limit would
    otherwise drop the daemon's other lines with them).  Typical use::

        REFUSALS = Throttle(1.0, "slack_request_refused")
        if (fields := REFUSALS.fields(reason="bad signature")) is not None:
            log.warning("slack_request_refused", **fields)

    ``name`` is the event the lines are logged as: the lines still held back when the daemon
    stops are told then, by that name (:func:`take_held_back`), not lost with the last window.
    A ``key`` given to :meth:`fields` (a reason from a fixed set, never text a sender chose)
    throttles the lines of each key apart, so a flood of one kind of refusal cannot hide
    another (a stream of requests without a token, guesses of a token); past ``max_keys``
    keys, further ones share the lines without a key.

    Not thread-safe (one event loop); :meth:`reset` forgets the last line."""

    def __init__(self, every_s: float = 1.0, name: str | None = None, *, max_keys: int = 16) -> None:
        self.every_s = every_s
        self.name = name
        self.max_keys = max_keys
        self._windows: dict[Any, list[Any]] = {}  # key -> [time of the last line written, lines held since]
        _THROTTLES.add(self)

    def fields(self, key: Any = None, **fields: Any) -> dict[str, Any] | None:
        """``fields`` when this line is to be written — with ``not_logged``, the number of
        lines of this kind (and ``key``) held back since the last one written, when there
        were any — or None when it is to be dropped (and counted)."""
        now = time.monotonic()
        window = self._windows.get(key)
        if window is None:
            if key is not None and len(self._windows) >= self.max_keys:
                return self.fields(None, **fields)
            window = self._windows[key] = [None, 0]
        if window[0] is not None and now - window[0] < self.every_s:
            window[1] += 1
            return None
        window[0] = now
        if window[1]:
            fields["not_logged"], window[1] = window[1], 0
        return fields

    def reset(self) -> None:
        """Forget the last line written: the next one is written at once."""
        self._windows.clear()

    def take_held(self) -> dict[Any, int]:
        """The lines held back since the last one written, per key (not yet told by a
        ``not_logged``; only keys with some), now counted as told."""
        held = {}
        for key, window in self._windows.items():
            if window[1]:
                held[key], window[1] = window[1], 0
        return held


#: every Throttle made (weakly: a throttle no longer used is forgotten)
_THROTTLES: weakref.WeakSet[Throttle] = weakref.WeakSet()


def take_held_back() -> dict[str, int]:
    """The lines every :class:`Throttle` holds back and has not told yet, by name and key
    (``"request_unauthorized"``, ``"request_unauthorized: invalid token"``; several of one
    name added up; an unnamed one as ``"(unnamed)"``), only those above 0; each is then
    counted as told.  The daemon logs them as it stops (``lines_not_logged``)."""
    held: dict[str, int] = {}
    for throttle in list(_THROTTLES):
        for key, n in throttle.take_held().items():
            name = (throttle.name or "(unnamed)") + ("" if key is None else f": {key}")
            held[name] = held.get(name, 0) + n
    return held


class AtMostEvery(logging.Filter):
    """Lets a logger's records through at most once per ``every_s`` seconds
    (a :class:`Throttle`); the first after a quiet spell says how many were held
    back (``… (N more like it since, not logged)``).  For a library that logs
    the same trouble in a tight loop: trio's listener logs an ERROR with a
    traceback every 0.1 s while ``accept`` fails for want of file descriptors
    (EMFILE), which filled the journal while it lasted."""

    def __init__(self, every_s: float, name: str | None = None) -> None:
        super().__init__()
        self.throttle = Throttle(every_s, name)

    def filter(self, record: logging.LogRecord) -> bool:
        fields = self.throttle.fields()
        if fields is None:
            return False
        if fields.get("not_logged"):
            try:
                message = record.getMessage()
            except Exception:  # noqa: BLE001 - a bad format string must not lose the record
                message = str(record.msg)
            record.msg, record.args = f"{message} ({fields['not_logged']} more like it since, not logged)", None
        return True


#: library loggers that repeat one line in a tight loop while a condition lasts: (name, seconds)
_THROTTLED_LIBRARIES = (("trio.serve_listeners", 5.0),)


def configure(level: str | int = "INFO", stream: Any = None, *, json_lines: bool | None = None) -> None:
    """Configure logging once for the whole process: the root logger gets
    one stderr handler with :func:`formatter`, so a plugin's or library's
    ``logging.getLogger(name).info(...)`` line looks like Ongrid's own.
    ``json_lines``: None → :func:`wants_json`.  Chatty HTTP/migration
    libraries are held at WARNING; a library that repeats a line in a tight
    loop (trio's listener on EMFILE) at one line per few seconds
    (:class:`AtMostEvery`).  Idempotent (a second call replaces the
    handler); any other handler on the root logger, and
    ``logging.lastResort``, gets a :class:`RedactingFilter`."""
    global _CONFIGURED, _HANDLER
    stream = stream or sys.stderr
    root = logging.getLogger()
    for other in [*root.handlers, logging.lastResort]:
        if isinstance(other, _OngridHandler):
            root.removeHandler(other)
        elif other is not None and _REDACTING_FILTER not in other.filters:
            other.addFilter(_REDACTING_FILTER)
    handler = _OngridHandler(stream, wants_json(stream) if json_lines is None else json_lines)
    root.addHandler(handler)
    _HANDLER = handler
    root.setLevel(level)
    for name in ("ongridd", "ongrid"):  # propagate to the root handler (undo an older setup)
        lg = logging.getLogger(name)
        lg.handlers[:] = []
        lg.propagate = True
        lg.setLevel(logging.NOTSET)
    for name in _QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    for name, every_s in _THROTTLED_LIBRARIES:
        lg = logging.getLogger(name)
        if not any(isinstance(f, AtMostEvery) for f in lg.filters):
            lg.addFilter(AtMostEvery(every_s, name))
    _CONFIGURED = True


def bound_context(**fields: Any) -> Any:
    """A context manager binding ``fields`` (e.g. ``session_id``, ``agent``,
    ``user``) to every line logged inside it, in this task and the tasks it
    starts (context variables; Trio copies them into child tasks)."""
    return structlog.contextvars.bound_contextvars(**fields)


class StructuredLogger:
    """A thin wrapper: ``log.info(event, **fields)``."""

    def __init__(self, name: str):
        self._log = logging.getLogger(name)

    def _emit(self, level: int, event: str, fields: dict[str, Any], exc_info: Any = None) -> None:
        log = self._log
        if not log.isEnabledFor(level):
            return
        handler = None if exc_info else _direct_handler(log, level)
        if handler is not None:  # the same line as through logging, at a third of the cost
            try:
                line = json_line(log.name, level, event, fields)
            except Exception:  # noqa: BLE001 - a value that cannot be written: logging reports it
                line = None
            if line is not None:
                handler.write_line(line, log.name, level)
                return
        log.log(level, event, extra={"ongrid_fields": fields}, exc_info=exc_info)

    def debug(self, event: str, **fields: Any) -> None:
        self._emit(logging.DEBUG, event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit(logging.INFO, event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit(logging.WARNING, event, fields)

    def error(self, event: str, exc_info: Any = None, **fields: Any) -> None:
        self._emit(logging.ERROR, event, fields, exc_info=exc_info)

    def exception(self, event: str, **fields: Any) -> None:
        self._emit(logging.ERROR, event, fields, exc_info=True)


def get_logger(name: str) -> StructuredLogger:
    return StructuredLogger(name)


def redact_url(url: str | None) -> str | None:
    """``postgresql://u:secret@h/db?sslpassword=x`` → ``postgresql://u:***@h/db?sslpassword=***``
    (the user part's password and every ``password`` / ``sslpassword`` query parameter)."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<unparseable url>"
    query_passwords = url_query_passwords(parts.query)
    if not password and not query_passwords:
        return url  # as written: urlunsplit would turn sqlite:////tmp/x.db into sqlite://tmp/x.db
    if password:
        parts = parts._replace(netloc=parts.netloc.replace(":" + password + "@", ":***@", 1))
    if query_passwords:
        query = "&".join(f"{k}=***" if sep and is_password_param(k, v) else f"{k}{sep}{v}"
                         for k, sep, v in (item.partition("=") for item in parts.query.split("&")))
        parts = parts._replace(query=query)
    if not parts.netloc and url.startswith(f"{parts.scheme}://"):  # keep an empty authority's //
        return (f"{parts.scheme}://{parts.path}" + (f"?{parts.query}" if parts.query else "")
                + (f"#{parts.fragment}" if parts.fragment else ""))
    return urlunsplit(parts)
