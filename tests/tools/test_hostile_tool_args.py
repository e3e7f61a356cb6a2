"""Hostile arguments and hostile schemas for the two-validator gate of tool calls.

``jsonschema_rs`` decides, ``jsonschema`` words the rejection.  Where the two
libraries read a keyword differently (regular expressions: ECMA 262 against
Python's ``re``; ``multipleOf``; another draft's ``$schema`` inside a schema)
the stricter verdict wins: arguments pass only when both accept.  Whatever
the arguments (deep, huge, lone surrogates) validation ends with the
arguments or a ToolArgumentsError, never another exception; a plugin schema
that could hang or crash validation is refused at registration with a
SchemaError.
"""

from __future__ import annotations

import json
import re
import socket
import threading

import jsonschema
import pytest
from jsonschema import _keywords as jsonschema_keywords
from jsonschema import _utils as jsonschema_utils

from ongridd.errors import ToolArgumentsError
from ongridd.tools import args as args_mod
from ongridd.tools.args import validate_arguments
from ongridd.tools.schema_check import check_schema


def one(field_schema: dict) -> dict:
    return {"type": "object", "properties": {"x": field_schema}}


def refused(schema: dict, args: dict) -> str:
    with pytest.raises(ToolArgumentsError) as info:
        validate_arguments("t", schema, args)
    return str(info.value)


# ---- the two engines disagree: the stricter wins --------------------------------------------

# (pattern, text): one of the two engines accepts, the other refuses
DISAGREEING = [
    (r"^\S+$", "a\u0085"),  # Python's \s has NEL (so \S refuses it); ECMA's does not
    (r"^\D$", "\u0663"),  # Python's \d has Arabic-Indic digits; ECMA's is ASCII
    (r"^\W$", "\u00e9"),
    (r"^\s$", "\ufeff"),  # ECMA's \s has the BOM; Python's does not
    (r"^[a-z]+$", "abc\n"),  # Python's $ matches before a final newline; ECMA's does not
    (r"^\w+$", "\u00e9t\u00e9"),
    (r"^\d+$", "\uff11\uff12"),
    (r"^.$", "\r"),
    (r"^a.b$", "a\u2028b"),
]


@pytest.mark.parametrize(("pattern", "text"), DISAGREEING)
def test_a_text_one_engine_refuses_for_a_pattern_is_refused(pattern, text) -> None:
    py = re.search(pattern, text) is not None
    fast = args_mod._fast_pattern(pattern)
    assert fast is not None and bool(fast.is_valid(text)) is not py  # they do disagree
    message = refused(one({"type": "string", "pattern": pattern}), {"x": text})
    assert "field 'x'" in message and "does not match" in message


def test_pattern_properties_and_names_are_judged_by_both_engines_too() -> None:
    schema = {"type": "object", "patternProperties": {r"^\D+$": {"type": "integer"}},
              "additionalProperties": False}
    assert validate_arguments("t", schema, {"abc": 1}) == {"abc": 1}
    refused(schema, {"\u0663": 1})  # jsonschema: not matched, so an additional property
    names = {"type": "object", "propertyNames": {"pattern": r"^\S+$"}}
    refused(names, {"a\u0085": 1})


def test_a_common_pattern_still_passes_on_the_fast_path() -> None:
    schema = one({"type": "string", "pattern": r"^[a-z][a-z0-9-]*\.service$"})
    assert validate_arguments("t", schema, {"x": "nginx.service"}) == {"x": "nginx.service"}
    refused(schema, {"x": "nginx.service\n"})


def test_multiple_of_a_fraction_is_refused_where_jsonschema_refuses() -> None:
    for divisor, value in ((0.1, 0.3), (0.01, 19.99), (1e-9, 1)):
        assert not jsonschema.Draft202012Validator({"multipleOf": divisor}).is_valid(value)
        message = refused(one({"multipleOf": divisor}), {"x": value})
        assert "is not a multiple of" in message
    assert validate_arguments("t", one({"multipleOf": 0.5}), {"x": 1.5}) == {"x": 1.5}


