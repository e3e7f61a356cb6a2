"""``POST /api/changes``: record a change made outside Ongrid (a deploy, a
config push, a feature flag) as a change event; ``GET /api/changes``: list
the change events, Ongrid's own and those recorded from outside.

Body (JSON object, at most :data:`MAX_BODY_BYTES`)::

    {"kind": "deploy", "subject": "checkout", "actor": "ci",
     "detail": {"version": "1.4.2"},          # optional object
     "at": "2026-03-02T10:00:00Z"}            # optional: RFC 3339, unix seconds or now-5m; default now

``kind`` is one of :data:`EXTERNAL_KINDS` (Ongrid's own kinds — persona,
plugin, incident — cannot be written from outside).  Answers: 201 with the
stored row (``recorded_by`` = the authenticated caller); 400
``{"error": {"code": "bad_request", "message", "field"}}`` naming the first
bad field; 413 over the size limit; 503 when no database is open or it
fails.  Runs on the daemon's token auth like every API route.
"""

from __future__ import annotations

import json
import time
import unicodedata
from collections.abc import Awaitable, Callable
from typing import Any

from ongridd.plugins.api import StoreError, ToolError
from ongridd.plugins.api import get_logger
from ongridd.plugins.api import PluginRequest, PluginResponse, PluginStore, iso_utc, parse_time

ROUTE_PATH = "/api/changes"
MAX_BODY_BYTES = 64 * 1024
MAX_TEXT_CHARS = 200
#: a recorded time may lie at most this far in the future (clock skew; seconds)
MAX_FUTURE_S = 300
EXTERNAL_KINDS = ("deploy", "rollback", "config", "flag", "migration", "scale", "restart", "maintenance",
                  "infra", "other")
#: the kinds Ongrid records itself (an approved tool change, a persona or plugin change, an incident's
#: state): listed, never posted
OWN_KINDS = ("tool", "persona", "plugin", "incident")
_KEYS = ("kind", "subject", "actor", "detail", "at")
log = get_logger(__name__)


