"""``query_traceql`` against a local double of Tempo's HTTP API: TraceQL
search, one trace by id summarised (services, slowest and erroring spans),
Tempo's error text for a bad query, an unknown trace, bounds."""

from __future__ import annotations

import json

import pytest

import ongrid_tempo
from ongridd.config import Config, UrlConfig
from ongridd.errors import ToolError
from tests.signals.http_double import plugin_tool, serve

T0 = 1_772_445_600 * 10**9
TRACE_ID = "2f3e0cee77ae5dc9c17ade3689eb2e54"


def _span(span_id, parent, name, start_ms, dur_ms, error=None):
    span = {"traceId": TRACE_ID, "spanId": span_id, "name": name, "kind": "SPAN_KIND_SERVER",
            "startTimeUnixNano": str(T0 + start_ms * 10**6), "endTimeUnixNano": str(T0 + (start_ms + dur_ms) * 10**6),
            "status": {"code": "STATUS_CODE_ERROR", "message": error} if error else {"code": "STATUS_CODE_OK"}}
    if parent:
        span["parentSpanId"] = parent
    return span


def _batch(service, spans):
    return {"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
            "scopeSpans": [{"scope": {"name": "otel"}, "spans": spans}]}


TRACE = {"batches": [
    _batch("edge-lb", [_span("a1", None, "GET /pay", 0, 2300)]),
    _batch("checkout", [_span("b1", "a1", "POST /checkout", 5, 2290),
                        _span("b2", "b1", "redis GET session", 10, 3)]),
    _batch("postgres-main", [_span("c1", "b1", "SELECT orders", 20, 2250,
                                   error="remaining connection slots are reserved")]),
]}

SEARCH = {"traces": [{
    "traceID": TRACE_ID, "rootServiceName": "edge-lb", "rootTraceName": "GET /pay",
    "startTimeUnixNano": str(T0), "durationMs": 2300,
    "spanSets": [{"spans": [{"spanID": "c1", "name": "SELECT orders", "startTimeUnixNano": str(T0),
                             "durationNanos": str(2250 * 10**6),
                             "attributes": [{"key": "service.name", "value": {"stringValue": "postgres-main"}},
                                            {"key": "status", "value": {"stringValue": "error"}}]}],
                  "matched": 1}]}],
    "metrics": {"inspectedTraces": 12, "inspectedBytes": "40960"}}


class TempoDouble:
    def __init__(self):
        self.requests = []

    async def __call__(self, method, path, q):
        self.requests.append((path, q))
        if path == "/api/search":
            if not q.get("q", "").lstrip().startswith("{"):
                return (400, "text/plain; charset=utf-8",
                        b"invalid TraceQL query: parse error at line 1, col 1: syntax error: unexpected IDENTIFIER")
            return 200, "application/json", json.dumps(SEARCH).encode()
        if path == f"/api/traces/{TRACE_ID}":
            return 200, "application/json", json.dumps(TRACE).encode()
        if path.startswith("/api/traces/"):
            return 404, "text/plain; charset=utf-8", b"trace not found"
        return 404, "text/plain", b"404 page not found"


def tool_for(url, **settings):
    return plugin_tool(ongrid_tempo, "ongrid_tempo", Config(tempo=UrlConfig(url=url)), settings)


@pytest.fixture
async def tempo(nursery):
    double = TempoDouble()
    return double, await serve(nursery, double)


async def test_search_sends_traceql_and_summarises_matches(tempo):
    double, url = tempo
    out = await tool_for(url)(query='{ status = error }', start="2026-03-02T09:00:00Z", end="2026-03-02T11:00:00Z",
                              limit=5)
    path, q = double.requests[-1]
    assert path == "/api/search" and q["q"] == "{ status = error }" and q["limit"] == "5"
    assert q["start"] == str(1_772_445_600 - 3600)
    assert out["traces"] == [{"trace_id": TRACE_ID, "root_service": "edge-lb", "root_name": "GET /pay",
                              "start": "2026-03-02T10:00:00Z", "duration_ms": 2300, "matched": 1,
                              "spans": [{"service": "postgres-main", "name": "SELECT orders", "duration_ms": 2250.0,
                                         "status": "error"}]}]


async def test_trace_by_id_names_slowest_and_erroring_spans(tempo):
    _, url = tempo
    out = await tool_for(url, top_spans=2)(trace_id=TRACE_ID)
    assert out["span_count"] == 4 and out["duration_ms"] == 2300.0
    assert out["root"] == {"service": "edge-lb", "name": "GET /pay"}
    assert out["services"] == {"checkout": 2, "edge-lb": 1, "postgres-main": 1}
    assert [s["name"] for s in out["slowest"]] == ["GET /pay", "POST /checkout"]
    assert out["errors"] == [{"service": "postgres-main", "name": "SELECT orders", "duration_ms": 2250.0,
                              "status": "error", "message": "remaining connection slots are reserved"}]
    bounded = await tool_for(url, max_spans=2)(trace_id=TRACE_ID)
    assert bounded["span_count"] == 2 and bounded["truncated"] is True


async def test_errors_are_tempos_own_words(tempo):
    _, url = tempo
    call = tool_for(url)
    with pytest.raises(ToolError, match=r"HTTP 400\): invalid TraceQL query: parse error"):
        await call(query="status = error")
    with pytest.raises(ToolError, match="trace 00ff not found in Tempo"):
        await call(trace_id="00ff")
    with pytest.raises(ToolError, match="hex digits"):
        await call(trace_id="../../etc")
    with pytest.raises(ToolError, match="set tempo.url"):
        await tool_for(None)(query="{ }")
    with pytest.raises(ToolError, match="cannot reach Tempo"):
        await tool_for("http://127.0.0.1:9")(query="{ }")
