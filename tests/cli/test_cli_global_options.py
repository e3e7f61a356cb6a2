"""``--url``, ``--token`` and ``--token-file`` go before the sub-command, after it, and between
a two-level command and its action, and the value given wins wherever it was written."""

from __future__ import annotations

import pytest

from ongridd.cli import _ONGRID_COMMANDS, _build, _chosen_module, _join_dash_times


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


@pytest.mark.parametrize(("argv", "parsed"), [
    (["changes", "record", "--at", "-15m"], ["changes", "record", "--at=-15m"]),
    (["changes", "list", "--since", "-1h30m", "--until", "-5m"], ["changes", "list", "--since=-1h30m", "--until=-5m"]),
    (["changes", "list", "--since", "-x"], ["changes", "list", "--since", "-x"]),  # not a time: argparse says so
    (["changes", "list", "--since", "-"], ["changes", "list", "--since", "-"]),
    (["ask", "--", "--at", "-15m"], ["ask", "--", "--at", "-15m"]),  # after --, words are left alone
    (["changes", "record", "--at"], ["changes", "record", "--at"]),
])
def test_a_relative_time_with_its_dash_is_joined_to_its_option(argv, parsed):
    assert _join_dash_times(argv) == parsed
