"""``query_logql`` against a local double of Loki's HTTP API: range and
instant queries, labels, limits on streams, lines and line length, Loki's
plain-text 400 for a bad query passed through, timeouts and an unreachable
server."""

from __future__ import annotations

import json
import re

import pytest
import trio

import ongrid_loki
from ongridd.config import Config, UrlConfig
from ongridd.errors import ToolError, ToolTimeout
from tests.signals.http_double import plugin_tool, serve

BASE_NS = 1_772_445_600 * 10**9  # 2026-03-02T10:00:00Z
STREAMS = [
    ({"app": "checkout", "pod": "checkout-1"},
     [(BASE_NS + i * 10**9, f"level=error msg=\"db refused\" n={i}" if i % 2 else f"level=info n={i}")
      for i in range(40)]),
    ({"app": "checkout", "pod": "checkout-2"}, [(BASE_NS + 5 * 10**9, "level=error msg=\"" + "x" * 5000 + "\"")]),
    ({"app": "search", "pod": "search-1"}, [(BASE_NS, "level=info ok")]),
    ({"app": "auth", "pod": "auth-1"}, [
        (BASE_NS, 'level=debug msg="login" password=hunter2-x dsn="postgres://svc:pw-123@db/auth" n=1'),
        (BASE_NS + 10**9, '{"level":"info","headers":{"Authorization":"Bearer tok-9f8e"},"user":"ops"}')]),
]
SELECTOR = re.compile(r'^\{(\w+)="([^"]*)"\}\s*(?:\|=\s*"([^"]*)")?$')


class LokiDouble:
    """Streams filtered by one ``{label="value"}`` matcher and an optional ``|= "text"``."""

    def __init__(self):
        self.requests = []

    async def __call__(self, method, path, q):
        self.requests.append((path, q))
        if path == "/loki/api/v1/labels":
            return 200, "application/json", json.dumps({"status": "success", "data": ["app", "pod"]}).encode()
        if path not in ("/loki/api/v1/query_range", "/loki/api/v1/query"):
            return 404, "text/plain", b"404 page not found\n"
        query = q.get("query", "")
        if "sleep" in query:
            await trio.sleep(5)
        if query.startswith("count_over_time"):
            data = {"resultType": "vector", "result": [{"metric": {"app": "checkout"},
                                                         "value": [BASE_NS / 1e9, "20"]}]}
            return 200, "application/json", json.dumps({"status": "success", "data": data}).encode()
        m = SELECTOR.match(query)
        if not m:
            return (400, "text/plain; charset=utf-8",
                    b"parse error at line 1, col 1: syntax error: unexpected IDENTIFIER, expecting { or ( or ...\n")
        key, value, needle = m.groups()
        start, end = int(q.get("start", 0)), int(q.get("end", 2**63))
        limit = int(q.get("limit", 100))
        result, budget = [], limit
        for labels, entries in STREAMS:
            if labels.get(key) != value:
                continue
            vals = [(ts, line) for ts, line in entries if start <= ts <= end and (needle is None or needle in line)]
            vals.sort(reverse=q.get("direction", "backward") == "backward")
            vals = vals[:budget]
            budget -= len(vals)
            if vals:
                result.append({"stream": labels, "values": [[str(ts), line] for ts, line in vals]})
        body = {"status": "success", "data": {"resultType": "streams", "result": result,
                                              "stats": {"summary": {"totalLinesProcessed": 41}}}}
        return 200, "application/json", json.dumps(body).encode()


def tool_for(url, **settings):
    return plugin_tool(ongrid_loki, "ongrid_loki", Config(loki=UrlConfig(url=url)), settings)


@pytest.fixture
async def loki(nursery):
    double = LokiDouble()
    return double, await serve(nursery, double)


async def test_range_query_newest_first_with_limits(loki):
    double, url = loki
    call = tool_for(url, max_line_chars=200)
    out = await call(query='{app="checkout"} |= "error"', start="2026-03-02T09:59:00Z", end="2026-03-02T11:00:00Z",
                     limit=5)
    path, q = double.requests[-1]
    assert path == "/loki/api/v1/query_range" and q["limit"] == "5" and q["direction"] == "backward"
    assert q["start"] == str(1_772_445_540 * 10**9)
    assert out["result_type"] == "streams" and out["line_count"] == 5
    first = out["streams"][0]
    assert first["labels"] == {"app": "checkout", "pod": "checkout-1"}
    assert [e["ts"] for e in first["entries"]][:2] == ["2026-03-02T10:00:39Z", "2026-03-02T10:00:37Z"]
    assert first["entries"][0]["line"] == 'level=error msg="db refused" n=39'
    assert any("limit=5" in n for n in out["notes"])


async def test_streams_and_line_length_are_bounded(loki):
    _, url = loki
    out = await tool_for(url, max_streams=1, max_line_chars=100)(
        query='{app="checkout"} |= "error"', start="2026-03-02T09:00:00Z", end="2026-03-02T11:00:00Z", limit=1000)
    assert len(out["streams"]) == 1 and out["stream_count"] == 2 and out["truncated"] is True
    cut = await tool_for(url, max_line_chars=100)(query='{pod="checkout-2"}', start="2026-03-02T09:00:00Z",
                                                  end="2026-03-02T11:00:00Z")
    line = cut["streams"][0]["entries"][0]["line"]
    assert len(line) < 130 and line.endswith("chars cut]")


async def test_credentials_in_lines_are_hidden(loki):
    # another service's log lines (logfmt, a DSN, JSON with an Authorization header) reach the model with
    # the values hidden, and the answer says so; a query whose lines hold none has no "redacted"
    _, url = loki
    out = await tool_for(url)(query='{app="auth"}', start="2026-03-02T09:00:00Z", end="2026-03-02T11:00:00Z")
    lines = [e["line"] for e in out["streams"][0]["entries"]]
    assert lines == ['{"level":"info","headers":{"Authorization":"***"},"user":"ops"}',
                     'level=debug msg="login" password=*** dsn="postgres://svc:***@db/auth" n=1']
    assert out["redacted"].startswith("values that look like credentials")
    plain = await tool_for(url)(query='{app="search"}', start="2026-03-02T09:00:00Z", end="2026-03-02T11:00:00Z")
    assert "redacted" not in plain


async def test_bad_query_passes_lokis_error_text_through(loki):
    _, url = loki
    with pytest.raises(ToolError, match=r"HTTP 400\): parse error at line 1, col 1: syntax error"):
        await tool_for(url)(query="app=checkout")


async def test_instant_metric_query_and_labels(loki):
    double, url = loki
    out = await tool_for(url)(query='count_over_time({app="checkout"}[5m])', mode="instant", end=1_772_445_600)
    assert double.requests[-1][0] == "/loki/api/v1/query" and double.requests[-1][1]["time"] == str(BASE_NS)
    assert out["series"] == [{"metric": {"app": "checkout"}, "value": ["2026-03-02T10:00:00Z", "20"]}]
    labels = await tool_for(url)(mode="labels")
    assert labels["labels"] == ["app", "pod"]


async def test_no_url_timeout_and_unreachable():
    with pytest.raises(ToolError, match="set loki.url"):
        await tool_for(None)(query='{app="x"}')
    with pytest.raises(ToolError, match="cannot reach Loki at http://127.0.0.1:9"):
        await tool_for("http://127.0.0.1:9")(query='{app="x"}')


async def test_timeout(loki):
    _, url = loki
    with pytest.raises(ToolTimeout, match="did not answer within 0.5 s"):
        await tool_for(url, timeout_s=0.5)(query='{app="sleep"}')
