"""``ongrid sessions list [--json]``, ``ongrid sessions tree|audit|messages SESSION_ID [--json]`` and
``ongrid sessions export SESSION_ID [-o FILE] [--markdown]``."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any
from urllib.parse import quote

from ongridd.cli.common import ClientError, add_client_args, http_json, print_json, refused


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sessions", help="list sessions; show one's tree, audit, messages or export from the running daemon")
    add_client_args(p)  # also between `sessions` and its command: `ongrid sessions --url U list`
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
        q.add_argument("session_id", help="a session id (as `sessions list` or `tree` shows it), 8+ characters "
                                          "of one (its start or its end), or a thread's name")
        q.add_argument("--json", action="store_true", help="print JSON")
        add_client_args(q)
        q.set_defaults(func=run)
    q = ss.add_parser("export", help="a thread with its whole tree, messages and audit as one JSON document")
    q.add_argument("session_id", help="the thread's session id (as `sessions list` shows it), the start of one, "
                                      "or the thread's name")
    q.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    form = q.add_mutually_exclusive_group()  # both: a usage error (exit 2), before any request
    form.add_argument("--markdown", action="store_true", help="a readable transcript instead of JSON")
    form.add_argument("--json", action="store_true",
                      help="JSON (the default; accepted for symmetry with the other commands)")
    add_client_args(q)
    q.set_defaults(func=run)


def format_tokens(tokens: dict | None) -> str:
    """`` · 1234 in (200 cached) / 56 out, 3 model calls`` — empty for a session without model calls."""
    if not tokens or not tokens.get("model_calls"):
        return ""
    cached = f" ({tokens['cached']} cached)" if tokens.get("cached") else ""
    calls = tokens["model_calls"]
    return (f" · {tokens.get('prompt', 0)} in{cached} / {tokens.get('completion', 0)} out, "
            f"{calls} model call{'s' if calls != 1 else ''}")


def _fence(text: str) -> str:
    """``text`` in a fenced block whose fence no line of it can close."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}\n{text}\n{fence}"


def _code(text: Any) -> str:
    """``text`` on one line as an inline code span no backtick in it can close."""
    text = " ".join(str(text).split())
    ticks = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    if not text:
        return "` `"
    pad = " " if text[0] == "`" or text[-1] == "`" else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _one_line(text: Any) -> str:
    """``text`` with its whitespace (newlines included) collapsed: it cannot start a heading or list."""
    return " ".join(str(text).split())


def format_markdown(doc: dict) -> str:
    """The export document (``GET /api/sessions/{id}/export``) as a readable
    markdown transcript: one section per session (the tree in order), its
    messages, then its tool calls with their proposals."""
    out: list[str] = []

    def node(n: dict, depth: int) -> None:
        title = "#" * min(depth + 1, 6)
        what = _one_line(n.get("thread_id") or n.get("description") or "")
        out.append(f"{title} {_one_line(n['agent_id'])} — {what}".rstrip(" —"))
        out.append("")
        closed = f", closed {n['closed_at']}" if n.get("closed_at") else ""
        reason = f" ({_one_line(n['close_reason'])})" if n.get("close_reason") else ""
        out.append(f"Session `{n['id']}`: {n['status']}{reason}, created {n['created_at']}{closed}"
                   f"{format_tokens(n.get('tokens'))}")
        out.append("")
        for m in n.get("messages") or []:
            calls = ", ".join(_code(c.get("name", "?")) for c in m.get("tool_calls") or [])
            head = f"**{m['role']}** #{m['seq']} · {m['created_at']}"
            if m["role"] == "tool":
                head += f" · result of {_code(m.get('name') or m.get('tool_call_id'))}"
            out.append(head + (f" · calls {calls}" if calls else ""))
            out.append("")
            if m.get("content"):
                # every text is data: none can forge a section or a review; a tool's JSON result one field a
                # line (a command's output as its lines, not an escaped string)
                out.append(_fence(_tool_body(m["content"]).removeprefix("\n") if m["role"] == "tool"
                                  else m["content"]))
                out.append("")
            if n.get("last_turn_error") and m["seq"] == n.get("last_turn_error_seq"):  # the turn ended here
                out.append(f"*The turn ended without an answer:* {_code(_one_line(n['last_turn_error'])[:500])}")
                out.append("")
        proposals = {p.get("tool_call_id"): p for p in n.get("proposals") or [] if p.get("tool_call_id")}
        if n.get("audit"):
            out.append("Tool calls:")
            out.append("")
            for a in n["audit"]:
                exited = _exit_status(a.get("result")).removesuffix(" · ")
                out.append(f"- {_code(a['tool_name'])} {a['status']}{' (' + exited + ')' if exited else ''} in "
                           f"{a['duration_ms']} ms · {a['created_at']}")
                out.append(f"  - arguments: {_code(' '.join((a.get('arguments') or '').split())[:500])}")
                p = proposals.get(a.get("tool_call_id"))
                if p:
                    why = " ".join(str(p.get("decision_reason") or "").split())
                    out.append(f"  - review: {p.get('decision') or 'undecided'}"
                               f"{' — ' + why if why else ''}")
            out.append("")
        for child in n.get("children") or []:
            node(child, depth + 1)

    node(doc["session"], 0)
    return "\n".join(out).rstrip() + "\n"


