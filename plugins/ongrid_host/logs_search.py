"""``search_logs``: log files under ``logs.dirs`` and the systemd journal,
on this host or an inventory host over ssh, streamed in constant memory.

Files: the folders of ``logs.dirs`` (or the ``paths`` asked for, each inside
one of them) are walked (at most :data:`MAX_FILES` regular files, depth
:data:`MAX_DEPTH`, symlinks not followed), newest modification first.  Each
file is streamed through ``gzip -cdf`` (plain files pass through, rotated
``.gz`` files are decompressed) into a :class:`LineSplitter`; a file whose
first 8 KiB hold a NUL byte is skipped as binary.  Files that cannot hold
lines after ``since`` (older mtime) are not read.  Every path is checked
against ``logs.dirs`` and the host plugin's :class:`PathPolicy` (secrets:
ssh keys, password files, Ongrid's own state…) — on this host by where it
really leads (symlinks resolved), over ssh lexically.

Journal: ``journalctl -o json -r`` (newest first; ``--directory`` for each
of ``logs.journal_dirs``; ``-u``, ``-p``, ``--since``/``--until`` as
``@unix``), each JSON entry bounded (:data:`MAX_JOURNAL_ENTRY`), the
pattern matched against ``MESSAGE``.

Audit records (EXECVE, PROCTITLE, sudo's USER_CMD, in the journal or in
``audit.log``) write a command's arguments in hexadecimal as soon as one
holds a space: such a record also matches by the command it decodes to, and
is shown with its argument fields decoded (:func:`hit_line`).

Both stop at the time limit (result ``complete: false``).  Hits are the
``limit`` newest matches (by timestamp; lines without one rank by file age
and line number), newest first.  Cancellation kills the reader processes.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import posixpath
import stat
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from ongridd.plugins.api import REDACTED_NOTE, AuditCommand, audit_records, redact_credentials, ascii_digits
from ongrid_host.logs_lines import LineSplitter, Matcher, last_timestamp, line_timestamp
from ongrid_host.path_policy import PathPolicy, normalize
from ongrid_host.services import UNIT_RE
from ongrid_host.target import Target
from ongridd.plugins.api import ToolError
from ongridd.plugins.api import iso_utc

MAX_FILES = 500
MAX_DEPTH = 4
MAX_LINE_BYTES = 2048
MAX_JOURNAL_ENTRY = 256 * 1024
BINARY_PROBE = 8192
PRIORITIES = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")
_CONTROL = {c: "\ufffd" for c in (*range(9), *range(11, 32), 127)}


@attrs.define
class Query:
    """One search: ``match`` (a :class:`Matcher`), window ``since``/``until``
    (unix seconds or None), ``limit`` hits, ``deadline`` (``trio.current_time()``
    value after which reading stops)."""

    match: Matcher
    since: float | None
    until: float | None
    limit: int
    deadline: float


@attrs.define
class Hits:
    """The running totals and the ``limit`` newest hits (a bounded min-heap)."""

    limit: int
    heap: list[tuple[tuple, int, Callable[[], dict]]] = attrs.field(factory=list)
    total_matched: int = 0
    scanned_bytes: int = 0
    complete: bool = True
    seq: int = 0
    sources: list[dict] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)

    def add(self, rank: tuple, hit: Callable[[], dict]) -> None:
        """Count one match; keep it if it ranks among the newest.  ``hit()``
        builds the hit's dict; it is called only for the hits returned."""
        self.total_matched += 1
        self.seq += 1
        if len(self.heap) < self.limit:
            heapq.heappush(self.heap, (rank, self.seq, hit))
        elif self.limit and rank > self.heap[0][0]:
            heapq.heapreplace(self.heap, (rank, self.seq, hit))

    def result(self) -> dict[str, Any]:
        """The answer: the hits newest first, their lines passed through the
        credential filter (``redacted`` says when it hid something), the totals."""
        hits = [h() for _, _, h in sorted(self.heap, key=lambda e: (e[0], e[1]), reverse=True)]
        redacted = False
        for hit in hits:
            shown = redact_credentials(hit["line"])
            if shown != hit["line"]:
                hit["line"], redacted = shown, True
        out: dict[str, Any] = {"hits": hits, "total_matched": self.total_matched,
                               "more_available": self.total_matched > len(hits) or not self.complete,
                               "scanned_bytes": self.scanned_bytes, "complete": self.complete,
                               "sources": self.sources[:50]}
        if len(self.sources) > 50:
            self.notes.append(f"{len(self.sources) - 50} more sources not listed")
        if self.notes:
            out["notes"] = self.notes
        if redacted:
            out["redacted"] = REDACTED_NOTE
        return out


