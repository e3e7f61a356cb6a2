"""The ``query_traceql`` tool: TraceQL search and trace lookup against the
Tempo HTTP API, with spans summarised.

- ``query`` (TraceQL, e.g. ``{ resource.service.name = "checkout" && status = error }``):
  ``GET /api/search?q=…&start=…&end=…&limit=…`` (window default: the last
  hour).  Result ``{mode: "search", traces: [{trace_id, root_service,
  root_name, start, duration_ms, matched, spans: [{service, name,
  duration_ms, status}]}], trace_count, truncated}``.
- ``trace_id``: ``GET /api/traces/<id>`` (OTLP JSON, ``batches`` or
  ``resourceSpans``).  Result ``{mode: "trace", trace_id, span_count,
  duration_ms, root: {service, name}, services: {name: span count},
  slowest: [...], errors: [...], truncated}``; each span shown as
  ``{service, name, duration_ms, status, message?}``.

Tempo's own error text is passed through (ToolError); an unknown trace id
is an error saying so; timeouts raise ToolTimeout.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from ongridd.plugins.api import ToolError
from ongridd.plugins.api import Tool, ToolCallContext, get_json, iso_utc, numeric_settings, parse_time

DEFAULT_WINDOW_S = 3600.0
TRACE_ID_RE = re.compile(r"^[0-9a-fA-F]{1,32}\Z")
_TIME = {"type": ["string", "number"]}
_ERROR_CODES = ("STATUS_CODE_ERROR", 2, "2", "ERROR")


@attrs.frozen(kw_only=True)
class TempoSettings:
    """``plugins.settings.ongrid_tempo``: ``timeout_s``, ``max_traces``,
    ``max_spans`` (spans read from one trace), ``top_spans`` (slowest and
    erroring spans shown)."""

    timeout_s: float = 15.0
    max_traces: int = 50
    max_spans: int = 20_000
    top_spans: int = 10

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None, *, where: str) -> TempoSettings:
        """Checked settings; ValueError naming the bad key."""
        return numeric_settings(cls, raw, where=where)


PARAMETERS: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 4000,
                  "description": "TraceQL, e.g. '{ resource.service.name = \"checkout\" && status = error }' or "
                                 "'{ duration > 2s }'"},
        "trace_id": {"type": "string", "minLength": 1, "maxLength": 32,
                     "description": "one trace to summarise (hex id), instead of a query"},
        "start": {**_TIME, "description": "search window start: unix seconds, RFC 3339 or 'now-1h' (default end - 1h)"},
        "end": {**_TIME, "description": "search window end (default now)"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "most traces (default 20)"},
    },
}

DESCRIPTION = ("Query traces in Tempo: a TraceQL search (matching traces with root service, duration and the "
               "matched spans) or one trace by id, summarised: services, the slowest spans and the erroring "
               "spans with their status messages. Tempo's error text is returned for a bad query.")


def _attrs(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in items or []:
        if isinstance(a, dict) and isinstance(a.get("key"), str) and isinstance(a.get("value"), dict):
            v = a["value"]
            for kind in ("stringValue", "intValue", "doubleValue", "boolValue"):
                if kind in v:
                    out[a["key"]] = v[kind]
                    break
    return out


def _nanos(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _status(span: dict[str, Any]) -> tuple[str, str | None]:
    st = span.get("status") or {}
    code = st.get("code") if isinstance(st, dict) else None
    if code in _ERROR_CODES:
        return "error", (st.get("message") or None)
    if code in ("STATUS_CODE_OK", 1, "1"):
        return "ok", None
    return "unset", None


def iter_spans(trace: Any, limit: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """(service, span) pairs of an OTLP JSON trace, at most ``limit``."""
    batches = (trace.get("batches") or trace.get("resourceSpans")
               or (trace.get("trace") or {}).get("resourceSpans") or []) if isinstance(trace, dict) else []
    n = 0
    for batch in batches:
        if not isinstance(batch, dict):
            continue
        service = _attrs((batch.get("resource") or {}).get("attributes")).get("service.name", "unknown")
        for scope in batch.get("scopeSpans") or batch.get("instrumentationLibrarySpans") or []:
            for span in (scope or {}).get("spans") or []:
                if n >= limit:
                    return
                if isinstance(span, dict):
                    n += 1
                    yield str(service), span


def summarise_trace(trace_id: str, trace: Any, settings: TempoSettings) -> dict[str, Any]:
    """The ``mode: trace`` result for one OTLP JSON trace."""
    shown = []
    services: Counter[str] = Counter()
    starts, ends = [], []
    root = None
    count = 0
    for service, span in iter_spans(trace, settings.max_spans + 1):
        count += 1
        if count > settings.max_spans:
            break
        s, e = _nanos(span.get("startTimeUnixNano")), _nanos(span.get("endTimeUnixNano"))
        duration_ms = round((e - s) / 1e6, 3) if s is not None and e is not None else None
        status, message = _status(span)
        item: dict[str, Any] = {"service": service, "name": str(span.get("name", ""))[:200], "duration_ms": duration_ms,
                "status": status}
        if message:
            item["message"] = str(message)[:500]
        services[service] += 1
        if s is not None:
            starts.append(s)
        if e is not None:
            ends.append(e)
        if not span.get("parentSpanId") and root is None:
            root = {"service": service, "name": item["name"]}
        shown.append(item)
    if not shown:
        raise ToolError(f"trace {trace_id}: Tempo returned no spans")
    slowest = sorted((x for x in shown if x["duration_ms"] is not None), key=lambda x: -x["duration_ms"])
    errors = [x for x in shown if x["status"] == "error"]
    return {"mode": "trace", "trace_id": trace_id, "span_count": min(count, settings.max_spans),
            "duration_ms": round((max(ends) - min(starts)) / 1e6, 3) if starts and ends else None,
            "start": iso_utc(min(starts) / 1e9) if starts else None, "root": root,
            "services": dict(services.most_common(50)), "slowest": slowest[:settings.top_spans],
            "errors": errors[:settings.top_spans], "error_count": len(errors),
            "truncated": count > settings.max_spans}


def summarise_search(body: Any, settings: TempoSettings, limit: int) -> dict[str, Any]:
    """The ``mode: search`` result for an ``/api/search`` answer."""
    traces = body.get("traces") if isinstance(body, dict) else None
    traces = traces if isinstance(traces, list) else []
    out = []
    for t in traces[:min(limit, settings.max_traces)]:
        if not isinstance(t, dict):
            continue
        spans: list[dict[str, Any]] = []
        matched = 0
        sets = t.get("spanSets") or ([t["spanSet"]] if isinstance(t.get("spanSet"), dict) else [])
        for ss in sets:
            if not isinstance(ss, dict):
                continue
            matched += int(ss.get("matched") or 0)
            for sp in (ss.get("spans") or [])[:settings.top_spans - len(spans)]:
                if not isinstance(sp, dict):
                    continue
                a = _attrs(sp.get("attributes"))
                d = _nanos(sp.get("durationNanos"))
                spans.append({"service": a.get("service.name"), "name": sp.get("name") or a.get("name"),
                              "duration_ms": round(d / 1e6, 3) if d is not None else None,
                              "status": a.get("status")})
        start = _nanos(t.get("startTimeUnixNano"))
        out.append({"trace_id": t.get("traceID"), "root_service": t.get("rootServiceName"),
                    "root_name": t.get("rootTraceName"), "start": iso_utc(start / 1e9) if start else None,
                    "duration_ms": t.get("durationMs"), "matched": matched, "spans": spans})
    return {"mode": "search", "traces": out, "trace_count": len(traces), "truncated": len(traces) > len(out)}


def make_query_traceql(url: str | None, http: Any, settings: TempoSettings) -> Tool:
    """Build ``query_traceql`` for the Tempo at ``url`` (None: every call says how to configure it)."""

    async def call(path: str, params: dict[str, Any], *, trace_id: str | None = None) -> Any:
        if not url:
            raise ToolError("no Tempo server configured: set tempo.url in the Ongrid config "
                            "(or the ONGRID_TEMPO_URL environment variable)")
        base = url.rstrip("/")
        answer = await get_json(http, f"{base}{path}", params, timeout_s=settings.timeout_s, what=f"Tempo at {base}")
        if answer.status == 404 and trace_id is not None:
            raise ToolError(f"trace {trace_id} not found in Tempo ({answer.error_text()})")
        if answer.status >= 400:
            raise ToolError(f"Tempo rejected the request (HTTP {answer.status}): {answer.error_text()}")
        if not isinstance(answer.json, dict):
            raise ToolError(f"Tempo at {base} answered HTTP {answer.status} with a body that is not its API's "
                            f"JSON (is tempo.url the server's base URL?): {answer.text[:200]!r}")
        return answer.json

    async def handler(args: dict[str, Any], ctx: ToolCallContext | None = None) -> dict[str, Any]:
        args = {k: v for k, v in (args or {}).items() if v is not None}
        if "trace_id" in args:
            if "query" in args:
                raise ToolError("give either 'query' (a TraceQL search) or 'trace_id', not both")
            tid = str(args["trace_id"]).strip()
            if not TRACE_ID_RE.match(tid):
                raise ToolError(f"trace_id: expected up to 32 hex digits, got {tid[:40]!r}")
            return summarise_trace(tid, await call(f"/api/traces/{tid}", {}, trace_id=tid), settings)
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("give 'query' (TraceQL, e.g. '{ status = error }') or 'trace_id'")
        now = time.time()
        end = parse_time(args["end"], now=now, field="end") if "end" in args else now
        start = parse_time(args["start"], now=now, field="start") if "start" in args else end - DEFAULT_WINDOW_S
        if start >= end:
            raise ToolError(f"start ({iso_utc(start)}) must be before end ({iso_utc(end)})")
        limit = int(args.get("limit", 20))
        body = await call("/api/search", {"q": query, "start": int(start), "end": int(end) + 1, "limit": limit,
                                          "spss": settings.top_spans})
        out = {"query": query, "start": iso_utc(start), "end": iso_utc(end), **summarise_search(body, settings, limit)}
        if not out["traces"]:
            out["notes"] = ["no trace matched in the window; widen start/end or loosen the query"]
        return out

    return Tool(name="query_traceql", description=DESCRIPTION, parameters=PARAMETERS, handler=handler,
                tool_class="read", timeout_s=settings.timeout_s + 5)
