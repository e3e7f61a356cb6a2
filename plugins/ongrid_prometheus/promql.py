"""The ``query_promql`` tool: instant and range PromQL queries with bounded results."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ongrid_prometheus.client import PrometheusClient
from ongrid_prometheus.shaping import Limits, shape_instant, shape_matrix
from ongrid_prometheus.timeparse import format_duration, iso_utc, parse_duration, parse_time
from ongridd.plugins.api import ToolError
from ongridd.plugins.api import Tool, ToolCallContext, numeric_settings

#: steps the automatic choice picks from (seconds)
NICE_STEPS_S = (1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1200, 1800, 3600,
                7200, 10800, 21600, 43200, 86400)
DEFAULT_LOOKBACK_S = 3600.0

_TIME = {"type": ["string", "number"]}

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1,
                  "description": "PromQL expression, e.g. 'up{job=\"node\"}' or "
                                 "'100 - 100 * node_filesystem_avail_bytes / node_filesystem_size_bytes'"},
        "time": {**_TIME, "description": "instant query: evaluation time (RFC 3339, unix seconds, or relative "
                                         "such as '-1h'); default now"},
        "start": {**_TIME, "description": "range query: start time (RFC 3339, unix seconds, or relative "
                                          "such as '-6h')"},
        "end": {**_TIME, "description": "range query: end time; default now"},
        "step": {**_TIME, "description": "range query resolution, e.g. '30s', '5m' or seconds; default chosen so "
                                         "each series has a bounded number of points"},
        "lookback_s": {"type": "number", "exclusiveMinimum": 0,
                       "description": "range query over the last N seconds before end (instead of start)"},
    },
    "required": ["query"],
    "additionalProperties": False,
}

DESCRIPTION = (
    "Run a PromQL query against Prometheus. Instant query by default (one value per series at 'time'); "
    "a range query when start, end or lookback_s is given (values over time, with min/max/last per series). "
    "Results are limited in series and points; notes say what was cut."
)


@attrs.frozen(kw_only=True)
class PromqlSettings:
    """``plugins.settings.ongrid_prometheus``: ``timeout_s`` (HTTP and query
    evaluation limit), ``max_series``, ``max_points`` (per range series),
    ``max_total_points``, ``auto_points`` (points aimed at when the step is
    chosen automatically)."""

    timeout_s: float = 10.0
    max_series: int = 50
    max_points: int = 200
    max_total_points: int = 2000
    auto_points: int = 60

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any], *, where: str) -> PromqlSettings:
        """Read and check the plugin settings; ValueError names the bad key."""
        out = numeric_settings(cls, settings, where=where)
        if out.max_points < 2 or out.auto_points < 2:
            raise ValueError(f"max_points and auto_points must be at least 2 @ {where}")
        return out


def auto_step(range_s: float, target_points: int) -> float:
    """The smallest step from ``NICE_STEPS_S`` (then whole days) that keeps
    ``range_s / step + 1`` at or under ``target_points``."""
    wanted = range_s / max(1, target_points - 1)
    for step in NICE_STEPS_S:
        if step >= wanted:
            return float(step)
    return float(math.ceil(wanted / 86400) * 86400)


def _clean(args: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (args or {}).items() if v is not None}


def make_query_promql(client: PrometheusClient, settings: PromqlSettings,
                      clock: Callable[[], float] = time.time) -> Tool:
    """Build the ``query_promql`` tool for one Prometheus server.

    The handler returns a dict: ``query``, ``mode`` (``instant``|``range``),
    the times used (ISO 8601 UTC), ``result_type``, ``series_count`` (before
    cuts), ``series`` and, when something was cut or Prometheus warned,
    ``notes``/``warnings``.  It raises ToolError (or ToolTimeout) as
    :meth:`PrometheusClient.call` does, and for arguments it cannot read.
    """
    limits = Limits(max_series=settings.max_series, max_points=settings.max_points,
                    max_total_points=settings.max_total_points)

    async def handler(args: dict[str, Any], ctx: ToolCallContext | None = None) -> dict[str, Any]:
        args = _clean(args)
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query_promql: 'query' must be a non-empty PromQL expression")
        client.require_url()
        now = clock()
        notes: list[str] = []
        is_range = any(k in args for k in ("start", "end", "lookback_s", "step"))
        if is_range and "time" in args:
            raise ToolError("query_promql: give either 'time' (instant query) or start/end/lookback_s/step "
                            "(range query), not both")
        base_params = {"query": query, "timeout": format_duration(settings.timeout_s)}
        if not is_range:
            at = parse_time(args["time"], now=now, field="time") if "time" in args else now
            answer = await client.call("query", {**base_params, "time": f"{at:.3f}"}, method="POST")
            out: dict[str, Any] = {"query": query, "mode": "instant", "time": iso_utc(at)}
            out.update(shape_instant(answer.data, limits, notes))
        else:
            start, end, step = _range_window(args, now, settings, notes)
            answer = await client.call(
                "query_range",
                {**base_params, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": format_duration(step)},
                method="POST",
            )
            out = {"query": query, "mode": "range", "start": iso_utc(start), "end": iso_utc(end),
                   "step": format_duration(step)}
            out.update(shape_matrix(answer.data, limits, notes))
        if out.get("series") == [] and out.get("series_count") == 0:
            notes.append("no series matched; check the metric name and label matchers")
        if notes:
            out["notes"] = notes
        if answer.warnings:
            out["warnings"] = list(answer.warnings)
        return out

    return Tool(name="query_promql", description=DESCRIPTION, parameters=PARAMETERS, handler=handler,
                tool_class="read", timeout_s=settings.timeout_s + 5)


def _range_window(args: Mapping[str, Any], now: float, settings: PromqlSettings,
                  notes: list[str]) -> tuple[float, float, float]:
    end = parse_time(args["end"], now=now, field="end") if "end" in args else now
    if "start" in args and "lookback_s" in args:
        raise ToolError("query_promql: give either 'start' or 'lookback_s', not both")
    if "start" in args:
        start = parse_time(args["start"], now=now, field="start")
    else:
        lookback = args.get("lookback_s", DEFAULT_LOOKBACK_S)
        if isinstance(lookback, bool) or not isinstance(lookback, (int, float)) or not lookback > 0:
            raise ToolError(f"query_promql: 'lookback_s' must be a positive number of seconds, got {lookback!r}")
        if "lookback_s" not in args:
            notes.append(f"no start or lookback_s given; used the {format_duration(DEFAULT_LOOKBACK_S)} before end")
        start = end - float(lookback)
    if start >= end:
        raise ToolError(f"query_promql: start ({iso_utc(start)}) must be before end ({iso_utc(end)})")
    range_s = end - start
    if "step" in args:
        step = parse_duration(args["step"], field="step")
        if range_s / step + 1 > settings.max_points:
            wider = auto_step(range_s, settings.max_points)
            notes.append(f"step raised from {format_duration(step)} to {format_duration(wider)} so that each "
                         f"series has at most {settings.max_points} points")
            step = wider
    else:
        step = auto_step(range_s, settings.auto_points)
    return start, end, step
