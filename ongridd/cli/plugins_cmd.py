"""``ongrid plugins list [--json] [--config FILE] [--state-dir DIR]`` (docs/architecture.md §13, §15.1).

Shows each plugin, its source (builtin / entry point / path) and what it
registered; a plugin that failed to load is shown with the reason.  Exit 0
(the listing worked, whatever the plugins did); 2 on a configuration error.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("plugins", help="plugins: list what is loaded and what each registered")
    sub = parser.add_subparsers(dest="plugins_command", metavar="ACTION")
    sub.required = True
    lst = sub.add_parser("list", help="list plugins, their source and what they registered")
    lst.add_argument("--json", action="store_true", help="print a JSON list on stdout")
    lst.add_argument("--config", metavar="FILE", help="configuration file (default: /etc/ongrid/ongrid.yaml if present)")
    lst.add_argument("--state-dir", metavar="DIR", help="state directory (marketplace plugins live in DIR/plugins)")
    lst.set_defaults(func=run_list)


def _format(report: Any) -> list[str]:
    status = "ok" if report.ok else ("disabled" if report.disabled else "FAILED")
    lines = [f"{report.name}  [{report.source}]  {status}"]
    if report.location:
        lines.append(f"    from: {report.location}")
    if report.error:
        lines.append(f"    error: {report.error}")
    for kind, names in report.registered.items():
        lines.append(f"    {kind}: {', '.join(names)}")
    if report.inactive:
        lines.append(f"    inactive: {report.inactive}")
    elif report.ok and not report.registered:
        lines.append("    (registered nothing)")
    return lines


def run_list(args: argparse.Namespace) -> int:
    """List plugins; returns the exit code."""
    from ongridd.config import load_config
    from ongridd.errors import ConfigError
    from ongridd.plugins.manager import collect

    try:
        overrides: dict[tuple[str, ...], Any] | None = {("state_dir",): args.state_dir} if args.state_dir else None
        config = load_config(args.config, overrides=overrides)
    except ConfigError as exc:
        print(f"ongrid plugins list: {exc}", file=sys.stderr)
        return 2
    contributions = collect(config)
    if args.json:
        print(json.dumps([r.to_json() for r in contributions.report], ensure_ascii=False, indent=2))
        return 0
    for report in contributions.report:
        print("\n".join(_format(report)))
    failed = len(contributions.failed)
    print(f"\n{len(contributions.report)} plugins, {failed} failed, {len(contributions.tools)} tools, "
          f"{len(contributions.stubs)} redirect stubs (a worker's tool the coordinator is asked for is answered "
          "with the persona to dispatch instead)")
    return 0
