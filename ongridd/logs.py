"""Structured logging: one JSON line per event on stderr (journald keeps it).

Use ``log = get_logger(__name__)`` then ``log.info("worker_closed",
session_id=..., status=...)``.  Field values are rendered with ``str`` for
non-JSON types.  Never pass secrets (tokens, API keys, database passwords);
:func:`redact_url` strips a password from a URL before it is logged.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

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
        return json.dumps(out, ensure_ascii=False, default=str)


def configure(level: str | int = "INFO", stream: Any = None) -> None:
    """Install the JSON line handler on the ``ongrid`` root loggers (idempotent)."""
    global _CONFIGURED
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_JSONFormatter())
    for name in ("ongridd", "ongrid", "ongrid_host", "ongrid_prometheus", "ongrid_incidents", "ongrid_knowledge"):
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
