"""valid_text: unpaired surrogates become U+FFFD; everything else is kept as it is."""

from __future__ import annotations

import json

import pytest

from ongridd.unicodetext import valid_text


@pytest.mark.parametrize("text,expected", [
    ("plain ascii", "plain ascii"),
    ("é ü 漢字 \U0001f600", "é ü 漢字 \U0001f600"),
    ("lone \ud800 high", "lone \ufffd high"),
    ("lone \udfff low", "lone \ufffd low"),
    ("reversed \udc00\ud83d pair", "reversed \ufffd\ufffd pair"),
    ("app-\udcff.log", "app-\ufffd.log"),  # a file name's undecodable byte (surrogateescape)
    (json.loads('"\\ud83d\\ude00 \\ud800"'), "\U0001f600 \ufffd"),  # JSON joins a valid pair; the lone one stays
    ("", ""),
])
def test_valid_text(text, expected):
    out = valid_text(text)
    assert out == expected
    out.encode("utf-8")  # never raises


def test_text_without_surrogates_is_the_same_object():
    text = "é" * 1000
    assert valid_text(text) is text
