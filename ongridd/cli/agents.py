"""``ongrid agents list|show|validate|catalog`` (docs/architecture.md §15.1).

Roots: the built-in ``agents/`` folder, then every ``--agents-dir`` in the
order given (a later root overrides an earlier one by name).  Results go to
stdout, every warning to stderr.  No command prints a traceback: an
unexpected failure is one ``error:`` line and exit code 2.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TextIO

from ongridd.personas.origin import persona_origin, persona_warnings
from ongridd.personas.parse import persona_to_text
from ongridd.personas.prompt import agent_catalog
from ongridd.personas.registry import AgentRegistry, LoadReport, builtin_agents_dir


def known_tool_names() -> Collection[str] | None:
    """Registered tool names for unknown-tool warnings, or ``None`` to skip that check.

    Asks ``ongridd.plugins.manager.known_tool_names(config)`` when that module
    and function exist (config from the default location); any failure there
    is reported on stderr and the check is skipped.
    """
    try:
        mod = importlib.import_module("ongridd.plugins.manager")
    except ModuleNotFoundError as exc:
        if exc.name in ("ongridd.plugins.manager", "ongridd.plugins"):
            return None
        _print(f"warning: cannot load the plugin manager ({exc}); tool names are not checked", sys.stderr)
        return None
    except Exception as exc:  # noqa: BLE001
        _print(f"warning: cannot load the plugin manager ({exc}); tool names are not checked", sys.stderr)
        return None
    fn = getattr(mod, "known_tool_names", None)
    if fn is None:
        return None
    try:
        from ongridd.config import load_config

        return frozenset(fn(load_config()))
    except Exception as exc:  # noqa: BLE001
        _print(f"warning: cannot list the registered tools ({exc}); tool names are not checked", sys.stderr)
        return None


def _print(text: str, stream: TextIO) -> None:
    try:
        stream.write(text + "\n")
    except UnicodeEncodeError:
        enc = stream.encoding or "ascii"
        stream.write(text.encode(enc, "backslashreplace").decode(enc, "replace") + "\n")


def _guarded(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except (KeyboardInterrupt, BrokenPipeError):
            raise
        except Exception as exc:  # noqa: BLE001 — the contract: no traceback, ever
            _print(f"error: {type(exc).__name__}: {exc}", sys.stderr)
            return 2

    return run


def _load(args: argparse.Namespace) -> tuple[AgentRegistry, LoadReport]:
    roots = [Path(d) for d in (args.agents_dir or [])]
    for root in roots:
        if not root.exists():
            _print(f"{root}: no such folder (ignored)", sys.stderr)
    registry = AgentRegistry(builtin_agents_dir())
    report = registry.load(roots, known_tool_names())
    for warning in report.warnings:
        _print(warning, sys.stderr)
    return registry, report


def _cmd_list(args: argparse.Namespace) -> int:
    registry, report = _load(args)
    personas = list(registry.snapshot().values())
    if args.json:  # the items of GET /api/agents: origin and the warnings about each file too
        items = [p.to_dict() | {"origin": persona_origin(p.source, registry.builtin_root),
                                "warnings": persona_warnings(p.source, report.warnings)} for p in personas]
        _print(json.dumps(items, ensure_ascii=False, indent=2), sys.stdout)
        return 0
    if not personas:
        _print("no personas found", sys.stdout)
        return 0
    width = max(len(p.name) for p in personas)
    _print(f"{'NAME':<{width}}  {'MODE':<9}  TURNS  BUDGET  TOOLS  DESCRIPTION", sys.stdout)
    for p in personas:
        budget = "-" if p.tool_budget is None else str(p.tool_budget)
        _print(f"{p.name:<{width}}  {p.permission_mode:<9}  {p.max_turns:>5}  {budget:>6}  {len(p.tools):>5}  "
               f"{p.description}", sys.stdout)
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    registry, _report = _load(args)
    persona = registry.by_name(args.name)
    if persona is None:
        known = ", ".join(registry.names()) or "none"
        _print(f"no persona named {args.name!r}; known: {known}", sys.stderr)
        return 1
    if args.json:
        data: dict[str, Any] = persona.to_dict()
        data["body"] = persona.body
        _print(json.dumps(data, ensure_ascii=False, indent=2), sys.stdout)
    else:
        _print(f"# source: {persona.source}", sys.stdout)
        _print(persona_to_text(persona).rstrip("\n"), sys.stdout)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    known = known_tool_names()
    builtin = AgentRegistry(builtin_agents_dir())
    builtin.load([])
    failed = False
    loaded = skipped = 0
    for raw in args.paths:
        path = Path(raw)
        if not path.exists():
            _print(f"{path}: no such file or folder", sys.stderr)
            failed = True
            continue
        registry = AgentRegistry()
        report = registry.load([path], known)
        loaded += report.loaded
        skipped += report.skipped
        for warning in report.warnings:
            _print(warning, sys.stderr)
        for persona in registry.snapshot().values():
            note = ""
            if builtin.by_name(persona.name) is not None and Path(persona.source).resolve() != Path(
                    builtin.by_name(persona.name).source).resolve():
                note = " (overrides the built-in persona)"
            _print(f"ok  {persona.name}  {persona.source}{note}", sys.stdout)
    _print(f"{loaded} loaded, {skipped} skipped", sys.stdout)
    return 1 if failed or skipped else 0


def _cmd_catalog(args: argparse.Namespace) -> int:
    registry, _report = _load(args)
    catalog = agent_catalog(registry.snapshot().values())
    if catalog:
        _print(catalog, sys.stdout)
    return 0


def add_parser(subparsers: Any) -> None:
    """Add ``agents`` and its sub-commands to the ``ongrid`` parser."""
    parser = subparsers.add_parser("agents", help="list, show, validate personas; print the agent catalog",
                                   description="List, show, validate personas and print the agent catalog (built-in agents/ plus --agents-dir folders).")
    sub = parser.add_subparsers(dest="agents_command", metavar="SUBCOMMAND")
    sub.required = True

    def agents_dir(p: argparse.ArgumentParser) -> None:
        p.add_argument("--agents-dir", action="append", metavar="DIR", default=[],
                       help="a folder of persona files read after the built-in ones (repeatable)")

    p = sub.add_parser("list", help="list the personas (JSON with --json)")
    p.add_argument("--json", action="store_true", help="print a JSON list with every key and the source")
    agents_dir(p)
    p.set_defaults(func=_guarded(_cmd_list))

    p = sub.add_parser("show", help="print one persona as a persona file (or JSON)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--json", action="store_true", help="print its keys, source and body as JSON")
    agents_dir(p)
    p.set_defaults(func=_guarded(_cmd_show))

    p = sub.add_parser("validate", help="check persona files or folders; exit 1 if any file is skipped")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.set_defaults(func=_guarded(_cmd_validate))

    p = sub.add_parser("catalog", help="print the agent catalog the coordinator sees")
    agents_dir(p)
    p.set_defaults(func=_guarded(_cmd_catalog))