def shown_line(line: bytes, cut: int) -> str:
    """A line as text: UTF-8 (bad bytes → U+FFFD), control characters
    replaced, a trailing CR dropped, a cut noted."""
    text = line.rstrip(b"\r").decode("utf-8", "replace").translate(_CONTROL)
    return text + (f" …[{cut} more bytes cut]" if cut else "")


#: what only an audit record carrying a command line holds (EXECVE, PROCTITLE, sudo's USER_CMD,
#: pam_tty_audit's TTY and USER_TTY; their numbers in the kernel log), so other lines cost nothing more
AUDIT_MARKS = (b"EXECVE", b"PROCTITLE", b"USER_CMD", b"TTY", b"type=1309", b"type=1327", b"type=1123", b"type=1319",
               b"type=1124")


def _records(line: bytes, cut: int) -> tuple[str, list[AuditCommand]]:
    """The line as :func:`shown_line` shows it, and the audit records on it (none for most lines)."""
    text = shown_line(line, cut)
    return text, (audit_records(text) if any(mark in line for mark in AUDIT_MARKS) else [])


def audit_match(match: Matcher, line: bytes, cut: int) -> bool:
    """Whether ``line`` is an audit record whose command — hexadecimal or quoted in the record —
    matches (``mysql`` finds ``a0=6D7973716C…``)."""
    _, records = _records(line, cut)
    return any(match.line(r.text.encode("utf-8", "surrogatepass")) for r in records)


def hit_line(line: bytes, cut: int) -> str:
    """A hit's line as :func:`shown_line` shows it, an audit record's argument fields shown
    decoded — unless the line holds anything secret-looking: then the credential filter of
    :meth:`Hits.result` shows it (the fields decoded where their command holds the secret)."""
    text, records = _records(line, cut)
    if not records or redact_credentials(text) != text:
        return text
    for record in reversed(records):  # from the end: the earlier spans stay where they are
        text = record.in_line(text)
    return text


# ---- which files --------------------------------------------------------------


def _under(path: str, root: str) -> bool:
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


def check_log_path(path: str, dirs: Sequence[str], policy: PathPolicy, *, local: bool) -> str:
    """The path to read (absolute, normalised; on this host with symlinks
    resolved) or ToolError saying why it is refused: not absolute, outside
    every ``logs.dirs`` folder, or a secret (the policy's reason)."""
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
        raise ToolError(f"paths: {path!r} is not an absolute path")
    lex = normalize(path, "/")
    real = os.path.realpath(lex) if local else lex
    roots = [os.path.realpath(d) if local else normalize(d, "/") for d in dirs]
    if not any(_under(real, r) for r in roots) or not any(_under(lex, r) for r in
                                                           [normalize(d, "/") for d in dirs] + roots):
        shown = lex if real == lex else f"{lex} (resolves to {real})"
        raise ToolError(f"paths: {shown} is outside logs.dirs ({', '.join(dirs) or 'none configured'}); "
                        "search_logs reads only those folders (set logs.dirs in the Ongrid config)")
    problem = policy.read_problem(lex)
    if problem:
        raise ToolError(f"paths: refused: {problem}")
    return real


