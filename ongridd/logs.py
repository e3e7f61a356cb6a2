"""Structured logging: one JSON line per event on stderr (journald keeps it).

Use ``log = get_logger(__name__)`` then ``log.info("worker_closed",
session_id=..., status=...)``.  Field values are rendered with ``str`` for
non-JSON types.  Never pass secrets (tokens, API keys, database passwords);
:func:`redact_url` strips a password from a URL before it is logged, and
every line is passed through :func:`ongridd.secretset.redact` before it is
written, so a secret the daemon holds never reaches the log even by mistake.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ongridd.secretset import redact

_CONFIGURED = False


class _JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        fields = getattr(record, "ongrid_fields", None)
        if fields:
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        # the last line of defence: no held secret (literal or JSON-escaped) leaves in a log line
        return redact(json.dumps(out, ensure_ascii=False, default=str))


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


def configure(level: str | int = "INFO", stream: Any = None) -> None:
    """Install the JSON line handler on the ``ongrid`` root loggers
    (idempotent), and a :class:`RedactingFilter` on the handlers of other
    libraries' records (the root logger's and ``logging.lastResort``)."""
    global _CONFIGURED
    for other in [*logging.getLogger().handlers, logging.lastResort]:
        if other is not None and _REDACTING_FILTER not in other.filters:
            other.addFilter(_REDACTING_FILTER)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_JSONFormatter())
    for name in ("ongridd", "ongrid", "ongrid_host", "ongrid_prometheus", "ongrid_incidents", "ongrid_knowledge",
                 "ongrid_topology", "ongrid_loki", "ongrid_tempo",
                 "ongrid_slack", "ongrid_telegram", "ongrid_feishu"):
        lg = logging.getLogger(name)
        lg.handlers[:] = [handler]
        lg.setLevel(level)
        lg.propagate = False
    _CONFIGURED = True


class StructuredLogger:
    """A thin wrapper: ``log.info(event, **fields)``."""

    def __init__(self, name: str):
        self._log = logging.getLogger(name)

    def _emit(self, level: int, event: str, fields: dict[str, Any], exc_info: Any = None) -> None:
        if self._log.isEnabledFor(level):
            self._log.log(level, event, extra={"ongrid_fields": fields}, exc_info=exc_info)

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
    """``postgresql://u:secret@h/db`` → ``postgresql://u:***@h/db``."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.password:
        netloc = parts.netloc.replace(":" + parts.password + "@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))
    return url
