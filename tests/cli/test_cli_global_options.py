"""``--url``, ``--token`` and ``--token-file`` go before the sub-command, after it, and between
a two-level command and its action, and the value given wins wherever it was written."""

from __future__ import annotations

import pytest

from ongridd.cli import _ONGRID_COMMANDS, _build, _chosen_module


@pytest.mark.parametrize("argv", [
    ["--url", "http://h:1", "sessions", "list"],
    ["sessions", "--url", "http://h:1", "list"],
    ["sessions", "list", "--url", "http://h:1"],
    ["marketplace", "--url", "http://h:1", "install", "x"],
    ["changes", "--url", "http://h:1", "record", "--kind", "deploy", "--subject", "s", "--actor", "a"],
])
def test_the_url_is_taken_wherever_it_is_written(argv):
    args = _build("ongrid", _ONGRID_COMMANDS, _chosen_module(_ONGRID_COMMANDS, argv)).parse_args(argv)
    assert args.url == "http://h:1"


def test_a_later_value_wins_over_an_earlier_one():
    argv = ["sessions", "--token-file", "/a", "list", "--token-file", "/b"]
    args = _build("ongrid", _ONGRID_COMMANDS, _chosen_module(_ONGRID_COMMANDS, argv)).parse_args(argv)
    assert args.token_file == "/b"
