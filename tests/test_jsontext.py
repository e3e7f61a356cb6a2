"""JSON as RFC 8259 has it: NaN, Infinity and overflowing numbers are refused coming in and
never written going out."""

from __future__ import annotations

import json
import math

import pytest

from ongridd import jsontext
from ongridd.errors import ToolArgumentsError
from ongridd.tools.args import parse_arguments


@pytest.mark.parametrize("text, named", [
    ('{"a": NaN}', "NaN is not a JSON value"), ('[Infinity]', "Infinity is not"),
    ('{"a": [-Infinity]}', "-Infinity is not"), ('{"a": 1e999}', "the number 1e999 is beyond"),
    ('-1E400', "the number -1E400 is beyond"), ('[' + "9" * 500 + '.0]', "…"),
])
def test_loads_refuses_numbers_json_has_not_naming_them(text, named):
    with pytest.raises(jsontext.NonFiniteNumber) as refused:
        jsontext.loads(text)
    assert named in str(refused.value) and len(str(refused.value)) < 200
    assert isinstance(refused.value, ValueError)


def test_loads_reads_what_json_has():
    assert jsontext.loads(b'{"a": [1, -2.5e3, 1e308, "NaN", null, true]}') == {"a": [1, -2500.0, 1e308, "NaN", None, True]}
    with pytest.raises(json.JSONDecodeError):
        jsontext.loads("{")


def test_dumps_writes_null_for_a_non_finite_number_and_only_then():
    value = {"a": [1.5, math.nan, {"b": math.inf}], "c": (-math.inf, "x")}
    text = jsontext.dumps(value, ensure_ascii=False)
    assert json.loads(text, parse_constant=lambda name: pytest.fail(name)) == {
        "a": [1.5, None, {"b": None}], "c": [None, "x"]}
    assert jsontext.dumps({"a": 1.5, "é": "ü"}, ensure_ascii=False) == json.dumps({"a": 1.5, "é": "ü"}, ensure_ascii=False)
    with pytest.raises(TypeError):
        jsontext.dumps({"a": object()})


def test_tool_arguments_with_an_overflowing_number_are_refused():
    with pytest.raises(ToolArgumentsError, match="1e999 is beyond"):
        parse_arguments("disk_usage", '{"limit": 1e999}')
    with pytest.raises(ToolArgumentsError, match="NaN is not a JSON value"):
        parse_arguments("disk_usage", '{"limit": NaN}')


def test_a_dumper_writes_what_dumps_writes_with_the_same_arguments():
    dump = jsontext.dumper(ensure_ascii=False, default=str)
    values = [{"type": "final", "text": "é \u2028 ü", "n": 3, "f": 0.1},
              {"a": [1.5, math.nan, {"b": math.inf}], "c": (-math.inf, "x")}, {"when": object.__new__(object)}, "x", None]
    for value in values:
        assert dump(value) == jsontext.dumps(value, ensure_ascii=False, default=str)
    strict = jsontext.dumper(sort_keys=True, separators=(",", ":"))
    assert strict({"b": 1, "a": math.nan}) == '{"a":null,"b":1}'
    with pytest.raises(TypeError):
        strict({"a": object()})
    circular: list = []
    circular.append(circular)
    with pytest.raises((ValueError, RecursionError)):
        strict(circular)