def test_a_nested_draft_07_schema_does_not_loosen_the_verdict() -> None:
    schema = {"type": "object", "$defs": {"s": {"type": "string"}}, "properties": {
        "x": {"$schema": "http://json-schema.org/draft-07/schema#", "$ref": "#/$defs/s", "maxLength": 1}}}
    refused(schema, {"x": "abc"})  # draft 7 ignores maxLength beside $ref; 2020-12 does not


@pytest.mark.parametrize(("schema", "good", "bad"), [
    ({"type": "integer"}, [1, 1.0, -0.0, 2**63, -(2**63) - 1], [True, 1.5, "1"]),
    ({"enum": [1, True]}, [1, True, 1.0], [0, False]),
    ({"enum": [0]}, [0, -0.0], [False]),
    ({"const": 1}, [1, 1.0], [True]),
    ({"const": [1]}, [[1], [1.0]], [[True]]),
    ({"type": "array", "uniqueItems": True}, [[1, True], [0, False], [[1], [True]], [{"a": 1}, {"a": True}]],
     [[1, 1.0], [0.0, -0.0], [2**70, 2**70], [{"a": [1]}, {"a": [1.0]}]]),
    ({"type": "string", "minLength": 2}, ["ab", "\U0001f600\U0001f600"], ["\U0001f600", json.loads('"\\ud800"')]),
    ({"type": "string", "maxLength": 1}, ["\U0001f600", json.loads('"\\ud800"')],
     [json.loads('"\\ud800\\udfff!"'), json.loads('"\\udfff\\ud800"')]),
    ({"type": "array", "maxItems": 1, "minItems": 1}, [[1]], [[], [1, 2]]),
])
def test_edge_values_get_jsonschema_s_verdict(schema, good, bad) -> None:
    python = jsonschema.Draft202012Validator(schema)
    for value in good:
        assert python.is_valid(value), value
        assert validate_arguments("t", one(schema), {"x": value}) == {"x": value}
    for value in bad:
        assert not python.is_valid(value), value
        refused(one(schema), {"x": value})


# ---- huge and deep arguments: bounded, never a crash -----------------------------------------


def test_unique_items_over_many_objects_is_never_checked_pairwise(monkeypatch) -> None:
    def pairwise(_container):
        raise AssertionError("jsonschema's quadratic uniq was run")

    monkeypatch.setattr(jsonschema_keywords, "uniq", pairwise)
    schema = one({"type": "array", "uniqueItems": True, "maxItems": 3})
    message = refused(schema, {"x": [{"a": i} for i in range(3000)]})
    assert "field 'x'" in message
    unique = one({"type": "array", "uniqueItems": True, "items": {"type": "object"}, "maxItems": 5,
                  "contains": {"pattern": "x"}})  # a pattern-bearing schema: jsonschema judges as well
    refused(unique, {"x": [{"a": 1}, {"a": 1.0}]})
    assert validate_arguments("t", unique, {"x": [{"a": 1}, {"a": True}]}) == {"x": [{"a": 1}, {"a": True}]}


def test_a_rejection_of_huge_arguments_reads_only_a_bounded_number_of_errors(monkeypatch) -> None:
    calls = 0
    real = args_mod._describe

    def counting(err):
        nonlocal calls
        calls += 1
        return real(err)

    monkeypatch.setattr(args_mod, "_describe", counting)
    schema = one({"type": "array", "items": {"type": "string"}, "maxItems": 3})
    for n in (2_000, 200_000):
        message = refused(schema, {"x": list(range(n))})
        assert "field 'x" in message and "more" in message
    assert calls <= 2 * args_mod.ERRORS_READ_MAX


