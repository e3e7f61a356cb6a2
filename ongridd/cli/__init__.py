"""Command-line entry points ``ongridd`` and ``ongrid`` (docs/architecture.md §15.1).

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
    "ongridd.cli.changes",
    "ongridd.cli.marketplace_cmd",
    "ongridd.cli.demo",
    "ongridd.cli.eval",
)
_ONGRIDD_COMMANDS = ("ongridd.cli.serve",)


def _build(prog: str, modules: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog)
    if prog == "ongrid":  # global client options: before or after the sub-command
        from ongridd.cli.common import add_client_args

        add_client_args(parser, top_level=True)
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
