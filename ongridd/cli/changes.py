"""``ongrid changes record --kind K --subject S --actor A [--detail JSON] [--at TIME]``:
record a change made outside Ongrid (a deploy from CI, a config push, a
feature flag) through ``POST /api/changes`` of the running daemon;
``ongrid changes list [--kind K] [--subject S] [--since T] [--until T]
[--limit N] [--json]``: the change events, newest first (``GET /api/changes``).

Prints the new change event's id.  Exit codes: 0 recorded; 1 the daemon
answered with an HTTP error (its message on stderr, e.g. ``HTTP 400: kind:
expected one of …``); 2 usage (a ``--detail`` that is not a JSON object) or
connection problems.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from ongridd.cli.common import ClientError, add_client_args, http_json, print_json

KINDS_HELP = "deploy, rollback, config, flag, migration, scale, restart, maintenance, infra or other"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("changes", help="record changes made outside Ongrid (deploys, config pushes, flags)")
    add_client_args(p)  # also between `changes` and its command
    cs = p.add_subparsers(dest="changes_command", metavar="COMMAND")
    cs.required = True
    r = cs.add_parser("record", help="record one change; prints its id")
    r.add_argument("--kind", required=True, help=f"what kind of change: {KINDS_HELP}")
    r.add_argument("--subject", required=True, help="what changed, e.g. the service name 'checkout'")
    r.add_argument("--actor", required=True, help="who or what made the change, e.g. 'ci' or a user name")
    r.add_argument("--detail", default=None, metavar="JSON", help='a JSON object, e.g. \'{"version": "1.4.2"}\'')
    r.add_argument("--at", default=None, metavar="TIME", type=_ago,
                   help="when it happened: RFC 3339 ('2026-03-02T10:00:00Z'), unix seconds, 'now-5m', or '5m' "
                        "for 5 minutes ago (default now)")
    r.add_argument("--json", action="store_true", help="print the stored row as JSON instead of its id")
    add_client_args(r)
    r.set_defaults(func=run)
    ls = cs.add_parser("list", help="the recorded changes, Ongrid's own and those from outside, newest first")
    ls.add_argument("--kind", default=None, help=f"only this kind: {KINDS_HELP}, or Ongrid's own kinds")
    ls.add_argument("--subject", default=None, help="only changes of this subject (exact)")
    ls.add_argument("--since", default=None, metavar="TIME", type=_ago,
                    help="from this time on: RFC 3339, unix seconds, 'now-2h', or '2h' for 2 hours ago")
    ls.add_argument("--until", default=None, metavar="TIME", type=_ago, help="before this time (the same forms)")
    ls.add_argument("--limit", type=int, default=50, help="at most this many (1..1000, default 50)")
    ls.add_argument("--json", action="store_true", help="print the rows as JSON")
    add_client_args(ls)
    ls.set_defaults(func=run_list)


#: a bare duration ("2h", "1h30m", "90m"): for --since and --until it means that long ago
_BARE_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w|y))+")


def _ago(value: str) -> str:
    """``value`` as the daemon's time grammar reads it: a bare duration is that long ago (``2h`` →
    ``now-2h``); anything else is passed on as written (the daemon names what it cannot read)."""
    return f"now-{value.strip()}" if _BARE_DURATION.fullmatch(value.strip().lower()) else value


def run_list(args: argparse.Namespace) -> int:
    from urllib.parse import urlencode

    from ongridd.cli.termui import one_line

    query = {k: v for k, v in (("kind", args.kind), ("subject", args.subject), ("since", args.since),
                               ("until", args.until), ("limit", str(args.limit))) if v is not None}
    answer, failed = _call(args, "GET", "/api/changes?" + urlencode(query), None, "list")
    if failed:
        return failed
    rows = answer.get("changes", []) if isinstance(answer, dict) else []
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print("no changes recorded" + (" matching that" if len(query) > 1 else ""))
        return 0
    width = min(40, max(len("SUBJECT"), *(len(str(row.get("subject"))) for row in rows)))  # the actors line up
    when = max(len("OCCURRED AT"), *(len(str(row.get("occurred_at"))) for row in rows))
    print(f"{'OCCURRED AT':<{when}}  {'KIND':<11} {'SUBJECT':<{width}}  ACTOR, DETAIL")
    for row in rows:
        by = f" (recorded by {row['recorded_by']})" if row.get("recorded_by") else ""
        detail = json.dumps(row.get("detail") or {}, ensure_ascii=False, sort_keys=True)
        print(one_line(f"{str(row.get('occurred_at')):<{when}}  {str(row.get('kind')):<11} {str(row.get('subject')):<{width}}  "
                       f"by {row.get('actor')}{by}  {detail if detail != '{}' else ''}").rstrip())
    return 0


def run(args: argparse.Namespace) -> int:
    body: dict = {"kind": args.kind, "subject": args.subject, "actor": args.actor}
    if args.detail is not None:
        try:
            detail = json.loads(args.detail)
        except ValueError as exc:
            print(f"ongrid changes record: --detail is not valid JSON: {exc}", file=sys.stderr)
            return 2
        if not isinstance(detail, dict):
            print("ongrid changes record: --detail must be a JSON object such as '{\"version\": \"1.4.2\"}'",
                  file=sys.stderr)
            return 2
        body["detail"] = detail
    if args.at is not None:
        body["at"] = args.at
    row, failed = _call(args, "POST", "/api/changes", body, "record")
    if failed:
        return failed
    if args.json:
        print_json(row)
    else:
        print(row.get("id", ""))
    return 0


def _call(args: argparse.Namespace, method: str, path: str, body: Any, command: str) -> tuple[Any, int]:
    """The daemon's answer and 0; or None and the exit code (2: not reached, 1: an HTTP error), the
    reason printed on stderr."""
    try:
        return http_json(method, args, path, body, timeout_s=30), 0
    except ClientError as exc:
        print(f"ongrid changes {command}: {exc}", file=sys.stderr)
        return None, 2
    except RuntimeError as exc:
        example = "--since 24h is 24 hours ago" if command == "list" else "--at 15m is 15 minutes ago"
        hint = (f" (here a bare duration works too: {example})" if "relative value such as" in str(exc) else "")
        print(f"ongrid changes {command}: {exc}{hint}", file=sys.stderr)
        return None, 1