def list_local_files(roots: Sequence[str], policy: PathPolicy) -> tuple[list[tuple[float, int, str]], list[str]]:
    """(files as (mtime, size, path) newest first, notes) under ``roots``
    (blocking: run it in a thread).  Secret files are left out silently
    only when they were found by walking; unreadable folders are noted."""
    found: dict[str, tuple[float, int, str]] = {}
    notes: list[str] = []

    def visit(path: str, depth: int) -> None:
        if len(found) >= MAX_FILES:
            return
        try:
            st = os.lstat(path)
        except OSError as exc:
            notes.append(f"{path}: {exc.strerror or exc}")
            return
        if stat.S_ISREG(st.st_mode):
            if policy.read_problem(path) is None:
                found.setdefault(path, (st.st_mtime, st.st_size, path))
            return
        if not stat.S_ISDIR(st.st_mode) or depth > MAX_DEPTH:
            return
        try:
            with os.scandir(path) as it:
                names = sorted(e.name for e in it)
        except OSError as exc:
            notes.append(f"{path}: {exc.strerror or exc}")
            return
        for name in names:
            visit(posixpath.join(path, name), depth + 1)

    for root in roots:
        visit(root, 0)
    if len(found) >= MAX_FILES:
        notes.append(f"stopped listing at {MAX_FILES} files; name narrower paths")
    return sorted(found.values(), key=lambda f: (-f[0], f[2])), notes


async def list_remote_files(target: Target, roots: Sequence[str], policy: PathPolicy,
                            timeout_s: float) -> tuple[list[tuple[float, int, str]], list[str]]:
    """Like :func:`list_local_files` on a host over ssh (``find -printf``)."""
    # NUL-terminated rows: a file name may hold tabs and newlines, never a NUL
    argv = ["find", *roots, "-maxdepth", str(MAX_DEPTH + 1), "-type", "f", "-printf", r"%T@\t%s\t%p\0"]
    result = await target.run(argv, timeout_s=timeout_s, max_stdout=1024 * 1024)
    notes = [ln[:300] for ln in result.text("stderr").splitlines()[:5] if ln.strip()]
    files = []
    for row in result.text("stdout").split("\0"):
        parts = row.split("\t", 2)
        if len(parts) != 3:
            continue
        try:
            mtime, size = float(parts[0]), int(parts[1])
        except ValueError:
            continue
        path = parts[2]
        if any(_under(path, r) for r in roots) and policy.read_problem(path) is None:
            files.append((mtime, size, path))
    files.sort(key=lambda f: (-f[0], f[2]))
    if len(files) > MAX_FILES:
        notes.append(f"stopped at {MAX_FILES} files; name narrower paths")
    return files[:MAX_FILES], notes


# ---- reading --------------------------------------------------------------


async def stream_command(target: Target, argv: list[str], feed: Callable[[bytes], str | None], query: Query,
                         hits: Hits, source: dict[str, Any]) -> tuple[Any, str | None]:
    """Run ``argv`` on ``target`` and hand every stdout chunk to ``feed``
    (counted in ``source`` and ``hits``) until it ends, ``feed`` returns a
    reason to stop (e.g. ``"binary"``) or the query's deadline passes
    (``"time"``).  Returns ``(RunResult or None when stopped early, reason or
    None)``; stopping kills the command.  ToolError as :meth:`Target.run`."""
    stopped: str | None = None
    result = None
    remaining = query.deadline - trio.current_time()
    if remaining <= 0:
        return None, "time"
    with trio.CancelScope() as scope:
        def on_chunk(chunk: bytes) -> None:
            nonlocal stopped
            if stopped:
                return
            source["scanned_bytes"] += len(chunk)
            hits.scanned_bytes += len(chunk)
            stopped = feed(chunk)
            if stopped is None and trio.current_time() >= query.deadline:
                stopped = "time"
            if stopped:
                scope.cancel()

        result = await target.run(argv, timeout_s=remaining, max_stdout=0, max_stderr=4096, on_stdout=on_chunk,
                                  reads_for_us=True)
    if result is not None and result.timed_out:
        stopped = stopped or "time"
    return (None if stopped else result), stopped