def format_tree(node: dict, indent: str = "") -> list[str]:
    """Lines of a session tree: ``agent [status] closed… id (for message #N) — description · usage``
    (``#N``: a worker's ``turn_seq``, the seq of the user message whose turn started it; usage:
    format_tokens; a thread's own open session says it stays open between turns)."""
    if node.get("closed_at"):
        closed = f" closed {node['closed_at']}"
    else:
        closed = "" if node.get("status") == "open" else " (not closed)"
    reason = f" ({_one_line(node['close_reason'])})" if node.get("close_reason") else ""
    desc = f" — {_one_line(node['description'])}" if node.get("description") else ""
    usage = format_tokens(node.get("tokens"))
    turn = f" (for message #{node['turn_seq']})" if node.get("turn_seq") is not None else ""
    decided = f" → {node['decision']}" if node.get("decision") in ("approve", "reject") else ""  # a reviewer's
    if isinstance(node.get("changes_not_made"), int) and node["changes_not_made"] > 0:  # the gate did not let them run
        decided += f" · {node['changes_not_made']} change{'s' if node['changes_not_made'] != 1 else ''} not made"
    # a thread's own session (no parent) stays open between turns: not a turn still running
    idle = " (the thread's session: open between turns)" if (
        node.get("status") == "open" and "parent_session_id" in node and node["parent_session_id"] is None) else ""
    lines = [f"{indent}{_one_line(node['agent_id'])} [{node['status']}{reason}{decided}]{closed} {node['id']}{idle}"
             f"{turn}{desc}{usage}"]
    for child in node.get("children", []):
        lines.extend(format_tree(child, indent + "  "))
    return lines


#: how much of a review's reason or a failed call's error an audit line shows (a refusal's advice comes
#: last); of a result, its start
REASON_SHOWN, RESULT_SHOWN = 600, 160