def test_a_huge_string_never_reaches_python_s_re(monkeypatch) -> None:
    limit = args_mod.PY_REGEX_MAX_CHARS

    class Guard:
        def __getattr__(self, name):
            real = getattr(re, name)
            if name not in ("search", "match", "fullmatch"):
                return real

            def guarded(pattern, text, *a, **kw):
                assert len(text) <= limit, f"re.{name} on {len(text):,} characters"
                return real(pattern, text, *a, **kw)
            return guarded

    monkeypatch.setattr(jsonschema_keywords, "re", Guard())
    monkeypatch.setattr(jsonschema_utils, "re", Guard())
    monkeypatch.setattr(args_mod, "re", Guard())
    text = "a" * 5_000_000
    assert validate_arguments("t", one({"type": "string", "pattern": "^a+$"}), {"x": text}) == {"x": text}
    assert "does not match" in refused(one({"type": "string", "pattern": "a.*b"}), {"x": text})
    assert "does not match" in refused(one({"type": "string", "pattern": "a$"}), {"x": text + "\n"})
    # a pattern only Python reads: a string too long for re is refused, not passed
    python_only = one({"type": "string", "pattern": r"^a+\Z"})
    assert args_mod._fast_validator_for(args_mod.schema_key(python_only)) is None
    assert "too long" in refused(python_only, {"x": text})
    assert validate_arguments("t", python_only, {"x": "aaa"}) == {"x": "aaa"}
    # property names: propertyNames is matched as any string; patternProperties refuses a huge name
    long_key = "k" * 5_000
    assert validate_arguments("t", {"type": "object", "propertyNames": {"pattern": "^k+$"}},
                              {long_key: 1}) == {long_key: 1}
    by_regex = {"type": "object", "patternProperties": {"^k": {"type": "integer"}}, "additionalProperties": False}
    assert "property name" in refused(by_regex, {long_key: 1})
    assert validate_arguments("t", by_regex, {"kk": 1}) == {"kk": 1}


def test_deep_arguments_end_in_a_verdict_never_a_recursion_error() -> None:
    for depth in (900, 950):
        nested = json.loads('{"a":' * depth + "1" + "}" * depth)
        assert validate_arguments("t", {"type": "object"}, nested) == nested
        shallow = {"type": "object", "properties": {"a": {"pattern": "x"}}}  # jsonschema judges too, shallowly
        assert validate_arguments("t", shallow, nested) == nested
        for schema in ({"type": "object", "additionalProperties": {"$ref": "#"}, "maxProperties": 0},
                       {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["b"]},
                       {"type": "object", "properties": {"a": {"const": 1}}},
                       {"type": "object", "additionalProperties": {"$ref": "#"}, "patternProperties": {"^b": {}}}):
            refused(schema, nested)
        arrays = json.loads("[" * depth + "]" * depth)
        recursive = {"type": "object", "properties": {"x": {"items": {"$ref": "#/properties/x"}, "pattern": "^[a-z]*$"}}}
        # a lone surrogate at the bottom: jsonschema alone judges, and cannot go that deep
        bottom = json.loads("[" * depth + '"\\ud800"' + "]" * depth)
        assert args_mod._fast_is_valid(args_mod._validators(recursive)[1], {"x": bottom}) is None
        assert "nested too deeply" in refused(recursive, {"x": bottom})
        refused({"type": "object", "properties": {"x": {"items": {"$ref": "#/properties/x"}, "maxItems": 0}}},
                {"x": arrays})


def test_schemas_that_bypassed_registration_fail_closed() -> None:
    """validate_arguments on a schema check_schema refuses: a ToolArgumentsError, not a crash."""
    for schema in (one({"type": "string", "pattern": "["}),
                   one({"type": "string", "pattern": r"\p{L}"}),
                   {"type": "object", "$ref": "#/$defs/nope", "required": ["x"]},
                   {"type": "object", "$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a",
                    "required": ["x"]}):
        for value in ({"x": "\u00e9"}, {}):
            try:
                validate_arguments("t", schema, value)
            except ToolArgumentsError:
                pass


# ---- hostile plugin schemas: refused at registration ---------------------------------------


