"""The ``search_logs`` tool (class ``read``): schema, argument checks and the
order of the search (files, then journals) — the reading itself is in
:mod:`ongrid_host.logs_search`.

Result: ``{hits: [{host, file, line_no, timestamp, line} | {host, unit,
cursor, timestamp, line}], total_matched, more_available, scanned_bytes,
complete, sources: [...], notes?}``; ``timestamp`` is ISO 8601 UTC or null.
Errors (ToolError → an error result): a bad pattern, time or unit, a path
outside ``logs.dirs`` or a secret file, an unknown host or a failed ssh.
"""

from __future__ import annotations

import time
from typing import Any

import trio

from ongrid_host.logs_lines import make_matcher
from ongrid_host.logs_search import (
    Hits,
    Query,
    check_log_path,
    check_priority,
    check_unit_name,
    list_local_files,
    list_remote_files,
    scan_file,
    scan_journal,
)
from ongridd.plugins.api import ToolError
from ongridd.plugins.api import Tool, ToolCallContext, parse_time

NAME = "search_logs"
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
#: reading stops after this long (seconds); the result then says complete: false
DEFAULT_TIME_LIMIT_S = 20.0
MAX_TIME_LIMIT_S = 45.0
_TIME = {"type": ["string", "number"]}


def parameters(host_param: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema (``host_param``: the host plugin's ``host`` property)."""
    return {"type": "object", "additionalProperties": False, "required": ["pattern"], "properties": {
        "pattern": {"type": "string", "minLength": 1, "maxLength": 1000,
                    "description": "text to find (literal, case-insensitive) or, with regex: true, an RE2 "
                                   "regular expression (use (?i) for case-insensitive)"},
        "host": host_param,
        "source": {"type": "string", "enum": ["files", "journal", "both"],
                   "description": "log files under logs.dirs, the systemd journal, or both (default)"},
        "paths": {"type": "array", "maxItems": 16, "items": {"type": "string", "minLength": 1},
                  "description": "files or folders to search, each inside logs.dirs (default: all of logs.dirs)"},
        "unit": {"type": "string", "minLength": 1, "maxLength": 255,
                 "description": "journal only: a systemd unit, e.g. 'nginx' or 'nginx.service'"},
        "priority": {"type": ["string", "integer"],
                     "description": "journal only: this level or more urgent: 0-7 or emerg, alert, crit, err, "
                                    "warning, notice, info, debug"},
        "since": {**_TIME, "description": "only lines at or after: unix seconds, RFC 3339 or relative 'now-1h'"},
        "until": {**_TIME, "description": "only lines at or before (same forms as since)"},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                  "description": f"hits to return, newest first (default {DEFAULT_LIMIT})"},
        "regex": {"type": "boolean", "description": "treat pattern as an RE2 regular expression (default false)"},
    }}


DESCRIPTION = (
    "Search a host's logs: files under the configured log folders (plain and rotated .gz, newest first) and "
    "the systemd journal (unit, priority). Literal text by default, or an RE2 regex. Each hit has host, file "
    "and line_no (or unit and journal cursor), the line's timestamp when it has one, and the line (long lines "
    "cut). Returns the newest hits, total_matched and more_available; files outside the log folders and "
    "secret files are refused.")


def make_search_logs(tools: Any) -> Tool:
    """Build the tool over a :class:`ongrid_host.tools.HostTools` (its context,
    targets and path policies)."""
    config = tools.context.config

    async def handler(args: dict[str, Any], ctx: ToolCallContext | None = None) -> dict[str, Any]:
        target = tools.target(args)
        now = time.time()
        since = parse_time(args["since"], now=now, field="since") if "since" in args else None
        until = parse_time(args["until"], now=now, field="until") if "until" in args else None
        if since is not None and until is not None and since > until:
            raise ToolError("since must be before until")
        match = make_matcher(args["pattern"], regex=bool(args.get("regex", False)))
        source = args.get("source", "both")
        unit = check_unit_name(args["unit"]) if "unit" in args else None
        priority = check_priority(args["priority"]) if "priority" in args else None
        limit = int(args.get("limit", DEFAULT_LIMIT))
        query = Query(match=match, since=since, until=until, limit=limit,
                      deadline=trio.current_time() + DEFAULT_TIME_LIMIT_S)
        hits = Hits(limit=limit)
        if source in ("files", "both"):
            await _files(tools, target, args, config.logs.dirs, query, hits)
        elif "paths" in args:
            raise ToolError("paths: give source 'files' or 'both' to search files")
        if (unit or priority) and source == "both":
            hits.notes.append("unit and priority filter the journal only; file lines are not filtered by them")
        if source in ("journal", "both"):
            for directory in (None, *config.logs.journal_dirs):
                await scan_journal(target, directory, unit, priority, query, hits)
        return hits.result()

    return Tool(name=NAME, description=DESCRIPTION, parameters=parameters(tools.host_param), handler=handler,
                tool_class="read", timeout_s=DEFAULT_TIME_LIMIT_S + 25)


async def _files(tools: Any, target: Any, args: dict[str, Any], dirs: tuple[str, ...], query: Query,
                 hits: Hits) -> None:
    policy = tools.local_paths if target.is_local else tools.remote_paths
    if not dirs:
        raise ToolError("no log folders configured (logs.dirs is empty)")
    asked = args.get("paths") or list(dirs)
    roots = list(dict.fromkeys(check_log_path(p, dirs, policy, local=target.is_local) for p in asked))
    if target.is_local:
        files, notes = await trio.to_thread.run_sync(list_local_files, roots, policy)
    else:
        files, notes = await list_remote_files(target, roots, policy,
                                               timeout_s=max(1.0, query.deadline - trio.current_time()))
    hits.notes.extend(notes[:10])
    older = 0
    for rank, (mtime, _size, path) in enumerate(files):
        if query.since is not None and mtime < query.since:
            older += 1
            continue
        if trio.current_time() >= query.deadline:
            hits.complete = False
            hits.notes.append(f"time limit reached; {len(files) - rank} files not read")
            break
        await scan_file(target, path, mtime, rank, query, hits)
    if older:
        hits.notes.append(f"{older} files last modified before 'since' were not read")
    if not files:
        hits.notes.append(f"no readable log files under {', '.join(roots)}")
