"""The decoder of streamed chunks (``openai_provider._json``): orjson where it gives what
``json.loads`` gives, ``json.loads`` for the rest — the same values and the same errors
as ``json.loads`` alone, for any text."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ongridd.llm import openai_provider
from ongridd.llm.openai_provider import _json, _json_stdlib, _Malformed


def _outcome(decode, raw):
    try:
        return "ok", repr(decode(raw))  # repr: nan, -0.0 and int versus float told apart
    except _Malformed as exc:
        return "malformed", str(exc)


_scalars = st.one_of(
    st.none(), st.booleans(), st.text(), st.floats(allow_nan=True, allow_infinity=True),
    st.integers(), st.integers(min_value=2**63 - 5, max_value=2**64 + 5),
    st.integers(min_value=-(2**64) - 5, max_value=-(2**63) + 5))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)


@settings(max_examples=600, deadline=None)
@given(_values, st.booleans(), st.booleans())
def test_any_value_decodes_as_json_loads_decodes_it(value, ascii_only, as_bytes):
    text = json.dumps(value, ensure_ascii=ascii_only)  # NaN and Infinity written as json writes them
    raw = text.encode("utf-8", "surrogatepass") if as_bytes else text
    assert _outcome(_json, raw) == _outcome(_json_stdlib, raw)


@settings(max_examples=600, deadline=None)
@given(st.text(alphabet='{}[]":,.-+eE0123456789 \\u\t\nabdfnrtxNIaIy\ufeff\ud800\udc00é', max_size=40),
       st.booleans())
def test_any_text_decodes_or_fails_as_json_loads_does(text, as_bytes):
    raw = text.encode("utf-8", "surrogatepass") if as_bytes else text
    assert _outcome(_json, raw) == _outcome(_json_stdlib, raw)


@pytest.mark.parametrize("raw", [
    '{"a": 1, "a": 2}', '"\\ud800"', '"\\udc00 and \\ud83d\\ude00"', '1e400', '-1e400', '5e-324',
    "NaN", '{"x": -Infinity}', "123456789012345678901234567890", "-9223372036854775809",
    "18446744073709551616", '"\\u0000"', '"a\tb"', "\ufeff{}", b"\xef\xbb\xbf{}", b'"\xff"',
    "[" * 2000 + "]" * 2000, '{"id": "call_12345678901234567890"}', "-0", "-0.0", "",
    *("[" * depth + "]" * depth for depth in (511, 512, 990, 994, 1000, 1024, 1025)),
    '{"error": ' + "[" * 1000 + "]" * 1000 + "}"])
def test_the_edges_decode_as_json_loads_decodes_them(raw):
    assert _outcome(_json, raw) == _outcome(_json_stdlib, raw)


def test_deep_text_decodes_as_json_loads_decodes_it_from_a_deep_stack_too():
    # json.loads nests as deep as the stack leaves room for; orjson always to 1,024
    def at_depth(frames: int, raw: str):
        return at_depth(frames - 1, raw) if frames else (_outcome(_json, raw), _outcome(_json_stdlib, raw))

    for depth in (400, 511, 700, 1000):
        raw = "[" * depth + "]" * depth
        fast, stdlib = at_depth(300, raw)
        assert fast == stdlib, depth


def test_a_usual_chunk_is_decoded_by_orjson(monkeypatch):
    # (the fast path is taken: json.loads is not called for a usual chunk)
    calls = []
    monkeypatch.setattr(openai_provider, "_json_stdlib", lambda raw: calls.append(raw))
    chunk = b'{"id": "c1", "choices": [{"index": 0, "delta": {"content": "h\\u00e9llo \\ud83d\\ude00"}}]}'
    assert _json(chunk)["choices"][0]["delta"]["content"] == "héllo 😀"
    assert calls == []
    _json(b'{"usage": {"prompt_tokens": 12345678901234567890}}')
    assert len(calls) == 1  # a long number: json.loads decides
    assert math.isinf(_json_stdlib(b"1e400"))
