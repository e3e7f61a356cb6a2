"""``ongrid agents list|show|validate|catalog`` (docs/architecture.md §15.1).

Roots: the built-in ``agents/`` folder, the persona paths plugins register
(including marketplace plugins in ``<state_dir>/plugins``), the daemon's
agents folders (of ``--config``/``--state-dir``, else of the configuration
the daemon would read here: ``/etc/ongrid/ongrid.yaml`` when present, and
``./var/agents``), then every ``--agents-dir`` in the order given (a later root overrides an earlier one by name).  Results go to
stdout, every warning to stderr.  No command prints a traceback: an
unexpected failure is one ``error:`` line and exit code 2.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TextIO

from ongridd.personas.origin import files_without_persona, persona_origin, persona_warnings
from ongridd.personas.parse import persona_to_text
from ongridd.personas.prompt import agent_catalog
from ongridd.personas.registry import AgentRegistry, LoadReport, builtin_agents_dir


def _explicit(args: argparse.Namespace | None) -> bool:
    return args is not None and bool(getattr(args, "config", None) or getattr(args, "state_dir", None))


def plugin_contributions(args: argparse.Namespace | None = None) -> Any:
    """What the plugins register (tools, persona paths, reports) for the
    daemon's configuration (``--config`` / ``--state-dir``, else the default
    location), including marketplace plugins installed in
    ``<state_dir>/plugins``; collected once per ``args``.

    Returns ``None`` when the plugin manager cannot run: the reason goes to
    stderr and tool names are then not checked.  With ``--config`` or
    ``--state-dir`` given, a configuration error raises (exit 2)."""
    cached = getattr(args, "_contributions", None) if args is not None else None
    if cached is not None:
        return cached
    try:
        from ongridd.config import load_config
        from ongridd.plugins.manager import collect

        overrides: dict[tuple[str, ...], Any] | None = (
            {("state_dir",): args.state_dir} if args is not None and getattr(args, "state_dir", None) else None)
        config = load_config(getattr(args, "config", None) if args is not None else None, overrides=overrides)
        contributions = collect(config)
    except Exception as exc:  # noqa: BLE001
        if _explicit(args):
            raise
        _print(f"warning: cannot list the registered tools ({exc}); tool names are not checked", sys.stderr)
        return None
    if args is not None:
        args._contributions = contributions
        args._config = config
    return contributions


def known_tool_names(args: argparse.Namespace | None = None) -> Collection[str] | None:
    """Registered tool names (plugins' tools and the control tools) for
    unknown-tool warnings, or ``None`` to skip that check."""
    from ongridd.tools.spec import CONTROL_TOOL_NAMES

    contributions = plugin_contributions(args)
    if contributions is None:
        return None
    return frozenset(contributions.tools) | frozenset(CONTROL_TOOL_NAMES)


def _print(text: str, stream: TextIO) -> None:
    """``text`` and a line break on ``stream``, fit for a terminal (:func:`~ongridd.cli.termui.safe_text`:
    a persona file's escape sequences, C1 or bidi controls are not passed on; JSON comes here
    through :func:`_json_text`, its strings' controls escaped)."""
    from ongridd.cli.termui import safe_text

    text = safe_text(text)
    try:
        stream.write(text + "\n")
    except UnicodeEncodeError:
        enc = stream.encoding or "ascii"
        stream.write(text.encode(enc, "backslashreplace").decode(enc, "replace") + "\n")


def _json_text(value: object) -> str:
    """``value`` as indented JSON with the characters a terminal acts on escaped (the same JSON)."""
    from ongridd.cli.termui import escape_controls

    return escape_controls(json.dumps(value, ensure_ascii=False, indent=2))


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
    known = known_tool_names(args)
    contributions = getattr(args, "_contributions", None)
    extra = contributions.persona_paths if contributions is not None else ()
    if getattr(args, "_config", None) is not None:  # the daemon's own agents folders first, as it reads them
        roots = [*args._config.agent_user_roots, *roots]
    registry = AgentRegistry(builtin_agents_dir(), extra_paths=extra)
    report = registry.load(roots, known)
    for warning in report.warnings:
        _print(warning, sys.stderr)
    return registry, report


def _no_folder_named(args: argparse.Namespace) -> bool:
    """Whether no --config, --state-dir or --agents-dir was given (the defaults were read)."""
    return not (getattr(args, "config", None) or getattr(args, "agents_dir", None) or getattr(args, "state_dir", None))


def _own_folders_hint() -> str:
    return ("personas in your own folders: pass the daemon's --state-dir DIR or --config FILE, or --agents-dir DIR; "
            "without them ./var is read")


def _cmd_list(args: argparse.Namespace) -> int:
    registry, report = _load(args)
    personas = list(registry.snapshot().values())
    if args.json:  # the items of GET /api/agents: origin and the warnings about each file too
        items = [p.to_dict() | {"origin": persona_origin(p.source, registry.builtin_root, _plugin_reports(args)),
                                "warnings": persona_warnings(p.source, report.warnings)} for p in personas]
        _print(_json_text(items), sys.stdout)
        return 0
    config = getattr(args, "_config", None)
    if _no_folder_named(args) and not any(Path(root).is_dir() for root in (config.agent_user_roots if config else ())):
        # only the built-in and the plugins' personas: say where the others would come from
        _print(f"no agents folder found here; {_own_folders_hint()}", sys.stderr)
    if not personas:
        _print("no personas found", sys.stdout)
        return 0
    width = max(len(p.name) for p in personas)
    origins = [persona_origin(p.source, registry.builtin_root, _plugin_reports(args)) for p in personas]
    owidth = max(6, *(len(o) for o in origins))
    _print(f"{'NAME':<{width}}  {'ORIGIN':<{owidth}}  {'MODE':<9}  TURNS  BUDGET  TOOLS  DESCRIPTION", sys.stdout)
    for p, origin in zip(personas, origins):
        budget = "-" if p.tool_budget is None else str(p.tool_budget)
        _print(f"{p.name:<{width}}  {origin:<{owidth}}  {p.permission_mode:<9}  {p.max_turns:>5}  {budget:>6}  "
               f"{len(p.tools):>5}  {p.description}", sys.stdout)
    return 0


def _plugin_reports(args: argparse.Namespace) -> tuple[Any, ...]:
    contributions = getattr(args, "_contributions", None)
    return tuple(contributions.report) if contributions is not None else ()


def tool_problems(persona: Any, tools: Any, known: Collection[str] | None) -> list[str]:
    """Lines about ``persona``'s listed tools: which are unknown (with the
    closest real name) and which its ``permission_mode`` or
    ``disallowed_tools`` drop from its bag.  ``tools``: the plugins'
    ToolRegistry (``None`` skips the drop check)."""
    from ongridd.personas.parse import did_you_mean
    from ongridd.tools.bag import worker_bag
    from ongridd.tools.spec import CONTROL_TOOL_NAMES

    lines: list[str] = []
    listed = [t for t in persona.tools if t not in CONTROL_TOOL_NAMES]
    if known is not None:
        for name in listed:
            if name not in known:
                lines.append(f"unknown tool {name!r}{did_you_mean(name, known)}")
    if tools is not None:
        bag = worker_bag(persona, tools).tools
        for name in listed:
            if name in tools and name not in bag:
                why = (f"permission_mode {persona.permission_mode!r} (it may change things)"
                       if persona.permission_mode == "read-only" else "disallowed_tools")
                lines.append(f"tool {name!r} is dropped by {why}")
    return lines


def _cmd_show(args: argparse.Namespace) -> int:
    registry, _report = _load(args)
    persona = registry.by_name(args.name)
    if persona is None:
        known = ", ".join(registry.names()) or "none"
        hint = f" ({_own_folders_hint()})" if _no_folder_named(args) else ""
        _print(f"no persona named {args.name!r}; known: {known}{hint}", sys.stderr)
        return 1
    if args.json:
        data: dict[str, Any] = persona.to_dict()
        data["body"] = persona.body
        _print(_json_text(data), sys.stdout)
    else:
        _print(f"# source: {persona.source}", sys.stdout)
        _print(persona_to_text(persona).rstrip("\n"), sys.stdout)
    return 0


def _same_bytes(a: str, b: str) -> bool:
    """Whether files ``a`` and ``b`` hold the same bytes (False when either cannot be read)."""
    try:
        return Path(a).read_bytes() == Path(b).read_bytes()
    except OSError:
        return False


def _cmd_validate(args: argparse.Namespace) -> int:
    known = known_tool_names(args)
    contributions = getattr(args, "_contributions", None)
    problems = warned = 0
    builtin = AgentRegistry(builtin_agents_dir())
    builtin.load([])
    loaded = skipped = missing = 0
    as_json = getattr(args, "json", False)
    rows: list[dict[str, Any]] = []  # --json: one per file, as the text rows say it
    missing_paths: list[str] = []
    paths = args.paths
    if not paths:  # what the daemon reads: the built-in personas, the plugins' and its agents folders that exist
        config = getattr(args, "_config", None)
        paths = [str(builtin_agents_dir()), *(str(p) for p in (contributions.persona_paths if contributions else ())),
                 *(str(root) for root in (config.agent_user_roots if config is not None else ()) if Path(root).exists())]
        _print(f"validating {', '.join(paths)}", sys.stderr)
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            _print(f"{path}: no such file or folder", sys.stderr)
            missing += 1
            missing_paths.append(str(path))
            continue
        registry = AgentRegistry()
        report = registry.load([path], known)
        loaded += report.loaded
        skipped += report.skipped
        personas = list(registry.snapshot().values())
        tool_lines = {p.source: tool_problems(p, contributions.tools if contributions is not None else None, known)
                      for p in personas}
        file_lines: dict[str, list[str]] = {p.source: [] for p in personas}
        for warning in report.warnings:  # a tool problem is said once, on stdout under its persona
            if any(warning.startswith(source) and any(line in warning for line in lines)
                   for source, lines in tool_lines.items()):
                continue
            _print(warning, sys.stderr)
            source = next((s for s in file_lines if warning.startswith(f"{s}:")), None)
            if source is not None:  # a warning about a file that loaded (a duplicate tool, an unknown key)
                file_lines[source].append(warning[len(source) + 1:].strip())
        for persona in personas:
            note = ""
            shadowed = builtin.by_name(persona.name)
            if shadowed is not None and Path(persona.source).resolve() != Path(shadowed.source).resolve():
                note = (" (identical to the built-in persona)" if _same_bytes(persona.source, shadowed.source)
                        else " (overrides the built-in persona)")
            lines = tool_lines[persona.source]
            problems += len(lines)
            warned += len(file_lines[persona.source])
            # tool problems and the file's warnings: the persona loads (without what it cannot have)
            flagged = lines or file_lines[persona.source]
            rows.append({"status": "warn" if flagged else "ok", "path": persona.source, "persona": persona.name,
                         "note": note.strip(" ()") or None, "tool_problems": lines,
                         "warnings": file_lines[persona.source]})
            if as_json:
                continue
            _print(f"{'ok' if not flagged else 'warn'}  {persona.name}  {persona.source}{note}", sys.stdout)
            for line in lines:
                _print(f"     {line}", sys.stdout)
        # a file that gave no persona gets its row too, with why (the reasons are on stderr as well)
        for skipped_file in files_without_persona(report.warnings, [p.source for p in personas]):
            whys = [warning[len(skipped_file["path"]) + 1:].strip() if warning.startswith(
                    f"{skipped_file['path']}:") else warning for warning in skipped_file["warnings"]]
            rows.append({"status": "skip", "path": skipped_file["path"], "persona": None, "note": None,
                         "tool_problems": [], "warnings": whys})
            if as_json:
                continue
            _print(f"skip  {skipped_file['path']}", sys.stdout)
            for why in whys:
                _print(f"     {'line ' if why[:1].isdigit() else ''}{why}", sys.stdout)
    summary = f"{loaded} loaded, {skipped} skipped"
    if missing:
        summary += f", {missing} path{'s' if missing != 1 else ''} not found"
    if problems:
        summary += f", {problems} tool problem{'s' if problems != 1 else ''}"
    if warned:
        summary += f", {warned} other warning{'s' if warned != 1 else ''} (above, on stderr)"
    strict = getattr(args, "strict", False)
    failed = bool(missing or skipped or (strict and (problems or warned)))
    if as_json:
        _print(_json_text({"ok": not failed, "strict": strict, "loaded": loaded, "skipped": skipped,
                           "tool_problems": problems, "warnings": warned, "missing": missing_paths, "files": rows}),
               sys.stdout)
    else:
        _print(summary, sys.stdout)
    # --strict: a tool problem or a warning fails the check too (a CI gate); without it tool problems
    # are reported and the persona still loads
    return 1 if failed else 0


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

    def config_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", metavar="FILE",
                       help="daemon configuration (default /etc/ongrid/ongrid.yaml if present): its plugins, "
                            "tools and agents folders")
        p.add_argument("--state-dir", metavar="DIR",
                       help="the daemon's state folder: marketplace plugins installed in DIR/plugins count")

    def agents_dir(p: argparse.ArgumentParser) -> None:
        p.add_argument("--agents-dir", action="append", metavar="DIR", default=[],
                       help="a folder of persona files read after the built-in ones (repeatable)")
        config_args(p)

    p = sub.add_parser("list", help="list the personas (JSON with --json)")
    p.add_argument("--json", action="store_true", help="print a JSON list with every key and the source")
    agents_dir(p)
    p.set_defaults(func=_guarded(_cmd_list))

    p = sub.add_parser("show", help="print one persona as a persona file (or JSON)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--json", action="store_true", help="print its keys, source and body as JSON")
    agents_dir(p)
    p.set_defaults(func=_guarded(_cmd_show))

    p = sub.add_parser("validate", help="check persona files or folders: unknown tools (with the closest real "
                                        "name), tools permission_mode drops; exit 1 if any file is skipped")
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="persona files or folders (default: what the daemon reads — the built-in "
                        "personas, the plugins' and the configured agents folders)")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 on a tool problem (an unknown or dropped tool) or another warning about a file "
                        "that loaded (a duplicate tool, an unknown key) too, not only on a skipped file")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: ok, the counts, the paths not found and each file's status "
                        "(ok, warn, skip), persona, tool problems and warnings")
    config_args(p)
    p.set_defaults(func=_guarded(_cmd_validate))

    p = sub.add_parser("catalog", help="print the agent catalog the coordinator sees")
    agents_dir(p)
    p.set_defaults(func=_guarded(_cmd_catalog))