async def scan_file(target: Target, path: str, mtime: float, rank: int, query: Query, hits: Hits) -> None:
    """Stream one file through ``gzip -cdf`` and count/keep its matches."""
    splitter = LineSplitter(MAX_LINE_BYTES)
    source: dict[str, Any] = {"host": target.name, "file": path, "scanned_bytes": 0, "matched": 0}
    hits.sources.append(source)
    year = time.localtime(mtime).tm_year
    state: dict[str, Any] = {"probe": bytearray(), "last_ts": None, "stopped": None}

    def line(n: int, raw: bytes, cut: int) -> None:
        ts = line_timestamp(raw, year=year)
        if ts is not None and ts > mtime + 2 * 86400 and raw[:1].isalpha():  # a syslog line from last year
            ts = line_timestamp(raw, year=year - 1)
        when = ts if ts is not None else state["last_ts"]
        if ts is not None:
            state["last_ts"] = ts
        if when is not None and ((query.since is not None and when < query.since)
                                 or (query.until is not None and when > query.until)):
            return
        if not query.match.line(raw) and not audit_match(query.match, raw, cut):
            return
        source["matched"] += 1
        hits.add((ts is not None, ts or 0.0, -rank, n),
                 lambda: {"host": target.name, "file": path, "line_no": n,
                          "timestamp": iso_utc(ts) if ts is not None else None, "line": hit_line(raw, cut)})

    def feed(chunk: bytes) -> str | None:
        probe = state["probe"]
        if len(probe) < BINARY_PROBE:
            probe += chunk[:BINARY_PROBE - len(probe)]
            if b"\0" in probe:
                return "binary"
        # an audit record's command may match only decoded: such a block is read line by line
        if query.match.block(splitter.pending[-MAX_LINE_BYTES:] + chunk[:MAX_LINE_BYTES]) or \
                query.match.block(chunk) or any(mark in chunk for mark in AUDIT_MARKS):
            for n, raw, cut in splitter.feed(chunk):
                line(n, raw, cut)
        else:  # no line here matches: count the lines, note the last timestamp
            done = splitter.skip(chunk)
            if query.since is not None or query.until is not None:
                ts = last_timestamp(done, year=year)
                if ts is not None:
                    state["last_ts"] = ts
        return None

    result, state["stopped"] = await stream_command(target, ["gzip", "-cdf", "--", path], feed, query, hits,
                                                    source)
    if result is not None and not state["stopped"] and result.exit_code not in (0, 2):
        # 2: gzip's "trailing garbage" warning
        err = result.text("stderr").strip().replace(f"gzip: {path}: ", "")
        source["error"] = (err or f"reader exited with status {result.exit_code}")[:300]
    if state["stopped"] == "binary":
        source["skipped"] = "binary data (a NUL byte in the first 8 KiB)"
        return
    if state["stopped"] == "time":
        hits.complete = False
        source["partial"] = True
        return
    for n, raw, cut in splitter.finish():
        line(n, raw, cut)
    source["lines"] = splitter.line_no


def journal_argv(directory: str | None, unit: str | None, priority: str | None, since: float | None,
                 until: float | None) -> list[str]:
    """The ``journalctl`` words for one journal (the system one when ``directory`` is None)."""
    # only the fields read below (the cursor and timestamps always come): never a crashed process's
    # environment or core (COREDUMP_*), which would pass through the daemon for nothing
    argv = ["journalctl", "-o", "json", "--output-fields=MESSAGE,_SYSTEMD_UNIT,SYSLOG_IDENTIFIER,_COMM",
            "--no-pager", "-q", "-r"]
    if directory:
        argv += ["--directory", directory]
    if unit:
        argv += ["-u", unit]
    if priority:
        argv += ["-p", priority]
    if since is not None:
        argv += [f"--since=@{math.floor(since)}"]
    if until is not None:
        argv += [f"--until=@{math.ceil(until)}"]
    return argv


