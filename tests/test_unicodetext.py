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


def test_visible_text_drops_the_characters_that_make_a_label_read_otherwise():
    from ongridd.unicodetext import visible_text

    assert visible_text("check\u202eevorppa :noisiceD") == "checkevorppa :noisiceD"  # no override: read as it is
    assert visible_text("host\u2066_df\u2069\u200b\u200d\ufeff\u00ad") == "host_df"
    assert visible_text("磁盘检查 ✓ é") == "磁盘检查 ✓ é"  # letters of any script and symbols stay
    assert visible_text("plain ascii") == "plain ascii"
    assert visible_text("ok\u3164\u3164\uffa0\u115f\u1160\u2800\u034fnext") == "oknext"  # blank-looking letters
