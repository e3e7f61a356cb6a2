"""``ongrid sessions tree|audit SESSION_ID [--json]``."""

from __future__ import annotations

import argparse
import sys

from ongridd.cli.common import ClientError, add_client_args, http_json, print_json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sessions", help="show a session's tree or audit log from the running daemon")
    ss = p.add_subparsers(dest="sessions_command", metavar="COMMAND")
    ss.required = True
    for name, helptext in (("tree", "the session tree (coordinator → workers → reviewer)"),
                           ("audit", "every tool call of the session and its children")):
        q = ss.add_parser(name, help=helptext)
        q.add_argument("session_id")
        q.add_argument("--json", action="store_true", help="print JSON")
        add_client_args(q)
        q.set_defaults(func=run)


def format_tree(node: dict, indent: str = "") -> list[str]:
    """Lines of a session tree: ``agent status [closed…] id — description``."""
    if node.get("closed_at"):
        closed = f" closed {node['closed_at']}"
    else:
        closed = "" if node.get("status") == "open" else " (not closed)"
    reason = f" ({node['close_reason']})" if node.get("close_reason") else ""
    desc = f" — {node['description']}" if node.get("description") else ""
    lines = [f"{indent}{node['agent_id']} [{node['status']}{reason}]{closed} {node['id']}{desc}"]
    for child in node.get("children", []):
        lines.extend(format_tree(child, indent + "  "))
    return lines


def format_audit(rows: list[dict]) -> list[str]:
    """One line per audit row: time, agent, tool, status, duration, arguments (cut at 80)."""
    out = []
    for r in rows:
        args = (r.get("arguments") or "").replace("\n", " ")
        args = args if len(args) <= 80 else args[:79] + "…"
        out.append(f"{r.get('created_at', '')}  {r.get('agent_id', ''):<22} {r['tool_name']:<24} "
                   f"{r['status']:<9} {r.get('duration_ms', 0):>6} ms  {args}")
        if r.get("status") in ("error", "timeout", "rejected", "redirect"):
            why = " ".join(str(r.get("result") or "").split())
            out.append(f"{'':<30}↳ {why if len(why) <= 160 else why[:159] + '…'}")
    return out


def run(args: argparse.Namespace) -> int:
    """Exit 0 on success, 1 on an HTTP error (e.g. 404), 2 when the daemon cannot be reached."""
    path = f"/api/sessions/{args.session_id}/{args.sessions_command}"
    try:
        data = http_json("GET", args, path)
    except ClientError as exc:
        print(f"ongrid: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"ongrid: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print_json(data)
    elif args.sessions_command == "tree":
        print("\n".join(format_tree(data)))
    else:
        print("\n".join(format_audit(data)) if data else "(no tool calls)")
    return 0