class BadField(Exception):
    """A body field that cannot be stored: ``field`` and the message."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value.strip():
        raise BadField(key, f"{key}: expected a non-empty string")
    value = value.strip()
    if len(value) > MAX_TEXT_CHARS:
        raise BadField(key, f"{key}: at most {MAX_TEXT_CHARS} characters, got {len(value)}")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in value):
        raise BadField(key, f"{key}: control or format characters are not allowed")
    return value


def validate_change(body: Any, *, now: float) -> dict[str, Any]:
    """The store arguments for ``body``; BadField for the first problem."""
    if not isinstance(body, dict):
        raise BadField("body", "body: expected a JSON object {kind, subject, actor, detail?, at?}")
    unknown = sorted(set(body) - set(_KEYS))
    if unknown:
        raise BadField(unknown[0], f"{unknown[0]}: unknown field (known: {', '.join(_KEYS)})")
    kind = _text(body, "kind")
    if kind not in EXTERNAL_KINDS:
        raise BadField("kind", f"kind: expected one of {', '.join(EXTERNAL_KINDS)}, got {kind[:64]!r}")
    out: dict[str, Any] = {"kind": kind, "subject": _text(body, "subject"), "actor": _text(body, "actor")}
    detail = body.get("detail")
    if detail is None:
        detail = {}
    if not isinstance(detail, dict):
        raise BadField("detail", "detail: expected a JSON object")
    out["detail"] = detail
    at = body.get("at")
    if at is None:
        out["occurred_at"] = None
    else:
        try:
            when = parse_time(at, now=now, field="at")
        except ToolError as exc:
            raise BadField("at", str(exc)) from None
        if when > now + MAX_FUTURE_S:
            raise BadField("at", f"at: {iso_utc(when)} is in the future")
        if when < 0:
            raise BadField("at", "at: before 1970")
        out["occurred_at"] = iso_utc(when)
    return out


def _bad(field: str, message: str, status: int = 400, code: str = "bad_request") -> PluginResponse:
    return PluginResponse.error(status, code, message, field=field)


def make_changes_handler(store: PluginStore | None,
                         clock: Callable[[], float] = time.time) -> Callable[[PluginRequest], Awaitable[PluginResponse]]:
    """The route handler; never raises for a bad body or a database failure."""

    async def handler(request: PluginRequest) -> PluginResponse:
        if len(request.body) > MAX_BODY_BYTES:
            return PluginResponse.error(413, "too_large", f"body over {MAX_BODY_BYTES:,} bytes")
        if store is None:
            return PluginResponse.error(503, "unavailable", "no change store: the daemon has no database open")
        body = request.json
        if body is None and request.body:
            try:
                body = json.loads(request.body)
            except (ValueError, RecursionError, UnicodeDecodeError):
                return _bad("body", "body: not valid JSON")
        try:
            values = validate_change(body, now=clock())
        except BadField as exc:
            return _bad(exc.field, str(exc))
        try:
            row = await store.record_change_event(**values, recorded_by=request.user or "local")
        except ValueError as exc:  # the store's own checks (e.g. detail not JSON-serialisable)
            return _bad(str(exc).split(":", 1)[0], str(exc))
        except StoreError as exc:
            log.warning("change_record_failed", error=str(exc))
            return PluginResponse.error(503, "unavailable", str(exc))
        log.info("change_recorded", id=row.get("id"), kind=row.get("kind"), subject=row.get("subject"),
                 recorded_by=row.get("recorded_by"))
        return PluginResponse(status=201, body=row)

    return handler


#: the most change events one ``GET /api/changes`` returns
MAX_LIST = 1000
_LIST_KEYS = ("kind", "subject", "since", "until", "limit")


def make_changes_list_handler(store: PluginStore | None,
                              clock: Callable[[], float] = time.time) -> Callable[[PluginRequest], Awaitable[PluginResponse]]:
    """``GET /api/changes?kind=&subject=&since=&until=&limit=``: ``{"changes": [row, …]}``, newest
    first by when each happened; ``since`` (inclusive) and ``until`` (exclusive) are RFC 3339, unix
    seconds or ``now-2h``, to the millisecond; ``limit`` 1..1000 (default 50).  A parameter given
    twice counts once (its first value).  400 naming a bad parameter, 503 without a database.
    Never raises."""

    async def handler(request: PluginRequest) -> PluginResponse:
        if store is None:
            return PluginResponse.error(503, "unavailable", "no change store: the daemon has no database open")
        query = dict(request.query)
        unknown = sorted(set(query) - set(_LIST_KEYS))
        if unknown:
            return _bad(unknown[0], f"{unknown[0]}: unknown parameter (known: {', '.join(_LIST_KEYS)})")
        args: dict[str, Any] = {}
        for key in ("kind", "subject"):
            if query.get(key):
                if len(query[key]) > MAX_TEXT_CHARS:
                    return _bad(key, f"{key}: at most {MAX_TEXT_CHARS} characters")
                args[key] = query[key]
        if "kind" in args and args["kind"] not in EXTERNAL_KINDS + OWN_KINDS:  # a typo would just find nothing
            return _bad("kind", f"kind: expected one of {', '.join(EXTERNAL_KINDS + OWN_KINDS)}, got {args['kind'][:64]!r}")
        now = clock()
        for key in ("since", "until"):
            if query.get(key):
                try:
                    args[key] = iso_utc(parse_time(query[key], now=now, field=key))
                except ToolError as exc:
                    return _bad(key, str(exc))
                except (ValueError, OverflowError, OSError):  # a time no calendar date stands for
                    return _bad(key, f"{key}: {query[key][:40]!r} is outside the times that can be stored")
        if "since" in args and "until" in args and args["since"] >= args["until"]:  # ISO UTC: ordered as text
            return _bad("until", f"until ({args['until']}) must be after since ({args['since']}): the range is empty")
        limit = query.get("limit") or "50"
        if not (limit.isascii() and limit.isdigit() and len(limit) <= 4) or not 1 <= int(limit) <= MAX_LIST:
            return _bad("limit", f"limit: a whole number from 1 to {MAX_LIST}, got {limit[:20]!r}")
        try:
            rows = await store.list_change_events(**args, limit=int(limit))
        except ValueError as exc:
            return _bad(str(exc).split(":", 1)[0], str(exc))
        except StoreError as exc:
            log.warning("change_list_failed", error=str(exc))
            return PluginResponse.error(503, "unavailable", str(exc))
        return PluginResponse(status=200, body={"changes": rows})

    return handler
