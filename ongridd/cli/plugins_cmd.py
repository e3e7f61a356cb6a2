"""``ongrid plugins list [--json] [--local] [--config FILE] [--state-dir DIR]`` (docs/architecture.md §13, §15.1).

Shows each plugin, its source (builtin / entry point / path) and what it
registered; a plugin that failed to load is shown with the reason, one that
registered nothing with why (a bridge's missing settings or variables).
By default it asks the running daemon (``--url`` / ``$ONGRID_URL``,
``GET /api/plugins``): what the daemon loaded, with its configuration and
the secrets in its environment.  With ``--local``, ``--config`` or
``--state-dir``, or when no daemon answers, it loads the plugins here, with
this shell's environment, and says so.  Exit 0 (the listing worked,
whatever the plugins did); 2 on a configuration error or a refused token.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ongridd.cli.common import ClientError, add_client_args, base_url, http_json, print_json, refused


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("plugins", help="plugins: list what is loaded and what each registered")
    sub = parser.add_subparsers(dest="plugins_command", metavar="ACTION")
    sub.required = True
    lst = sub.add_parser("list", help="list plugins, their source and what they registered")
    lst.add_argument("--json", action="store_true", help="print a JSON list on stdout")
    lst.add_argument("--config", metavar="FILE", help="configuration file (default: /etc/ongrid/ongrid.yaml if present)")
    lst.add_argument("--state-dir", metavar="DIR", help="state directory (marketplace plugins live in DIR/plugins)")
    lst.add_argument("--local", action="store_true",
                     help="load the plugins here instead of asking the running daemon (implied by --config and "
                          "--state-dir)")
    add_client_args(lst)
    lst.set_defaults(func=run_list)


def _format(report: dict[str, Any]) -> list[str]:
    status = "ok" if report["ok"] else ("disabled" if report.get("disabled") else "FAILED")
    if report["ok"] and report.get("inactive"):
        status = "inactive"  # loaded, but registered nothing with this configuration (a bridge that is off)
    elif report["ok"] and report.get("unconfigured"):
        status = "ok, not configured"
    elif report["ok"] and report.get("warning"):
        status = "ok, with a warning"
    lines = [f"{report['name']}  [{report['source']}]  {status}"]
    if report.get("location"):
        lines.append(f"    from: {report['location']}")
    if report.get("error"):
        lines.append(f"    error: {report['error']}")
    registered = report.get("registered") or {}
    for kind, names in registered.items():
        lines.append(f"    {kind}: {', '.join(names)}")
    if report.get("unconfigured"):
        lines.append(f"    not configured: {report['unconfigured']}")
    if report.get("warning") and not report.get("inactive"):
        lines.append(f"    warning: {report['warning']}")
    if report.get("inactive"):
        lines.append(f"    inactive: {report['inactive']}")
    elif report["ok"] and not registered:
        lines.append("    (registered nothing)")
    return lines


def _from_daemon(args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """The running daemon's plugin reports, or None when no daemon answers at the URL."""
    try:
        data = http_json("GET", args, "/api/plugins", timeout_s=30)
    except ClientError:
        return None
    return list(data.get("plugins") or []) if isinstance(data, dict) else None


def run_list(args: argparse.Namespace) -> int:
    """List plugins; returns the exit code."""
    local = args.local or args.config or args.state_dir
    url, reports = "", None
    if not local:
        try:
            url = base_url(getattr(args, "url", None))
        except ClientError as exc:
            print(f"ongrid plugins list: {exc}", file=sys.stderr)
            return 2
        try:
            reports = _from_daemon(args)
        except RuntimeError as exc:  # the daemon answered with an error (a refused token)
            if not str(exc).startswith("HTTP 404"):  # 404: a daemon from before GET /api/plugins
                print(f"ongrid plugins list: {exc} (--local loads the plugins here instead)", file=sys.stderr)
                return 2 if refused(exc) else 1
    if reports is not None:
        where = f"as loaded by the daemon at {url}"
        from ongridd.tools.stubs import DEFAULT_STUBS

        kept = [r.get("registered") or {} for r in reports if r.get("ok")]
        tools = sum(len(r.get("tools") or ()) for r in kept)
        # the daemon's own stubs, then those its plugins registered (as the local listing counts them)
        stubs = len({s.tool for s in DEFAULT_STUBS} | {n for r in kept for n in r.get("redirect_stubs") or ()})
    else:
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
        reports = [r.to_json() for r in contributions.report]
        tools, stubs = len(contributions.tools), len(contributions.stubs)
        where = (("loaded here" if local else f"no daemon answers at {url}; loaded here")
                 + " with this configuration and this shell's environment (a daemon started otherwise may load "
                   "differently)")
    if args.json:
        print_json(reports)
        print(f"({where})", file=sys.stderr)  # whose view it is, beside the JSON (not in it)
        return 0
    for report in reports:
        print("\n".join(_format(report)))
    failed = sum(1 for r in reports if not r["ok"] and not r.get("disabled"))
    counts = (f", {tools} tools, {stubs} redirect stubs (a worker's tool the coordinator is asked for is answered "
              "with the persona to dispatch instead)")
    print(f"\n{len(reports)} plugins, {failed} failed{counts}\n({where})")
    return 0
