"""The CLI's lazy sub-command loading: ``ongrid --help`` lists every sub-command without
importing the heavy layers, and the static table matches what the modules register."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from ongridd import cli

HEAVY = ("trio", "sqlalchemy", "openai", "quart", "quart_trio", "hypercorn", "structlog",
         "ruamel", "pluggy", "jsonschema", "ongridd.personas", "ongridd.store", "ongridd.runtime",
         "ongridd.server", "ongridd.plugins", "ongridd.llm", "ongridd.kernel")

_WRAPPER = """
import json, sys
from ongridd.cli import {entry}
try:
    {entry}({argv!r})
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _run(entry: str, argv: list[str]) -> tuple[str, set[str]]:
    proc = subprocess.run([sys.executable, "-c", _WRAPPER.format(entry=entry, argv=argv)],
                          capture_output=True, text=True, timeout=60)
    modules = set(json.loads(proc.stderr.strip().splitlines()[-1]))
    return proc.stdout, modules


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_ongrid_help_lists_every_command_without_heavy_imports():
    out, modules = _run("ongrid_main", ["--help"])
    for name, _module, _help in cli._ONGRID_COMMANDS:
        assert f"    {name} " in out, name
    assert _heavy(modules) == []
    loaded = [m for _, m, _ in cli._ONGRID_COMMANDS if m in modules]
    assert loaded == []


def test_ongridd_help_does_not_import_the_daemon():
    out, modules = _run("ongridd_main", ["--help"])
    assert "serve" in out
    assert _heavy(modules) == []
    assert "ongridd.cli.serve" not in modules


def test_sub_command_imports_only_its_own_module():
    out, modules = _run("ongrid_main", ["sessions", "--help"])
    assert "usage: ongrid sessions" in out
    assert "ongridd.cli.sessions" in modules
    others = {m for _, m, _ in cli._ONGRID_COMMANDS} - {"ongridd.cli.sessions"}
    assert not others & modules
    out, modules = _run("ongrid_main", ["agents", "--help"])
    assert "usage: ongrid agents" in out and "ongridd.personas" in modules


def test_table_matches_what_the_modules_register():
    for table in (cli._ONGRID_COMMANDS, cli._ONGRIDD_COMMANDS):
        expected = [(name, help_text) for name, _, help_text in table]
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        for module in dict.fromkeys(m for _, m, _ in table):
            importlib.import_module(module).add_parser(sub)
        registered = [(a.dest, a.help) for a in sub._choices_actions]
        assert registered == expected


def test_a_global_option_value_is_not_taken_for_a_sub_command():
    assert cli._chosen_module(cli._ONGRID_COMMANDS, ["--url", "agents", "ask", "hi"]) == "ongridd.cli.client"
    assert cli._chosen_module(cli._ONGRID_COMMANDS, ["--url=http://x", "sessions", "list"]) == "ongridd.cli.sessions"
    assert cli._chosen_module(cli._ONGRID_COMMANDS, ["--help"]) is None
    out, modules = _run("ongrid_main", ["--token-file", "demo", "changes", "--help"])
    assert "usage: ongrid changes" in out and "ongridd.cli.changes" in modules and "ongridd.cli.demo" not in modules


def test_every_sub_command_help_says_what_it_does(capsys):
    """``ongrid X --help`` (and ``ongrid X Y --help``) says what X does: its own description, else
    the line ``ongrid --help`` lists for it."""
    for name, _module, help_text in cli._ONGRID_COMMANDS:
        try:
            cli.ongrid_main([name, "--help"])
        except SystemExit:
            pass
        out = capsys.readouterr().out
        described = out.split("\n\n")[1]  # after the usage lines, before the arguments
        assert not described.startswith(("options:", "positional arguments:")), (name, out)
        if name in ("demo", "chat", "ask", "sessions", "changes", "marketplace"):  # no description of their own
            assert help_text in " ".join(out.split()), (name, out)
    try:
        cli.ongrid_main(["sessions", "tree", "--help"])
    except SystemExit:
        pass
    assert "the session tree (coordinator → workers → reviewer)" in capsys.readouterr().out


@pytest.mark.parametrize("prog", ["ongrid", "ongridd"])
def test_version_prints_the_installed_version(prog, capsys):
    from importlib.metadata import version

    from ongridd.cli import ongrid_main, ongridd_main

    with pytest.raises(SystemExit) as done:
        (ongrid_main if prog == "ongrid" else ongridd_main)(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"{prog} {version('ongridd')}"