def _upto(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _exit_status(result: Any) -> str:
    """``exit N · `` for a command's result (a JSON object with ``exit_code``) that exited non-zero —
    an answer, not a failed call (``grep`` finding nothing), but not to be missed; else ``""``."""
    if not isinstance(result, str) or not result.startswith("{") or len(result) > TOOL_JSON_MAX_CHARS:
        return ""
    try:
        value = json.loads(result)
    except (ValueError, RecursionError):
        return ""
    code = value.get("exit_code") if isinstance(value, dict) else None
    return f"exit {code} · " if isinstance(code, int) and not isinstance(code, bool) and code != 0 else ""


def format_audit(rows: list[dict], *, results: bool = True) -> list[str]:
    """A header row, then one line per audit row: time, agent, tool, status, duration, arguments
    (cut at 80), and under it the review or the error (cut at :data:`REASON_SHOWN`) or
    (``results``) the start of the result (cut at :data:`RESULT_SHOWN`); every field on one line (a
    model-invented tool name with line breaks in it cannot draw a row or a review line of its own)."""
    width = max((len(str(r.get("created_at", ""))) for r in rows), default=0)
    out = [f"{'ENDED':<{width}}  {'AGENT':<22} {'TOOL':<24} {'STATUS':<9} {'DURATION':>9}  ARGUMENTS"] if rows else []
    for r in rows:
        args = _one_line(r.get("arguments") or "")
        args = args if len(args) <= 80 else args[:79] + "…"
        tool = _one_line(r["tool_name"])
        tool = tool if len(tool) <= 64 else tool[:63] + "…"
        out.append(f"{r.get('created_at', '')}  {_one_line(r.get('agent_id', '')):<22} {tool:<24} "
                   f"{r['status']:<9} {r.get('duration_ms', 0):>6} ms  {args}")
        proposal = r.get("proposal")
        if proposal:
            why = " ".join(str(proposal.get("decision_reason") or "").split())
            out.append(f"{'':<30}↳ review: {proposal.get('decision') or 'undecided'}"
                       f"{' by ' + proposal['reviewer_session_id'] if proposal.get('reviewer_session_id') else ''}"
                       f"{' — ' + _upto(why, REASON_SHOWN) if why else ''}")
        elif r.get("status") in ("error", "timeout", "rejected", "redirect"):
            out.append(f"{'':<30}↳ {_upto(' '.join(str(r.get('result') or '').split()), REASON_SHOWN)}")
        elif results and r.get("result"):  # what the call returned, its start (--json has it whole)
            start = _upto(" ".join(str(r["result"]).split()), RESULT_SHOWN)
            out.append(f"{'':<30}→ {_exit_status(r['result'])}{start}")
    return out


#: the widest the thread column gets; a longer name is cut with … (``--json`` has it whole)
THREAD_COLUMN_MAX = 48


def _clip(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: cut after a word, with ``…``, when longer."""
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip() + "…"


def format_threads(rows: list[dict]) -> list[str]:
    """A header row, then one line per thread: last activity, running marker, thread name (the
    column as wide as the longest, at most :data:`THREAD_COLUMN_MAX`), id, last user text."""
    names = [_one_line(r.get("thread") or "") for r in rows]
    width = min(THREAD_COLUMN_MAX, max([6, *map(len, names)]))
    names = [n if len(n) <= width else n[:width - 1] + "…" for n in names]
    out = [f"{'LAST ACTIVITY':<32}  {'LAST TURN':<11} {'THREAD':<{width}}  {'ID':<36}  LAST QUESTION"] if rows else []
    for r, name in zip(rows, names):
        mark = "running" if r.get("running") else (r.get("last_turn") or "empty")
        why = r.get("last_turn_error")
        if mark == "interrupted" and isinstance(why, str) and why:  # it ended with an error, not by a crash
            mark = "stopped" if why.startswith("stopped:") else "failed"
        text = _clip(_one_line(r.get("last_user_text") or ""), 80)
        if mark in ("failed", "stopped"):  # why, after the question it left unanswered
            text += f"  — {_clip(_one_line(why), 100)}"
        out.append(f"{r.get('updated_at', ''):<32}  {mark:<11} {name:<{width}}  {r['id']}  {text}")
    return out


#: the longest tool result :func:`format_messages` reads as JSON to lay it out (longer ones are shown as stored)
TOOL_JSON_MAX_CHARS = 1_000_000


def _tool_body(content: str) -> str:
    """A tool result that is a JSON object (as AgentTool's report and most tools' results are)
    laid out one field a line, ``name: value``: a text value as its own lines (a worker's report
    reads as it was written, not as an escaped string), a list or object as compact JSON.  Anything
    else is the content as stored."""
    if not content.startswith("{") or len(content) > TOOL_JSON_MAX_CHARS:
        return content
    try:
        value = json.loads(content)
    except (ValueError, RecursionError):
        return content
    if not isinstance(value, dict) or not value:
        return content
    lines = [""]
    for key, item in value.items():
        name = _one_line(key)
        if isinstance(item, str) and "\n" in item.removesuffix("\n"):
            lines.append(f"{name}:")
            lines.extend("  " + line for line in item.removesuffix("\n").split("\n"))
        elif isinstance(item, str):
            text = item.removesuffix("\n")
            lines.append(f"{name}: {text}" if text else f"{name}:")
        else:
            lines.append(f"{name}: {json.dumps(item, ensure_ascii=False)}")
    return "\n".join(lines)


def _origin_text(origin: dict) -> str:
    return f"via {_one_line(str(origin.get('platform')))}, IM user {_one_line(str(origin.get('im_user')))}"


def format_messages(rows: list[dict], origins: list[dict] | None = None) -> list[str]:
    """``#seq role: content`` per message (tool calls by name; a tool result that is a JSON
    object one field a line, see :func:`_tool_body`); a content's further lines are indented,
    so no text can pose as a message of its own.  ``origins`` (``GET …/origins``): a user message
    a chat bridge brought is marked with its platform and IM user, and a line after the messages
    counts those that went into a running turn (their seq is not recorded)."""
    origins = [o for o in origins or () if isinstance(o, dict) and isinstance(o.get("platform"), str)]
    by_seq = {o["message_seq"]: o for o in origins if o.get("message_seq") is not None}
    out = []
    called: dict[str, Any] = {}  # tool_call_id → the tool's name, from the calls asked for so far
    for m in rows:
        for c in m.get("tool_calls") or []:
            if isinstance(c, dict) and isinstance(c.get("id"), str):
                called[c["id"]] = c.get("name")
        calls = ", ".join(_one_line(c.get("name", "?")) for c in m.get("tool_calls") or [])
        content, role = m.get("content") or "", m["role"]
        if role == "tool":
            content = _tool_body(content)
            answered = m.get("tool_call_id")
            name = m.get("name") or (called.get(answered) if isinstance(answered, str) else None)
            if name:
                role = f"tool {_one_line(name)}"
        body = "\n    ".join(content.split("\n"))
        place = f"#{m['seq']}" if m.get("seq") is not None else "(held: not read by the running turn yet)"
        if m["role"] == "user" and (origin := by_seq.get(m.get("seq"))) is not None:
            role = f"user ({_origin_text(origin)})"
        line = f"{place} {role}:"
        if body:  # (a laid-out tool result starts on the next line)
            line += body if body.startswith("\n") else " " + body
        if calls:
            line += f" [calls {calls}]"
        out.append(line)
    joined = [o for o in origins if o.get("message_seq") is None]
    if joined:
        who = sorted({_origin_text(o) for o in joined})
        out.append(f"({len(joined)} message(s) {', '.join(who)} went into a turn already running)")
    return out


def _origins(args: argparse.Namespace, ident: str) -> list[dict]:
    """The session's bridged-turn origins; ``[]`` when there are none or they cannot be read (a
    daemon without the route: the messages are shown all the same)."""
    try:
        rows = http_json("GET", args, f"/api/sessions/{quote(ident, safe='')}/origins")
    except (ClientError, RuntimeError):
        return []
    return rows if isinstance(rows, list) else []


#: the shape of a session id (a UUID); anything else given as one is most likely a thread's name
_SESSION_ID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")


#: the matches an ambiguous id prefix lists
AMBIGUOUS_SHOWN = 5


class _Ambiguous(Exception):
    """An id prefix that starts several of the caller's threads' session ids (the message lists them)."""


def _resolve(args: argparse.Namespace, given: str) -> str | None:
    """The session id ``given`` names: a session id as it is; else the one thread of yours
    named exactly ``given``, or the one session id among your threads' that starts or ends with it
    (8 characters at least; ids are time-ordered, so their random end tells apart threads made the
    same minute) — said on stderr; else ``given`` unchanged (the daemon answers 404 for it).  None
    when the daemon cannot be reached (said on stderr).  Raises :class:`_Ambiguous` when it starts
    or ends more than one of them, or is shorter than 8 characters and starts or ends one."""
    if _SESSION_ID.match(given):
        return given
    try:
        threads = http_json("GET", args, "/api/sessions?limit=200")
    except ClientError as exc:
        print(f"ongrid: {exc}", file=sys.stderr)
        return None
    except RuntimeError:
        return given  # the request for the session itself says what is wrong
    rows = [r for r in threads if isinstance(r, dict) and isinstance(r.get("id"), str)] if isinstance(threads, list) else []
    named = [r for r in rows if r.get("thread") == given]
    from ongridd.cli.termui import safe_text

    def part(r: dict) -> str:
        return "start" if r["id"].startswith(given.lower()) else "end"

    piece = [r for r in rows if r["id"].startswith(given.lower()) or r["id"].endswith(given.lower())] if given else []
    if not named and 0 < len(given) < 8 and piece:
        raise _Ambiguous(safe_text(
            f"ongrid: {given!r} is the {part(piece[0])} of a session id, but shorter than 8 characters: give at "
            "least 8 characters of the id (its start or its end), or the thread's name (`ongrid sessions list` "
            "shows them)"))
    if not named and len(given) >= 8:
        named = piece
        if len(named) > 1:
            # ids are time-ordered (UUIDv7): the sessions of a few minutes share their first 8 characters
            shown = "\n".join(f"  {r['id']}  {_one_line(r.get('thread') or '')}" for r in named[:AMBIGUOUS_SHOWN])
            more = f"\n  … and {len(named) - AMBIGUOUS_SHOWN} more" if len(named) > AMBIGUOUS_SHOWN else ""
            raise _Ambiguous(safe_text(
                f"ongrid: {given!r} is the {part(named[0])} of {len(named)} of your threads' session ids (ids made "
                "minutes apart share their first characters); give more of the id or its last 8 characters, or "
                f"the thread's name:\n{shown}{more}"))
    if not named and len(given) >= 8:
        return _resolve_worker(args, given, rows)
    if len(named) != 1:
        return given
    print(safe_text(f"(thread {_one_line(named[0].get('thread') or '')!r}: session {named[0]['id']})"), file=sys.stderr)
    return named[0]["id"]


#: how many of your most recent threads' trees a piece of a worker's id is looked for in
WORKER_SEARCH_THREADS = 20


def _resolve_worker(args: argparse.Namespace, given: str, threads: list[dict]) -> str:
    """The one worker's session (any session below a thread's own) in your
    :data:`WORKER_SEARCH_THREADS` most recent threads whose id starts or ends with ``given`` — said
    on stderr; else ``given`` unchanged.  Raises :class:`_Ambiguous` when it names several."""
    from ongridd.cli.termui import safe_text

    low = given.lower()
    found: list[tuple[dict, dict]] = []
    for thread in threads[:WORKER_SEARCH_THREADS]:
        try:
            tree = http_json("GET", args, f"/api/sessions/{thread['id']}/tree")
        except (ClientError, RuntimeError):
            continue
        stack = list(tree.get("children") or []) if isinstance(tree, dict) else []
        while stack:
            node = stack.pop()
            if not isinstance(node, dict) or not isinstance(node.get("id"), str):
                continue
            if node["id"].startswith(low) or node["id"].endswith(low):
                found.append((thread, node))
            stack.extend(node.get("children") or [])
    if len(found) > 1:
        shown = "\n".join(f"  {n['id']}  {_one_line(n.get('agent_id') or '')} in thread "
                          f"{_one_line(t.get('thread') or '')}" for t, n in found[:AMBIGUOUS_SHOWN])
        raise _Ambiguous(safe_text(f"ongrid: {given!r} names {len(found)} workers' sessions; give more of the id:\n"
                                   f"{shown}"))
    if not found:
        return given
    thread, node = found[0]
    print(safe_text(f"(worker {_one_line(node.get('agent_id') or '')} of thread "
                    f"{_one_line(thread.get('thread') or '')!r}: session {node['id']})"), file=sys.stderr)
    return str(node["id"])


def _last_turn_note(args: argparse.Namespace, ident: str) -> str | None:
    """For a thread's session (a coordinator's): how its last turn ended when it left no answer
    (failed or stopped, with the error its turn ended with, or cut off by a restart) or is still
    running, as ``GET /api/sessions`` says; None for a worker's session, an answered turn, or when
    the list cannot be read (the messages were shown; this line is only a note)."""
    try:
        threads = http_json("GET", args, "/api/sessions?limit=200")
    except (ClientError, RuntimeError):
        return None
    row = next((r for r in threads if isinstance(r, dict) and r.get("id") == ident), None) \
        if isinstance(threads, list) else None
    if row is None:
        return None
    if row.get("running"):
        return "(a turn is running: its answer is not stored yet)"
    if row.get("last_turn") != "interrupted":
        return None
    why = row.get("last_turn_error")
    if isinstance(why, str) and why:
        mark = "stopped" if why.startswith("stopped:") else "failed"
        return f"(no answer to the last message: the turn {mark} — {_clip(_one_line(why), 200)})"
    return "(no answer to the last message: the turn was cut off by a daemon restart)"


def run(args: argparse.Namespace) -> int:
    """Exit 0 on success, 1 on an HTTP error (e.g. 404), 2 when the daemon cannot be reached or
    refuses the caller (401, 403)."""
    ident = ""
    if args.sessions_command == "list":
        path = f"/api/sessions?limit={max(1, min(args.limit, 200))}"
    else:
        try:
            resolved = _resolve(args, args.session_id)
        except _Ambiguous as exc:
            print(exc, file=sys.stderr)
            return 1
        if resolved is None:
            return 2
        ident = resolved
        path = f"/api/sessions/{quote(ident, safe='')}/{args.sessions_command}"
    try:
        data = http_json("GET", args, path)
    except ClientError as exc:
        print(f"ongrid: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        hint = ""
        if args.sessions_command != "list" and "404" in str(exc) and not _SESSION_ID.match(args.session_id):
            hint = (f" ({args.session_id!r} is not a session id, nor the name or the start or end of the id of "
                    f"one of your threads or of a worker's session in your {WORKER_SEARCH_THREADS} latest threads: "
                    "`ongrid sessions list` and `tree` show them)")
        print(f"ongrid: {exc}{hint}", file=sys.stderr)
        return 2 if refused(exc) else 1
    if args.sessions_command == "export":
        return _write_export(args, data)
    from ongridd.cli.termui import safe_text  # model and tool text shown as text, never as terminal controls

    if args.json:
        print_json(data)
    elif args.sessions_command == "tree":
        print(safe_text("\n".join(format_tree(data))))
    elif args.sessions_command == "list":
        print(safe_text("\n".join(format_threads(data))) if data else "(no threads)")
    elif args.sessions_command == "messages":
        print(safe_text("\n".join(format_messages(data, _origins(args, ident)))) if data else "(no messages)")
        if data and (how := _last_turn_note(args, ident)):
            print(safe_text(how))
    else:
        print(safe_text("\n".join(format_audit(data))) if data else "(no tool calls)")
    return 0


def _write_export(args: argparse.Namespace, data: dict) -> int:
    from ongridd.cli.termui import escape_controls, safe_text

    text = safe_text(format_markdown(data)) if args.markdown else escape_controls(json.dumps(data, ensure_ascii=False, indent=2)) + "\n"
    if not args.output:
        sys.stdout.write(text)
        return 0
    try:
        # 0600: the export holds conversation content; O_TRUNC keeps an existing file's mode, so chmod too
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), 0o600)
            fh.write(text)
    except OSError as exc:
        print(f"ongrid: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"ongrid: wrote {args.output} ({len(text.encode()):,} bytes, readable by you only)", file=sys.stderr)
    return 0
