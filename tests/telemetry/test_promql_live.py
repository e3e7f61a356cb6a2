"""query_promql against a real Prometheus scraping a real node exporter."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx2
import ongrid_prometheus
import pytest
import trio

from ongridd.config import Config, PrometheusConfig
from ongridd.errors import ToolError, ToolTimeout
from ongridd.plugins.api import PluginContext, Tool, ToolCallContext

pytestmark = pytest.mark.prometheus  # needs Debian's prometheus, node exporter and alertmanager

CTX = ToolCallContext(session_id="00000000-0000-0000-0000-000000000001", agent="specialist-sre")
UP_DEADLINE_S = 40.0


def promql_tool(url: str | None, http: object = None, **settings: object) -> Tool:
    """The tool exactly as the daemon gets it: through the plugin's hook."""
    registered: list[Tool] = []
    context = PluginContext(config=Config(prometheus=PrometheusConfig(url=url)),
                            plugin_name="ongrid_prometheus", settings=settings, http=http)
    ongrid_prometheus.ongrid_register_tools(register=registered.append, context=context)
    (tool,) = registered
    return tool


async def wait_for_node_up(tool: Tool) -> dict:
    """Poll ``up{job="node"}`` until the first scrape is in (bounded)."""
    with trio.fail_after(UP_DEADLINE_S):
        while True:
            result = await tool.handler({"query": 'up{job="node"}'}, CTX)
            if result["series"]:
                return result
            await trio.sleep(0.25)


def parse_iso(text: str) -> datetime:
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text[:-1] + "+00:00")


async def test_up_is_one_for_the_node_job(prometheus, node_exporter):
    tool = promql_tool(prometheus.url)
    assert tool.name == "query_promql" and tool.tool_class == "read"
    result = await wait_for_node_up(tool)
    assert result["mode"] == "instant"
    assert result["result_type"] == "vector"
    (series,) = result["series"]
    assert series["metric"] == {"__name__": "up", "job": "node", "instance": f"127.0.0.1:{node_exporter.port}"}
    assert series["value"] == 1
    at = parse_iso(series["at"])
    assert abs((datetime.now(UTC) - at).total_seconds()) < 120


async def test_real_node_metric_is_readable(prometheus, node_exporter):
    tool = promql_tool(prometheus.url)
    await wait_for_node_up(tool)
    result = await tool.handler({"query": "node_memory_MemTotal_bytes"}, CTX)
    (series,) = result["series"]
    assert isinstance(series["value"], int) and series["value"] > 1024 * 1024


async def test_shared_http_client_is_used_and_left_open(prometheus, node_exporter):
    async with httpx2.AsyncClient() as shared:
        tool = promql_tool(prometheus.url, http=shared)
        await wait_for_node_up(tool)
        result = await tool.handler({"query": "count(up)"}, CTX)
        assert result["series"][0]["value"] >= 1
        assert not shared.is_closed


async def test_instant_range_selector_gives_a_matrix(prometheus, node_exporter):
    tool = promql_tool(prometheus.url)
    await wait_for_node_up(tool)
    result = await tool.handler({"query": 'up{job="node"}[10s]'}, CTX)
    assert result["mode"] == "instant" and result["result_type"] == "matrix"
    (series,) = result["series"]
    assert series["summary"]["max"] == 1 and series["values"]


async def test_range_query_gives_values_and_a_summary(prometheus, node_exporter):
    tool = promql_tool(prometheus.url)
    await wait_for_node_up(tool)
    result = await tool.handler({"query": 'up{job="node"}', "lookback_s": 30, "step": "1s"}, CTX)
    assert result["mode"] == "range" and result["step"] == "1s"
    assert result["result_type"] == "matrix"
    (series,) = result["series"]
    assert series["metric"]["job"] == "node"
    summary = series["summary"]
    assert summary["points"] == len(series["values"]) >= 1
    assert summary["min"] == summary["max"] == summary["last"] == 1
    assert all(value == 1 for _, value in series["values"])
    times = [parse_iso(t) for t, _ in series["values"]]
    assert times == sorted(times)
    assert summary["last_at"] == series["values"][-1][0]
    span = parse_iso(result["end"]) - parse_iso(result["start"])
    assert span.total_seconds() == pytest.approx(30, abs=0.01)


async def test_range_with_rfc3339_start_and_automatic_step(prometheus, node_exporter):
    tool = promql_tool(prometheus.url)
    await wait_for_node_up(tool)
    start = datetime.now(UTC).replace(microsecond=0).timestamp() - 6 * 3600
    start_text = datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = await tool.handler({"query": 'up{job="node"}', "start": start_text, "end": "now"}, CTX)
    assert result["start"] == start_text
    # 6 h at no more than 60 automatic points → a 10 minute step
    assert result["step"] == "10m"
    for series in result["series"]:
        assert len(series["values"]) <= 60