def check_unit_name(unit: str) -> str:
    """A journal unit filter; ToolError for a name systemd would not accept."""
    if len(unit) > 255 or unit.startswith("-") or not UNIT_RE.match(unit):
        raise ToolError(f"unit: {unit!r} is not a valid systemd unit name (e.g. 'nginx' or 'nginx.service')")
    return unit


def check_priority(priority: str) -> str:
    """``0``–``7`` or a syslog level name (entries at that level or more urgent)."""
    p = str(priority).strip().lower()
    if p in PRIORITIES or (ascii_digits(p) and 0 <= int(p) <= 7):
        return p
    raise ToolError(f"priority: expected 0-7 or one of {', '.join(PRIORITIES)}, got {priority!r}")


def _message(value: Any) -> bytes | None:
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value[:MAX_LINE_BYTES]):
        return bytes(value[:MAX_LINE_BYTES * 2])  # journald stores non-UTF-8 messages as byte arrays
    return None


async def scan_journal(target: Target, directory: str | None, unit: str | None, priority: str | None,
                       query: Query, hits: Hits) -> None:
    """Stream one journal's entries (newest first) and count/keep the matches."""
    splitter = LineSplitter(MAX_JOURNAL_ENTRY)
    source: dict[str, Any] = {"host": target.name, "journal": directory or "system", "scanned_bytes": 0,
                              "entries": 0, "matched": 0}
    hits.sources.append(source)
    state = {"bad": 0}

    def entry(n: int, raw: bytes, cut: int) -> None:
        source["entries"] += 1
        if cut:
            state["bad"] += 1
            return
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON; nested past what the reader takes
            state["bad"] += 1
            return
        if not isinstance(obj, dict):
            return
        msg = _message(obj.get("MESSAGE"))
        if msg is None:
            return
        cut = max(0, len(msg) - MAX_LINE_BYTES)
        if not query.match.line(msg[:MAX_LINE_BYTES]) and not audit_match(query.match, msg[:MAX_LINE_BYTES], cut):
            return
        source["matched"] += 1
        try:
            ts = int(obj["__REALTIME_TIMESTAMP"]) / 1e6
        except (KeyError, TypeError, ValueError):
            ts = None
        name = obj.get("_SYSTEMD_UNIT") or obj.get("SYSLOG_IDENTIFIER") or obj.get("_COMM")
        hits.add((ts is not None, ts or 0.0, 0, -n),
                 lambda: {"host": target.name, "unit": name if isinstance(name, str) else None,
                          "cursor": obj.get("__CURSOR"), "timestamp": iso_utc(ts) if ts is not None else None,
                          "line": hit_line(msg[:MAX_LINE_BYTES], cut)})

    def feed(chunk: bytes) -> str | None:
        for n, raw, cut in splitter.feed(chunk):
            entry(n, raw, cut)
        return None

    argv = journal_argv(directory, unit, priority, query.since, query.until)
    result, stopped = await stream_command(target, argv, feed, query, hits, source)
    if result is None or stopped:
        hits.complete = False
        source["partial"] = True
        return
    for n, raw, cut in splitter.finish():
        entry(n, raw, cut)
    if state["bad"]:
        source["unreadable_entries"] = state["bad"]
    err = result.text("stderr").strip()
    if result.exit_code != 0 or (err and source["entries"] == 0):
        if "No journal files were found" in err or ("No such file" in err and directory):
            source["note"] = "no journal files found"
        elif result.exit_code == 127 or "not found" in err and "journalctl" in err:
            source["error"] = "journalctl is not installed there"
        else:
            source["error"] = (err or f"journalctl exited with status {result.exit_code}")[:300]
