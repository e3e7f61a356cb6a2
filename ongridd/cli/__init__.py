"""Command-line entry points ``ongridd`` and ``ongrid`` (docs/architecture.md §15.1).

Each sub-command lives in its own module exposing ``add_parser(subparsers)``;
the parser's ``func(args) -> int`` is the exit code.  Exit codes: 0 ok, 1 the
command ran and found a problem, 2 usage, configuration or connection errors.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# (sub-command, module that registers it, one-line help), in the order ``--help`` lists them.
# Only the module of the sub-command being run is imported: ``ongrid --help`` and ``ongrid ask``
# never load the personas, the store, the server or the model SDK.  A module may register
# several sub-commands (``client``: ask, chat); the help texts must match the modules'
# own (tests/cli/test_cli_lazy.py checks it).
_ONGRID_COMMANDS = (
    ("agents", "ongridd.cli.agents", "list, show, validate personas; print the agent catalog"),
    ("plugins", "ongridd.cli.plugins_cmd", "plugins: list what is loaded and what each registered"),
    ("fake-llm", "ongridd.cli.fakellm",
     "run the scripted model server (an OpenAI-compatible test double, not a real model)"),
    ("ask", "ongridd.cli.client", "ask one question and print the final answer"),
    ("chat", "ongridd.cli.client", "interactive chat in the terminal (Ctrl-C stops a turn, or quits when none runs; Ctrl-D quits)"),
    ("sessions", "ongridd.cli.sessions", "list sessions; show one's tree, audit, messages or export from the running daemon"),
    ("changes", "ongridd.cli.changes", "record changes made outside Ongrid (deploys, config pushes, flags)"),
    ("marketplace", "ongridd.cli.marketplace_cmd", "marketplace: list, install and uninstall plugin packages"),
    ("demo", "ongridd.cli.demo", "run the main job on this host with the scripted model (or a real one)"),
    ("eval", "ongridd.cli.eval", "score the assistant on golden incidents (recorded tool results)"),
)
_ONGRIDD_COMMANDS = (
    ("serve", "ongridd.cli.serve", "run the daemon in the foreground (logs to stderr)"),
)


def _chosen_module(commands: tuple[tuple[str, str, str], ...], argv: list[str]) -> str | None:
    """The module of the first argument naming a sub-command, or None (``--help``, a typo)."""
    names = {name: module for name, module, _ in commands}
    skip = False
    for arg in argv:
        if skip:  # the value of a global option (``--url agents`` names no sub-command)
            skip = False
        elif arg == "--":
            return None
        elif arg in names:
            return names[arg]
        elif arg in _GLOBAL_VALUE_OPTIONS:
            skip = True
    return None


#: the global client options that take a value (``ongridd/cli/common.py``, ``add_client_args``)
_GLOBAL_VALUE_OPTIONS = frozenset({"--url", "--token", "--token-file"})


def _build(prog: str, commands: tuple[tuple[str, str, str], ...],
           chosen: str | None) -> argparse.ArgumentParser:
    """The parser; only ``chosen`` (a module name) is imported, the other sub-commands are
    listed with their help text and no arguments."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    if prog == "ongrid":  # global client options: before or after the sub-command
        from ongridd.cli.common import add_client_args

        add_client_args(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module, help_text in commands:
        if module != chosen:
            sub.add_parser(name, help=help_text)
        elif name == next(n for n, m, _ in commands if m == module):  # register the module once
            importlib.import_module(module).add_parser(sub)
    _describe_sub_commands(parser)
    return parser


class _Version(argparse.Action):
    """``--version``: ``PROG VERSION`` (the installed distribution's; read only when asked, off the
    start-up path of every other command)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object):
        super().__init__(option_strings, dest=dest, nargs=0, default=argparse.SUPPRESS,
                         help=str(kwargs.get("help") or ""))

    def __call__(self, parser: argparse.ArgumentParser, namespace: object, values: object,
                 option_string: str | None = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("ongridd")
        except PackageNotFoundError:  # run from a checkout that is not installed
            number = "unknown (not installed)"
        print(f"{parser.prog} {number}")  # on stdout, as argparse's own version action
        parser.exit()


def _describe_sub_commands(parser: argparse.ArgumentParser) -> None:
    """Give every sub-command parser without a description its one-line help, at every depth,
    so ``ongrid demo --help`` says what ``ongrid --help`` says of it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, child in action.choices.items():
                if child.description is None and helps.get(name):
                    child.description = helps[name]
                _describe_sub_commands(child)


#: options that take a time, which may be written relative with a leading dash ("-15m")
_TIME_OPTIONS = frozenset({"--at", "--since", "--until"})


def _join_dash_times(argv: list[str]) -> list[str]:
    """``argv`` with ``--at -15m`` (and ``--since``/``--until``) written as ``--at=-15m``: argparse
    takes a separate value that starts with a dash and is not a plain number for an option.  Only a
    dash followed by a digit is joined; nothing after ``--`` is touched."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return out + argv[i:]
        if (word in _TIME_OPTIONS and i + 1 < len(argv) and len(argv[i + 1]) > 1
                and argv[i + 1][0] == "-" and argv[i + 1][1].isdigit()):
            out.append(f"{word}={argv[i + 1]}")
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def _run(prog: str, commands: tuple[tuple[str, str, str], ...], argv: list[str] | None) -> int:
    argv = _join_dash_times(sys.argv[1:] if argv is None else argv)
    parser = _build(prog, commands, _chosen_module(commands, argv))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader of our output went away (`| head`): nothing more to say, and nothing to flush at exit
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1


def ongrid_main(argv: list[str] | None = None) -> None:
    """Entry point of ``ongrid`` (client and tools)."""
    sys.exit(_run("ongrid", _ONGRID_COMMANDS, argv))


def ongridd_main(argv: list[str] | None = None) -> None:
    """Entry point of ``ongridd`` (the daemon)."""
    sys.exit(_run("ongridd", _ONGRIDD_COMMANDS, argv))