async def test_too_fine_a_step_is_raised_and_said(prometheus, node_exporter):
    tool = promql_tool(prometheus.url, max_points=50)
    await wait_for_node_up(tool)
    result = await tool.handler({"query": 'up{job="node"}', "lookback_s": 3600, "step": "1s"}, CTX)
    assert result["step"] == "1m30s"
    assert any("step raised from 1s to 1m30s" in note for note in result["notes"])
    for series in result["series"]:
        assert len(series["values"]) <= 50


async def test_series_are_cut_to_the_limit_and_the_cut_is_said(prometheus, node_exporter):
    tool = promql_tool(prometheus.url, max_series=2)
    await wait_for_node_up(tool)
    result = await tool.handler({"query": "node_cpu_seconds_total"}, CTX)
    assert len(result["series"]) == 2
    assert result["series_count"] > 2
    assert any(f"showing 2 of {result['series_count']} series" in note for note in result["notes"])


async def test_bad_promql_returns_prometheus_error_text(prometheus):
    tool = promql_tool(prometheus.url)
    with pytest.raises(ToolError) as info:
        await tool.handler({"query": "up{"}, CTX)
    message = str(info.value)
    assert "bad_data" in message
    assert "unexpected end of input inside braces" in message


async def test_bad_function_name_is_reported(prometheus):
    tool = promql_tool(prometheus.url)
    with pytest.raises(ToolError, match="unknown function with name \"no_such_fn\""):
        await tool.handler({"query": "no_such_fn(up)"}, CTX)


async def test_null_optional_parameters_count_as_absent(prometheus, node_exporter):
    tool = promql_tool(prometheus.url)
    await wait_for_node_up(tool)
    result = await tool.handler({"query": 'up{job="node"}', "time": None, "start": None, "end": None,
                                 "step": None, "lookback_s": None}, CTX)
    assert result["mode"] == "instant"
    assert result["series"][0]["value"] == 1


async def test_relative_time_for_an_instant_query(prometheus, node_exporter):
    tool = promql_tool(prometheus.url)
    await wait_for_node_up(tool)
    result = await tool.handler({"query": "vector(1)", "time": "-10m"}, CTX)
    at = parse_iso(result["time"])
    assert abs((datetime.now(UTC) - at).total_seconds() - 600) < 60


async def test_unreachable_server_is_a_clear_error():
    port = _closed_port()
    tool = promql_tool(f"http://127.0.0.1:{port}")
    with pytest.raises(ToolError, match=rf"cannot reach Prometheus at http://127\.0\.0\.1:{port}"):
        await tool.handler({"query": "up"}, CTX)


async def test_a_server_that_never_answers_times_out(nursery):
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    accepted: list[trio.SocketStream] = []

    async def hold(listener: trio.SocketListener) -> None:
        while True:
            accepted.append(await listener.accept())  # never read, never answer

    for listener in listeners:
        nursery.start_soon(hold, listener)
    tool = promql_tool(f"http://127.0.0.1:{port}", timeout_s=0.5)
    with trio.fail_after(10):
        with pytest.raises(ToolTimeout, match="did not answer within 0.5 s"):
            await tool.handler({"query": "up"}, CTX)
    assert accepted, "the client never connected"
    for stream in accepted:
        await stream.aclose()


async def test_no_prometheus_url_configured():
    tool = promql_tool(None)
    with pytest.raises(ToolError, match="set prometheus.url"):
        await tool.handler({"query": "up"}, CTX)


async def test_conflicting_time_arguments_are_refused(prometheus):
    tool = promql_tool(prometheus.url)
    with pytest.raises(ToolError, match="either 'time'"):
        await tool.handler({"query": "up", "time": "now", "lookback_s": 60}, CTX)
    with pytest.raises(ToolError, match="start .* must be before end"):
        await tool.handler({"query": "up", "start": "-1h", "end": "-2h"}, CTX)
    with pytest.raises(ToolError, match="cannot read 'yesterday' as a time"):
        await tool.handler({"query": "up", "start": "yesterday"}, CTX)


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed on exit: nothing listens there


async def test_a_url_that_is_not_prometheus_is_named(node_exporter):
    tool = promql_tool(node_exporter.url)  # a real HTTP server, but not Prometheus's API
    with pytest.raises(ToolError) as info:
        await tool.handler({"query": "up"}, CTX)
    message = str(info.value)
    assert message.startswith(f"Prometheus at {node_exporter.url} answered HTTP 200 with a body that is not its "
                              "API's JSON (is prometheus.url the server's base URL?)")
    assert "Node Exporter" in message
