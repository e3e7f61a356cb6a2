"""Result truncation: head + tail around an exact marker, never splitting a
character (docs/architecture.md §8)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ongridd.tools.truncate import MIN_MAX_CHARS, truncate_result

MARKER = re.compile(r"\n\[truncated: ([\d,]+) chars → ([\d,]+); showing first ([\d,]+) and last ([\d,]+)\]\n")


def parts(out: str) -> tuple[str, tuple[int, ...], str]:
    matches = list(MARKER.finditer(out))
    assert matches, out[:200]
    m = matches[0]
    numbers = tuple(int(x.replace(",", "")) for x in m.groups())
    return out[:m.start()], numbers, out[m.end():]


def test_short_text_is_unchanged():
    assert truncate_result("abc", 200) == "abc"
    assert truncate_result("x" * 200, 200) == "x" * 200


def test_c21_six_megabytes_to_twenty_thousand():
    text = "é日" * 3_145_728
    out = truncate_result(text, 20_000)
    assert len(out) <= 20_000
    head, (original, kept, first, last), tail = parts(out)
    assert original == 6_291_456
    assert (len(head), len(tail)) == (first, last) and kept == first + last
    assert text.startswith(head) and text.endswith(tail)
    assert "[truncated: 6,291,456 chars → " in out
    assert kept > 19_800  # the marker costs little


def test_limit_too_small_is_refused():
    with pytest.raises(ValueError):
        truncate_result("x" * 1000, MIN_MAX_CHARS - 1)


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=0, max_size=3000), st.integers(min_value=MIN_MAX_CHARS, max_value=2500))
def test_property_bounded_prefix_suffix_and_honest_marker(text, max_chars):
    out = truncate_result(text, max_chars)
    assert len(out) <= max_chars
    if len(text) <= max_chars:
        assert out == text
        return
    head, (original, kept, first, last), tail = parts(out)
    assert original == len(text)
    assert text.startswith(head) and text.endswith(tail)
    assert (first, last, kept) == (len(head), len(tail), len(head) + len(tail))
    assert len(head) + len(tail) < len(text)


@pytest.mark.parametrize("unit", ["e\u0301", "👨\u200d👩\u200d👧", "🇫🇷", "👍🏽", "\r\n", "\ud83d\ude00", "각"])
def test_cuts_never_split_a_character_sequence(unit):
    for pad in range(7):
        text = "a" * pad + unit * 400
        out = truncate_result(text, 300)
        head, _, tail = parts(out)
        body = text[pad:]
        # the head ends and the tail starts on a whole unit
        assert (len(head) - pad) % len(unit) == 0 or len(head) < pad
        assert (len(tail)) % len(unit) == 0
        assert body.endswith(tail)
