"""The ``query_logql`` tool: LogQL against the Loki HTTP API, bounded.

Modes: ``range`` (default; ``/loki/api/v1/query_range`` from ``start``
(default ``end`` − 1 h) to ``end`` (default now)), ``instant``
(``/loki/api/v1/query`` at ``end``; metric queries) and ``labels``
(``/loki/api/v1/labels`` over the window; ``query`` not needed).

Result: ``{query, mode, start, end, result_type, streams: [{labels,
entries: [{ts, line}]}], stream_count, line_count, truncated, notes?}`` for
log queries (entries newest first with ``direction: backward``, the
default), ``series: [{metric, values|value}]`` for metric queries,
``labels: [...]`` for the labels mode.  Loki's own error text is passed
through for a rejected query (ToolError); timeouts raise ToolTimeout.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import attrs

from ongridd.plugins.api import ToolError
from ongridd.plugins.api import (
    REDACTED_NOTE,
    Tool,
    ToolCallContext,
    get_json,
    iso_utc,
    numeric_settings,
    parse_time,
    redact_credentials,
)

DEFAULT_WINDOW_S = 3600.0
_TIME = {"type": ["string", "number"]}


@attrs.frozen(kw_only=True)
class LokiSettings:
    """``plugins.settings.ongrid_loki``: ``timeout_s``, ``max_streams``,
    ``max_lines`` (total entries kept), ``max_line_chars``, ``max_points``
    (per metric series)."""

    timeout_s: float = 15.0
    max_streams: int = 30
    max_lines: int = 500
    max_line_chars: int = 1000
    max_points: int = 120

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None, *, where: str) -> LokiSettings:
        """Checked settings; ValueError naming the bad key."""
        return numeric_settings(cls, raw, where=where)


PARAMETERS: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 4000,
                  "description": "LogQL, e.g. '{app=\"checkout\"} |= \"error\"' or "
                                 "'sum by (app) (rate({env=\"prod\"} |= \"error\" [5m]))'"},
        "start": {**_TIME, "description": "window start: unix seconds, RFC 3339 or 'now-1h' (default end - 1h)"},
        "end": {**_TIME, "description": "window end (default now); the evaluation time in instant mode"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 1000,
                  "description": "most log lines returned (default 100)"},
        "direction": {"type": "string", "enum": ["backward", "forward"],
                      "description": "backward: newest first (default); forward: oldest first"},
        "mode": {"type": "string", "enum": ["range", "instant", "labels"],
                 "description": "range (default), instant (a metric query at one time) or labels (list the "
                                "label names Loki knows; no query needed)"},
    },
}

DESCRIPTION = ("Query logs in Loki with LogQL: log lines of the matching streams (newest first, with their "
               "labels) or metric queries over logs. mode 'labels' lists the label names to build a selector. "
               "Results are limited in streams and lines; Loki's error text is returned for a bad query.")


def _base(url: str | None) -> str:
    if not url:
        raise ToolError("no Loki server configured: set loki.url in the Ongrid config "
                        "(or the ONGRID_LOKI_URL environment variable)")
    return url.rstrip("/")


def _ns(ts: float) -> str:
    return str(int(ts * 1e9))


def _ts_iso(ns: Any) -> str | None:
    try:
        return iso_utc(int(ns) / 1e9)
    except (TypeError, ValueError):
        return None


def shape_streams(result: list, settings: LokiSettings, limit: int, notes: list[str]) -> dict[str, Any]:
    """Streams → bounded ``streams``, counts and ``truncated``; each line
    through the credential filter (``redacted`` when it hid something)."""
    streams: list[dict[str, Any]] = []
    redacted = False
    total_lines = sum(len(s.get("values") or []) for s in result if isinstance(s, dict))
    kept = 0
    budget = min(limit, settings.max_lines)
    cut_lines = 0
    for s in result:
        if not isinstance(s, dict):
            continue
        if len(streams) >= settings.max_streams or kept >= budget:
            break
        entries = []
        for pair in s.get("values") or []:
            if kept >= budget:
                break
            if not (isinstance(pair, list) and len(pair) >= 2 and isinstance(pair[1], str)):
                continue
            line = pair[1]
            if len(line) > settings.max_line_chars:
                line = line[:settings.max_line_chars] + f" …[{len(pair[1]) - settings.max_line_chars} chars cut]"
                cut_lines += 1
            shown = redact_credentials(line)
            redacted = redacted or shown != line
            entries.append({"ts": _ts_iso(pair[0]), "line": shown})
            kept += 1
        streams.append({"labels": s.get("stream") or {}, "entries": entries})
    truncated = kept < total_lines or len(streams) < len(result)
    if len(streams) < len(result):
        notes.append(f"showing {len(streams)} of {len(result)} streams")
    if cut_lines:
        notes.append(f"{cut_lines} long lines cut to {settings.max_line_chars} characters")
    out = {"streams": streams, "stream_count": len(result), "line_count": total_lines, "truncated": truncated}
    return {**out, "redacted": REDACTED_NOTE} if redacted else out


def shape_series(result_type: str, result: list, settings: LokiSettings, notes: list[str]) -> dict[str, Any]:
    """Matrix/vector → bounded ``series``."""
    series = []
    for s in result[:settings.max_streams]:
        if not isinstance(s, dict):
            continue
        item: dict[str, Any] = {"metric": s.get("metric") or {}}
        if result_type == "matrix":
            values = s.get("values") or []
            if len(values) > settings.max_points:
                notes.append(f"series cut to their last {settings.max_points} points")
                values = values[-settings.max_points:]
            item["values"] = [[iso_utc(float(v[0])), v[1]] for v in values if isinstance(v, list) and len(v) == 2]
        else:
            v = s.get("value")
            if isinstance(v, list) and len(v) == 2:
                item["value"] = [iso_utc(float(v[0])), v[1]]
        series.append(item)
    if len(result) > settings.max_streams:
        notes.append(f"showing {settings.max_streams} of {len(result)} series")
    return {"series": series, "series_count": len(result), "truncated": len(result) > len(series)}


def make_query_logql(url: str | None, http: Any, settings: LokiSettings) -> Tool:
    """Build ``query_logql`` for the Loki at ``url`` (None: every call says how to configure it)."""

    async def call(path: str, params: dict[str, Any]) -> Any:
        base = _base(url)
        answer = await get_json(http, f"{base}/loki/api/v1/{path}", params, timeout_s=settings.timeout_s,
                                what=f"Loki at {base}")
        if answer.status >= 400:
            raise ToolError(f"Loki rejected the request (HTTP {answer.status}): {answer.error_text()}")
        body = answer.json
        if not isinstance(body, dict) or "data" not in body:
            raise ToolError(f"Loki at {base} answered HTTP {answer.status} with a body that is not its API's JSON "
                            f"(is loki.url the server's base URL?): {answer.text[:200]!r}")
        if body.get("status") not in (None, "success"):
            raise ToolError(f"Loki reported an error: {answer.error_text()}")
        return body["data"]

    async def handler(args: dict[str, Any], ctx: ToolCallContext | None = None) -> dict[str, Any]:
        args = {k: v for k, v in (args or {}).items() if v is not None}
        mode = args.get("mode", "range")
        now = time.time()
        end = parse_time(args["end"], now=now, field="end") if "end" in args else now
        start = parse_time(args["start"], now=now, field="start") if "start" in args else end - DEFAULT_WINDOW_S
        if start >= end:
            raise ToolError(f"start ({iso_utc(start)}) must be before end ({iso_utc(end)})")
        notes: list[str] = []
        if mode == "labels":
            data = await call("labels", {"start": _ns(start), "end": _ns(end)})
            labels = [x for x in data if isinstance(x, str)] if isinstance(data, list) else []
            return {"mode": "labels", "start": iso_utc(start), "end": iso_utc(end), "labels": labels[:500],
                    "truncated": len(labels) > 500}
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query: give a LogQL query, e.g. '{app=\"checkout\"} |= \"error\"' "
                            "(mode 'labels' lists the label names)")
        limit = int(args.get("limit", 100))
        direction = args.get("direction", "backward")
        if mode == "instant":
            params = {"query": query, "time": _ns(end), "limit": limit, "direction": direction}
            data = await call("query", params)
            out: dict[str, Any] = {"query": query, "mode": "instant", "time": iso_utc(end)}
        else:
            params = {"query": query, "start": _ns(start), "end": _ns(end), "limit": limit, "direction": direction}
            data = await call("query_range", params)
            out = {"query": query, "mode": "range", "start": iso_utc(start), "end": iso_utc(end)}
        if not isinstance(data, dict):
            raise ToolError("Loki answered without a result")
        result_type = data.get("resultType")
        raw_result = data.get("result")
        result: list[Any] = raw_result if isinstance(raw_result, list) else []
        out["result_type"] = result_type
        if result_type == "streams":
            out.update(shape_streams(result, settings, limit, notes))
            if out["line_count"] >= limit:
                notes.append(f"Loki stopped at limit={limit} lines; narrow the window or raise limit")
        elif result_type in ("matrix", "vector"):
            out.update(shape_series(result_type, result, settings, notes))
        else:
            out["result"] = result[:settings.max_streams]
        if not result:
            notes.append("nothing matched; mode 'labels' lists the label names for the stream selector")
        if notes:
            out["notes"] = notes
        return out

    return Tool(name="query_logql", description=DESCRIPTION, parameters=PARAMETERS, handler=handler,
                tool_class="read", timeout_s=settings.timeout_s + 5)
