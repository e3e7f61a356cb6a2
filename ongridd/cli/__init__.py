"""Command-line entry points ``ongridd`` and ``ongrid`` (DESIGN.md §15).

Each sub-command lives in its own module exposing ``add_parser(subparsers)``;
the parser's ``func(args) -> int`` is the exit code.  Exit codes: 0 ok, 1 the
command ran and found a problem, 2 usage, configuration or connection errors.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# (module, which program) — modules are imported lazily to keep start-up fast.
_ONGRID_COMMANDS = (
    "ongridd.cli.agents",
    "ongridd.cli.plugins_cmd",
    "ongridd.cli.fakellm",
    "ongridd.cli.client",
    "ongridd.cli.sessions",
    "ongridd.cli.marketplace_cmd",
    "ongridd.cli.demo",
)
_ONGRIDD_COMMANDS = ("ongridd.cli.serve",)


def _build(prog: str, modules: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in modules:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # not built yet
                continue
            raise
        mod.add_parser(sub)
    return parser


def _run(prog: str, modules: tuple[str, ...], argv: list[str] | None) -> int:
    parser = _build(prog, modules)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1


def ongrid_main(argv: list[str] | None = None) -> None:
    """Entry point of ``ongrid`` (client and tools)."""
    sys.exit(_run("ongrid", _ONGRID_COMMANDS, argv))


def ongridd_main(argv: list[str] | None = None) -> None:
    """Entry point of ``ongridd`` (the daemon)."""
    sys.exit(_run("ongridd", _ONGRIDD_COMMANDS, argv))
