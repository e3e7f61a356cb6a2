"""Time parsing, step choice and result shaping of query_promql (no Prometheus needed)."""

from __future__ import annotations

from datetime import UTC, datetime

import re

import pytest
from ongrid_prometheus.promql import PromqlSettings, auto_step
from ongrid_prometheus.shaping import Limits, sample_value, shape_instant, shape_matrix
from ongrid_prometheus.timeparse import format_duration, iso_utc, parse_duration, parse_time

from ongridd.errors import ToolError

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("value", "expected"), [
    (1714557600, 1714557600.0),
    ("1714557600.5", 1714557600.5),
    (-3600, NOW - 3600),
    ("now", NOW),
    ("-1h", NOW - 3600),
    ("now-90m", NOW - 5400),
    ("-1h30m", NOW - 5400),
    ("2024-05-01T10:00:00Z", NOW - 7200),
    ("2024-05-01T12:00:00+02:00", NOW - 7200),
    ("2024-05-01 10:00:00", NOW - 7200),
    ("2024-05-01T10:00:00.123456789Z", NOW - 7200 + 0.123456),
])
def test_parse_time_forms(value, expected):
    assert parse_time(value, now=NOW, field="start") == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(("value", "message"), [
    ("yesterday", "start: cannot read 'yesterday' as a time"),
    ("-1x", "start: cannot read '1x' as a duration"),
    ("", "start: empty time value"),
    (True, "start: expected a time, got True"),
    ([1], "start: expected a time (RFC 3339, unix seconds or '-1h'), got list"),
    (1e12, "start: 1000000000000.0 is outside the times that can be written as a date (years 1 to 9999)"),
    ("now+999999999999h", "start: 'now+999999999999h' is outside the times"),
    ("-99999999999d", "start: '-99999999999d' is outside"),
    ("9" * 5000, "start: '" + "9" * 38 + "… is outside"),
])
def test_parse_time_errors_name_the_field(value, message):
    with pytest.raises(ToolError, match=re.escape(message)):
        parse_time(value, now=NOW, field="start")


def test_durations():
    assert parse_duration("15s", field="step") == 15
    assert parse_duration("1m30s", field="step") == 90
    assert parse_duration(2.5, field="step") == 2.5
    assert parse_duration("250ms", field="step") == 0.25
    for bad in ("0s", 0, -5, "abc", "5 m", True):
        with pytest.raises(ToolError, match="step:"):
            parse_duration(bad, field="step")
    assert format_duration(90) == "1m30s"
    assert format_duration(0.5) == "500ms"
    assert format_duration(86400) == "1d"
    assert iso_utc(NOW) == "2024-05-01T12:00:00Z"
    assert iso_utc(NOW + 0.25) == "2024-05-01T12:00:00.250Z"


def test_auto_step_keeps_points_under_the_target():
    for range_s in (30, 300, 3600, 6 * 3600, 86400, 30 * 86400, 400 * 86400):
        step = auto_step(range_s, 60)
        assert range_s / step + 1 <= 60
    assert auto_step(3600, 60) == 90
    assert auto_step(300, 60) == 10


def test_sample_values_are_numbers_or_json_safe_strings():
    assert sample_value("1") == 1 and isinstance(sample_value("1"), int)
    assert sample_value("0.123456789123456") == 0.1234567891
    assert sample_value("NaN") == "NaN"
    assert sample_value("+Inf") == "+Inf"
    assert sample_value("-Inf") == "-Inf"
    assert sample_value("1e300") == 1e300


def test_instant_vector_is_cut_with_a_note():
    data = {"resultType": "vector",
            "result": [{"metric": {"i": str(n)}, "value": [NOW, str(n)]} for n in range(5)]}
    notes: list[str] = []
    out = shape_instant(data, Limits(max_series=3), notes)
    assert out["series_count"] == 5
    assert [s["metric"]["i"] for s in out["series"]] == ["0", "1", "2"]
    assert out["series"][0] == {"metric": {"i": "0"}, "value": 0, "at": "2024-05-01T12:00:00Z"}
    assert notes == ["showing 3 of 5 series; narrow the query with label matchers or aggregate it "
                     "(sum by (...), topk(...))"]


def test_scalar_result():
    out = shape_instant({"resultType": "scalar", "result": [NOW, "42"]}, Limits(), [])
    assert out == {"result_type": "scalar", "value": 42, "at": "2024-05-01T12:00:00Z"}


def test_matrix_summary_uses_every_point_and_values_are_thinned():
    values = [[NOW + i, str(i if i != 37 else 1000)] for i in range(100)]
    data = {"resultType": "matrix", "result": [{"metric": {"job": "a"}, "values": values},
                                               {"metric": {"job": "b"}, "values": values[:3]}]}
    notes: list[str] = []
    out = shape_matrix(data, Limits(max_points=200, max_total_points=40), notes)
    first = out["series"][0]
    assert first["summary"] == {"points": 100, "first_at": "2024-05-01T12:00:00Z",
                                "last_at": "2024-05-01T12:01:39Z", "last": 99, "min": 0, "max": 1000}
    assert len(first["values"]) == 20
    assert first["values"][0] == ["2024-05-01T12:00:00Z", 0]
    assert first["values"][-1] == ["2024-05-01T12:01:39Z", 99]
    assert len(out["series"][1]["values"]) == 3
    assert notes == ["values of 1 series thinned evenly to at most 20 points each (first and last kept; "
                     "summaries use every point); use a larger step or a shorter range for detail"]


def test_settings_are_checked():
    assert PromqlSettings.from_mapping({}, where="w") == PromqlSettings()
    assert PromqlSettings.from_mapping({"timeout_s": 2, "max_series": 5}, where="w").max_series == 5
    with pytest.raises(ValueError, match="unknown setting 'url' @ w"):
        PromqlSettings.from_mapping({"url": "x"}, where="w")
    with pytest.raises(ValueError, match="expected a positive number @ w.max_points"):
        PromqlSettings.from_mapping({"max_points": "many"}, where="w")
    with pytest.raises(ValueError, match="expected a whole number @ w.max_series"):
        PromqlSettings.from_mapping({"max_series": 2.5}, where="w")
