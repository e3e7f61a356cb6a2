"""``ongrid sessions list [--json]`` and ``ongrid sessions tree|audit|messages SESSION_ID [--json]``."""

from __future__ import annotations

import argparse
import sys
from urllib.parse import quote

from ongridd.cli.common import ClientError, add_client_args, http_json, print_json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sessions", help="show a session's tree or audit log from the running daemon")
    ss = p.add_subparsers(dest="sessions_command", metavar="COMMAND")
    ss.required = True
    q = ss.add_parser("list", help="your chat threads, newest activity first")
    q.add_argument("--json", action="store_true", help="print JSON")
    q.add_argument("--limit", type=int, default=50, help="at most this many threads (default 50, max 200)")
    add_client_args(q)
    q.set_defaults(func=run)
    for name, helptext in (("tree", "the session tree (coordinator → workers → reviewer)"),
                           ("audit", "every tool call of the session and its children"),
                           ("messages", "the stored transcript of a session")):
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
        proposal = r.get("proposal")
        if proposal:
            why = " ".join(str(proposal.get("decision_reason") or "").split())
            out.append(f"{'':<30}↳ review: {proposal.get('decision') or 'undecided'}"
                       f"{' by ' + proposal['reviewer_session_id'] if proposal.get('reviewer_session_id') else ''}"
                       f"{' — ' + (why if len(why) <= 160 else why[:159] + '…') if why else ''}")
        elif r.get("status") in ("error", "timeout", "rejected", "redirect"):
            why = " ".join(str(r.get("result") or "").split())
            out.append(f"{'':<30}↳ {why if len(why) <= 160 else why[:159] + '…'}")
    return out


def format_threads(rows: list[dict]) -> list[str]:
    """One line per thread: last activity, running marker, thread name, id, last user text."""
    out = []
    for r in rows:
        mark = "running" if r.get("running") else (r.get("last_turn") or "empty")
        text = r.get("last_user_text") or ""
        out.append(f"{r.get('updated_at', '')}  {mark:<11} {r.get('thread') or '':<24} {r['id']}  {text[:80]}")
    return out


def format_messages(rows: list[dict]) -> list[str]:
    """``#seq role: content`` per message (tool calls by name)."""
    out = []
    for m in rows:
        calls = ", ".join(c.get("name", "?") for c in m.get("tool_calls") or [])
        body = m.get("content") or ""
        out.append(f"#{m['seq']} {m['role']}: {body}{' [calls ' + calls + ']' if calls else ''}")
    return out


def run(args: argparse.Namespace) -> int:
    """Exit 0 on success, 1 on an HTTP error (e.g. 404), 2 when the daemon cannot be reached."""
    if args.sessions_command == "list":
        path = f"/api/sessions?limit={max(1, min(args.limit, 200))}"
    else:
        path = f"/api/sessions/{quote(args.session_id, safe='')}/{args.sessions_command}"
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
    elif args.sessions_command == "list":
        print("\n".join(format_threads(data)) if data else "(no threads)")
    elif args.sessions_command == "messages":
        print("\n".join(format_messages(data)) if data else "(no messages)")
    else:
        print("\n".join(format_audit(data)) if data else "(no tool calls)")
    return 0
