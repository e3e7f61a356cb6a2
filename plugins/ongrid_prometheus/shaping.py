"""Prometheus query results shaped for a model: labels, ISO times, bounded size.

Values become JSON numbers (10 significant digits); ``NaN`` and infinities,
which JSON cannot carry, stay strings (``"NaN"``, ``"+Inf"``, ``"-Inf"``).
Every cut is said in ``notes``.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from ongrid_prometheus.timeparse import iso_utc


@attrs.frozen(kw_only=True)
class Limits:
    """``max_series``: series returned; ``max_points``: points per range series;
    ``max_total_points``: points over all returned range series (values are
    thinned evenly past it; summaries still use every point)."""

    max_series: int = 50
    max_points: int = 200
    max_total_points: int = 2000


def sample_value(raw: Any) -> float | str:
    """A Prometheus sample string (``"1.5"``, ``"NaN"``, ``"+Inf"``) → number or string."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return str(raw)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    value = float(f"{value:.10g}")
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def _histogram(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return {"native_histogram": {"count": sample_value(raw.get("count")), "sum": sample_value(raw.get("sum"))}}
    return {"native_histogram": str(raw)[:200]}


def _cut_series(result: list[Any], limits: Limits, notes: list[str]) -> list[Any]:
    if len(result) > limits.max_series:
        notes.append(
            f"showing {limits.max_series} of {len(result)} series; narrow the query with label matchers "
            "or aggregate it (sum by (...), topk(...))"
        )
        return result[: limits.max_series]
    return result


def shape_instant(data: Any, limits: Limits, notes: list[str]) -> dict[str, Any]:
    """The ``data`` of ``/api/v1/query`` → ``{result_type, series_count, series: [...]}``.

    A vector gives ``series: [{metric, value, at}]``; a scalar or string gives
    ``value`` and ``at``.  A matrix (a range selector such as ``up[5m]``) is
    shaped like a range query's result.
    """
    result_type = data.get("resultType") if isinstance(data, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    if result_type in ("scalar", "string") and isinstance(result, list) and len(result) == 2:
        return {"result_type": result_type, "value": sample_value(result[1]) if result_type == "scalar"
                else str(result[1]), "at": iso_utc(float(result[0]))}
    if result_type == "matrix":
        return shape_matrix(data, limits, notes)
    if result_type != "vector" or not isinstance(result, list):
        return {"result_type": str(result_type), "raw": str(result)[:2000]}
    kept = _cut_series(result, limits, notes)
    series = []
    for item in kept:
        entry: dict[str, Any] = {"metric": dict(item.get("metric") or {})}
        if "histogram" in item:
            ts, hist = item["histogram"]
            entry.update(_histogram(hist), at=iso_utc(float(ts)))
        else:
            ts, raw = item.get("value") or (0, None)
            entry.update(value=sample_value(raw), at=iso_utc(float(ts)))
        series.append(entry)
    return {"result_type": "vector", "series_count": len(result), "series": series}


def shape_matrix(data: Any, limits: Limits, notes: list[str]) -> dict[str, Any]:
    """The ``data`` of ``/api/v1/query_range`` → series with a summary and ``values``.

    Each series: ``{metric, summary: {points, first_at, last_at, min, max,
    last}, values: [[iso_time, value], ...]}``.  The summary is computed from
    every point Prometheus returned, before any thinning.
    """
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        return {"result_type": "matrix", "series_count": 0, "series": []}
    kept = _cut_series(result, limits, notes)
    per_series_cap = limits.max_points
    if kept:
        per_series_cap = max(2, min(limits.max_points, limits.max_total_points // len(kept)))
    series = []
    thinned = 0
    for item in kept:
        raw_values = item.get("values") or []
        points = [(float(ts), sample_value(v)) for ts, v in raw_values]
        hist_points = item.get("histograms") or []
        if not points and hist_points:
            points = [(float(ts), _histogram(h)["native_histogram"]) for ts, h in hist_points]
        entry: dict[str, Any] = {"metric": dict(item.get("metric") or {}), "summary": _summary(points)}
        if len(points) > per_series_cap:
            thinned += 1
            points = _thin(points, per_series_cap)
        entry["values"] = [[iso_utc(ts), v] for ts, v in points]
        series.append(entry)
    if thinned:
        notes.append(
            f"values of {thinned} series thinned evenly to at most {per_series_cap} points each "
            "(first and last kept; summaries use every point); use a larger step or a shorter range for detail"
        )
    return {"result_type": "matrix", "series_count": len(result), "series": series}


def _summary(points: list[tuple[float, Any]]) -> dict[str, Any]:
    numbers = [v for _, v in points if isinstance(v, (int, float))]
    out: dict[str, Any] = {"points": len(points)}
    if points:
        out["first_at"] = iso_utc(points[0][0])
        out["last_at"] = iso_utc(points[-1][0])
        out["last"] = points[-1][1]
    if numbers:
        out["min"] = min(numbers)
        out["max"] = max(numbers)
    return out


def _thin(points: list[Any], cap: int) -> list[Any]:
    """``cap`` points spread evenly over ``points``, first and last included."""
    n = len(points)
    if n <= cap:
        return points
    indices = sorted({round(i * (n - 1) / (cap - 1)) for i in range(cap)})
    return [points[i] for i in indices]
