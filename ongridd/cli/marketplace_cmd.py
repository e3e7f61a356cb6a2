"""``ongrid marketplace list [--json] | install NAME | uninstall NAME`` (docs/architecture.md §14, §15.1).

``list`` asks the daemon at ``--url`` (its index and what it has
installed); when no daemon answers, or with ``--index``, it reads the index
locally (else ``marketplace.index`` of the configuration) and looks at
``<state_dir>/plugins``, and says so on stderr.  ``--json`` prints a list of ``{name,
version, description, installed, installed_version}`` (``version``: the index's;
``installed_version``: the installed package's, null when not installed).

``install`` and ``uninstall`` ask the running daemon (``POST
/api/marketplace/install|uninstall``) and return when the new registries
are live.  Exit codes: 0 done; 1 the daemon refused (its message is
printed); 2 usage, configuration, index or connection errors, or a
missing/wrong token.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ongridd.cli.common import ClientError, add_client_args, base_url, http_json, print_json, refused

INSTALL_TIMEOUT_S = 600.0
LIST_TIMEOUT_S = 10.0


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("marketplace", help="marketplace: list, install and uninstall plugin packages")
    add_client_args(parser)  # also between `marketplace` and its action
    sub = parser.add_subparsers(dest="marketplace_command", metavar="ACTION")
    sub.required = True

    lst = sub.add_parser("list", help="list the packages of the marketplace index and whether they are installed")
    lst.add_argument("--json", action="store_true", help="print a JSON list of {name, version, description, installed, "
                                                         "installed_version}")
    lst.add_argument("--index", metavar="FILE", help="the index file (default: marketplace.index of the configuration)")
    lst.add_argument("--config", metavar="FILE", help="configuration file (default: /etc/ongrid/ongrid.yaml if present)")
    lst.add_argument("--state-dir", metavar="DIR", help="state directory, read when no daemon answers")
    add_client_args(lst)
    lst.set_defaults(func=run_list)

    for action in ("install", "uninstall"):
        p = sub.add_parser(action, help=f"{action} a package on the running daemon")
        p.add_argument("name", metavar="NAME", help="the package name (as `marketplace list` shows it)")
        p.add_argument("--json", action="store_true", help="print the daemon's answer as JSON")
        add_client_args(p)
        p.set_defaults(func=run_action, action=action)


def _err(message: str) -> None:
    print(f"ongrid marketplace: {message}", file=sys.stderr)


def _print_rows(rows: list[dict[str, Any]], as_json: bool, empty_note: str) -> None:
    if as_json:
        print_json(rows)
        return
    if not rows:
        print(empty_note)
    for row in rows:
        have, offered = row.get("installed_version"), row.get("version")
        if not row.get("installed"):
            mark = "not installed"
        elif have and offered and have != offered:  # the index offers another version than the one installed
            mark = f"installed: {have}; uninstall, then install, to take {offered}"
        else:
            mark = "installed"
        print(f"{row['name']}  {offered or have or '?'}  [{mark}]\n    {row['description']}")


def run_list(args: argparse.Namespace) -> int:
    """List the marketplace; returns the exit code.

    The running daemon's view comes first (its index, what it has
    installed).  Only when no daemon answers is the local index read, with
    ``<state_dir>/plugins`` for what is installed (said on stderr).
    """
    from ongridd.config import load_config
    from ongridd.errors import ConfigError, MarketplaceError
    from ongridd.marketplace.index import index_path_for, load_index

    try:
        base_url(args.url)
    except ClientError as exc:
        _err(str(exc))
        return 2
    if not args.index:
        try:
            answer = http_json("GET", args, "/api/marketplace", timeout_s=LIST_TIMEOUT_S)
        except ClientError as exc:
            answer, why = None, str(exc)
        except RuntimeError as exc:
            _err(f"the daemon at {base_url(args.url)} answered {exc}")
            return 2 if refused(exc) else 1
        if isinstance(answer, list):
            rows = [{"name": e.get("name"), "version": e.get("version"), "description": e.get("description"),
                     "installed": bool(e.get("installed")), "installed_version": e.get("installed_version")}
                    for e in answer if isinstance(e, dict)]
            _print_rows(rows, args.json, "(the daemon's marketplace index lists no packages)")
            return 0
        if answer is not None:
            _err(f"the daemon at {base_url(args.url)} gave an unexpected answer")
            return 1
    else:
        why = "--index given"
    try:
        overrides: dict[tuple[str, ...], Any] | None = {("state_dir",): args.state_dir} if args.state_dir else None
        config = load_config(args.config, overrides=overrides)
        index = load_index(Path(args.index) if args.index else index_path_for(config, warn=lambda m: _err(
            f"warning: {m}")))
    except (ConfigError, MarketplaceError) as exc:
        _err(str(exc))
        return 2
    root = config.state_path / "plugins"
    _err(f"{why}; reading the index {index.path} and what is installed in {root.absolute()}")
    installed = _installed_versions(root)
    rows = [{"name": e.name, "version": e.version, "description": e.description, "installed": e.name in installed,
             "installed_version": installed.get(e.name)} for e in index.entries]
    _print_rows(rows, args.json, f"(the index {index.path} lists no packages)")
    return 0


def _installed_versions(root: Path) -> dict[str, str | None]:
    """The packages installed in ``root`` (a plugins folder) and their versions (None when a
    package's metadata cannot be read)."""
    from ongridd.errors import MarketplaceError
    from ongridd.marketplace.packages import inspect_folder, plugin_folders

    out: dict[str, str | None] = {}
    if not root.is_dir():
        return out
    for folder in plugin_folders(root):
        try:
            out[folder.name] = inspect_folder(folder).version
        except MarketplaceError:
            out[folder.name] = None
    return out


def _summary(answer: dict[str, Any]) -> list[str]:
    lines = [f"{answer.get('action', 'done')} {answer.get('name')} {answer.get('version') or ''}".rstrip()]
    plugins = answer.get("plugins") or []
    if plugins:
        lines[0] += f" (plugin {', '.join(plugins)})"
    for kind, names in (answer.get("registered") or {}).items():
        lines.append(f"    {kind}: {', '.join(str(n) for n in names)}")
    if answer.get("reused_loaded_module"):
        lines.append("    (the same version was already loaded in the daemon; its code was reused)")
    for w in answer.get("warnings") or []:
        lines.append(f"    warning: {w}")
    return lines


def run_action(args: argparse.Namespace) -> int:
    """``install`` / ``uninstall`` on the daemon; returns the exit code."""
    try:
        answer = http_json("POST", args, f"/api/marketplace/{args.action}", {"name": args.name},
                           timeout_s=INSTALL_TIMEOUT_S)
    except ClientError as exc:
        _err(str(exc))
        return 2
    except RuntimeError as exc:
        _err(str(exc))
        return 2 if refused(exc) else 1
    if args.json:
        print_json(answer)
    else:
        print("\n".join(_summary(answer if isinstance(answer, dict) else {})))
    return 0