@pytest.mark.parametrize("pattern", [r"^(a+)+$", r"(\w+\s?)+$", r"(a|aa)+b", r"([a-z0-9]+-?)*@", r"(a*)*b",
                                     r"(.*a){10}", r"^(\d+)*$", r"(\s*,\s*)*$", r"^([a-zA-Z0-9]+[._-]?)*$"])
def test_a_pattern_python_may_backtrack_on_for_ever_is_refused(pattern) -> None:
    with pytest.raises(jsonschema.SchemaError, match="exponential time"):
        check_schema(one({"type": "string", "pattern": pattern}))
    with pytest.raises(jsonschema.SchemaError, match="exponential time"):
        check_schema({"type": "object", "patternProperties": {pattern: {}}})


@pytest.mark.parametrize("pattern", [r"^[a-z]+(-[a-z]+)*$", r"^([a-z]+\.)+[a-z]+$", r"^(/[^/]+)*$",
                                     r"^[\w.+-]+@[\w-]+(\.[\w-]+)+$", r"^v?\d+(\.\d+)*$", r"(.|\n)*",
                                     r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", r"^(\d+\.){3}\d+$"])
def test_common_patterns_are_accepted(pattern) -> None:
    check_schema(one({"type": "string", "pattern": pattern}))


@pytest.mark.parametrize("pattern", ["[", r"\p{L}", "(?<n>a)", "a(?i)b", "*", "a\\", r"(?<=a+)b"])
def test_a_pattern_python_cannot_compile_is_refused(pattern) -> None:
    with pytest.raises(jsonschema.SchemaError):
        check_schema(one({"type": "string", "pattern": pattern}))


def test_a_property_named_pattern_is_not_taken_for_the_keyword() -> None:
    check_schema({"type": "object", "properties": {"pattern": {"type": "string", "maxLength": 9}},
                  "required": ["pattern"], "examples": [{"pattern": "("}]})
    schema = {"type": "object", "properties": {"pattern": {"type": "string"}}}
    assert not args_mod._needs_both(schema)  # no regex keyword: the fast path alone


def test_unresolvable_and_cyclic_refs_are_refused() -> None:
    for schema, match in (
        ({"type": "object", "$ref": "#/$defs/nope"}, "does not exist"),
        ({"type": "object", "$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "cycle"),
        ({"type": "object", "$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"not": {"$ref": "#/$defs/a"}}},
          "properties": {"x": {"$ref": "#/$defs/a"}}}, "cycle"),
        ({"type": "object", "$ref": "#"}, "cycle"),
    ):
        with pytest.raises(jsonschema.SchemaError, match=match):
            check_schema(schema)
    # recursion through a value's parts is fine
    check_schema({"type": "object", "$defs": {"node": {"type": "object", "properties": {
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}, "properties": {"root": {"$ref": "#/$defs/node"}}})


def test_a_remote_ref_is_refused_without_being_fetched() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    hits: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            hits.append("connect")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        schema = {"type": "object", "properties": {"x": {"$ref": f"http://127.0.0.1:{port}/s.json"}}}
        with pytest.raises(jsonschema.SchemaError):
            check_schema(schema)
        refused(schema, {"x": 1})
    finally:
        stop.set()
        thread.join(2)
        server.close()
    assert hits == []


def test_huge_deep_and_self_containing_schemas_get_a_schema_error() -> None:
    deep: dict = {"type": "object"}
    for _ in range(950):
        deep = {"type": "object", "properties": {"a": deep}}
    with pytest.raises(jsonschema.SchemaError, match="deep"):
        check_schema(deep)
    less: dict = {"type": "object"}
    for _ in range(100):
        less = {"type": "object", "properties": {"a": less}}
    with pytest.raises(jsonschema.SchemaError, match="deeper than"):
        check_schema(less)
    loop: dict = {"type": "object", "properties": {}}
    loop["properties"]["self"] = loop
    with pytest.raises(jsonschema.SchemaError, match="JSON"):
        check_schema(loop)
    huge = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 100}
                                             for i in range(5_000)}}
    with pytest.raises(jsonschema.SchemaError, match="too large"):
        check_schema(huge)
