"""The host tools as :class:`Tool` objects (schemas, classes, handlers).

Every tool takes an optional ``host`` (an inventory name, default
``local``).  Local-only tools (the network probes) say so when given
another host.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any

import trio

from ongrid_host import fs, local, remote
from ongridd.plugins.api import REDACTED_NOTE, redact_credentials
from ongrid_host.bash_policy import Verdict, after_run_problem, analyze, pin_checked_files
from ongrid_host.path_policy import PathPolicy
from ongrid_host.egress import ProbeTargets
from ongrid_host.http_probe import probe_http
from ongrid_host.logs_tool import make_search_logs
from ongrid_host.probes import DNS_TYPES, probe_dns, probe_tcp
from ongrid_host.runner import reduced_privileges_prefix
from ongrid_host.services import check_unit, restart_service
from ongrid_host.settings import HostSettings, parse_settings
from ongrid_host.target import LOCAL, Target
from ongrid_host.units import check_walk_root, human_bytes, parse_size
from ongridd.plugins.api import HostConfig
from ongridd.plugins.api import ToolError
from ongridd.plugins.api import (
    Classification,
    Outcome,
    PluginContext,
    Proposal,
    Tool,
    ToolCallContext,
    call_key,
    classify_off_thread,
    database_file,
)

BASH_MAX_STDOUT = 12 * 1024
#: why a local read may be denied a file the daemon's own user could read as root
PERMISSION_NOTE = ("reads run as the daemon's user and groups without the capabilities that bypass file "
                   "permissions (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so each file is checked against its owner "
                   "and mode: a file of another user or service that they may not read by its mode is denied "
                   "here (stat shows its owner and mode); its owner, or an operator, can read it")
#: where an entry of journalctl's JSON output modes begins: a ``{`` at the start of a line, after
#: json-seq's record separator or json-sse's ``data:`` (inside an entry, a string's line breaks are
#: escaped, so no ``{`` of a message can be one of them)
_ENTRY_START = re.compile(r"^(?:\x1e|data: ?)?\{", re.MULTILINE)


def journal_json(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (as rebuilt, ``-o MODE``) is a journalctl printing one of its JSON modes."""
    return bool(argv) and argv[0] == "journalctl" and any(
        a == "-o" and b.startswith("json") for a, b in zip(argv, argv[1:], strict=False))


def _as_text(value: Any) -> Any:
    """A field's value with an array of byte values as the string of those bytes (UTF-8,
    undecodable bytes as U+FFFD); a repeated field's list, each of its values so."""
    if isinstance(value, list) and value and all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256
                                                 for b in value):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, list):
        return [_as_text(v) for v in value]
    return value


def journal_bytes_as_text(text: str) -> str:
    """``text`` (journalctl's JSON output: one entry per line, or pretty, json-seq, json-sse) with
    every field written as an array of byte values — how journalctl writes one that is not
    printable UTF-8, a message with a colour escape in it — written as the string of those bytes,
    so that what they hold is read, and redacted, as text: ``[27,91,…,116,111,107,…]`` would carry
    a secret past every filter.  An entry that does not parse is left as it is."""
    decoder = json.JSONDecoder()
    out: list[str] = []
    pos = 0
    for match in _ENTRY_START.finditer(text):
        start = match.end() - 1
        if start < pos:
            continue
        try:
            entry, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        if isinstance(entry, dict):
            shown = {key: _as_text(value) for key, value in entry.items()}
            if shown != entry:
                out += [text[pos:start], json.dumps(shown, ensure_ascii=False)]
                pos = end
    out.append(text[pos:])
    return "".join(out)
BASH_MAX_STDERR = 3 * 1024
BASH_MAX_TIMEOUT_S = 60
BASH_TOOL = "host_bash"
#: how long deciding whether a command is read-only may take (paths are resolved)
BASH_CLASSIFY_TIMEOUT_S = 5.0
WALK_MAX_S = 25

def _obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}

class HostTools:
    """Builds the tools for one plugin context (hosts and settings)."""

    def __init__(self, context: PluginContext):
        self.context = context
        self.settings: HostSettings = parse_settings(context.settings)
        self.targets = ProbeTargets.build(list(self.settings.probe_targets),
                                          [n for h in context.hosts for n in (h.name, h.address)])
        self.local_paths = PathPolicy.local(extra=self._daemon_areas(context))
        self.remote_paths = PathPolicy.remote()
        names = [h.name for h in context.hosts] or [LOCAL]
        if LOCAL not in names:
            names.insert(0, LOCAL)
        self.host_param = {"type": "string", "description": (
            "Where to run: a host name from the inventory (default 'local', the Ongrid host). "
            f"Known hosts: {', '.join(names[:20])}{' …' if len(names) > 20 else ''}.")}

    # ---- helpers --------------------------------------------------------

    @staticmethod
    def _daemon_areas(context: PluginContext) -> list[tuple[str, str]]:
        """The daemon's own state folder, config file (tokens), the ssh keys it logs in with and its
        SQLite database wherever it is (with its -wal, -shm and -journal files)."""
        areas = [(os.path.abspath(context.config.state_dir), "Ongrid's state folder (database, secrets)")]
        if context.config.source:
            areas.append((os.path.abspath(context.config.source), "Ongrid's configuration file"))
        for host in context.hosts:  # the keys the daemon itself logs in with
            if host.ssh_key:
                areas.append((os.path.abspath(host.ssh_key), f"the ssh key Ongrid uses for host {host.name!r}"))
        database = database_file(context.config)
        if database is not None:  # a database outside the state folder: every user's sessions
            for suffix in ("", "-wal", "-shm", "-journal"):
                areas.append((database + suffix, "Ongrid's database"))
        return areas

    def analyze(self, args: dict[str, Any]) -> Verdict:
        """The host_bash verdict for ``args`` on its target host (blocking:
        paths are resolved; call it off the event loop)."""
        name = args.get("host") or LOCAL
        return analyze(args.get("cmd", ""), self.local_paths if name == LOCAL else self.remote_paths)

    async def bash_verdict(self, args: dict[str, Any], ctx: ToolCallContext) -> Verdict:
        """The verdict the runner computed for these very arguments (carried
        in ``ctx.classification``), or — for a caller that did not classify —
        one computed now in a worker thread, bounded like the runner's."""
        carried = ctx.classification_for(call_key(BASH_TOOL, args))
        if carried is not None and isinstance(carried.detail, Verdict):
            return carried.detail
        return await classify_off_thread(self.analyze, args, timeout_s=BASH_CLASSIFY_TIMEOUT_S, what=BASH_TOOL)

    def target(self, args: dict[str, Any]) -> Target:
        """The Target for ``args['host']``; ToolError for an unknown host."""
        name = args.get("host") or LOCAL
        try:
            host = self.context.host(name)
        except ToolError:
            if name != LOCAL:
                raise
            host = HostConfig(name=LOCAL)
        return Target(host=host, settings=self.settings)

    def local_only(self, tool: str, args: dict[str, Any], hint: str = "") -> None:
        t = self.target(args)
        if not t.is_local:
            raise ToolError(f"{tool} runs from the Ongrid host only (host 'local'), not from {t.name!r}{hint}; "
                            "to check from that host, use host_bash there (e.g. 'ss -tn', 'ip route get ADDR')")

    def props(self, **extra: Any) -> dict[str, Any]:
        return {"host": self.host_param, **extra}

    # ---- tools ----------------------------------------------------------

    def all(self) -> list[Tool]:
        return [self.get_host_load(), self.get_host_processes(), self.host_du_summary(),
                self.host_find_large_files(), self.host_stat_file(), self.host_probe_http(),
                self.host_probe_dns(), self.host_probe_tcp(), self.host_bash(), self.host_restart_service(),
                make_search_logs(self)]

    def get_host_load(self) -> Tool:
        async def handler(args: dict[str, Any], ctx: ToolCallContext) -> Any:
            t = self.target(args)
            return await local.load_local() if t.is_local else await remote.load_remote(t.host, self.settings)

        return Tool(
            name="get_host_load",
            description=("Load of a host: load averages (1/5/15 min), CPU count, memory and swap, usage of "
                         "every real mounted filesystem (bytes and inodes; pseudo filesystems skipped), uptime."),
            parameters=_obj(self.props()), handler=handler, timeout_s=25)

    def get_host_processes(self) -> Tool:
        async def handler(args: dict[str, Any], ctx: ToolCallContext) -> Any:
            t = self.target(args)
            top_n, sort_by = args.get("top_n", 10), args.get("sort_by", "cpu")
            if t.is_local:
                return await local.processes_local(top_n=top_n, sort_by=sort_by)
            return await remote.processes_remote(t.host, self.settings, top_n=top_n, sort_by=sort_by)

        return Tool(
            name="get_host_processes",
            description=("Top processes of a host by CPU (measured over 0.5 s; 100 = one full CPU) or by resident "
                         "memory: pid, user, name, state, cpu_pct, rss, start time, command line (secrets in "
                         "password=/token= arguments hidden)."),
            parameters=_obj(self.props(
                top_n={"type": "integer", "minimum": 1, "maximum": 100,
                       "description": "how many processes to return (default 10)"},
                sort_by={"type": "string", "enum": ["cpu", "rss"],
                         "description": "order: 'cpu' (default) or 'rss' (resident memory)"})),
            handler=handler, timeout_s=25)

    def _walk_roots(self, args: dict[str, Any], t: Target) -> list[str]:
        paths = args["paths"]
        roots = [check_walk_root(p, field="paths", local=t.is_local) for p in paths]
        return list(dict.fromkeys(roots))

    def host_du_summary(self) -> Tool:
        async def handler(args: dict[str, Any], ctx: ToolCallContext) -> Any:
            t = self.target(args)
            roots = self._walk_roots(args, t)
            kw = {"depth": args.get("depth", 1), "top_n": args.get("top_n", 10),
                  "time_limit_s": args.get("time_limit_s", 10)}
            if t.is_local:
                return await fs.du_local(roots, **kw)
            return await remote.du_remote(t.host, self.settings, roots, **kw)

        return Tool(
            name="host_du_summary",
            description=("Disk usage of folders on a host, like 'du -x': for each path its total and its "
                         "subdirectories down to `depth`, largest first (allocated = disk space used, apparent = "
                         "file sizes), with file and folder counts. Stays on one filesystem, never enters /proc, "
                         "/sys or /dev, does not follow symlinks, counts unreadable entries instead of failing. "
                         "If the time limit is reached or some paths could not be read, the result says "
                         "partial: true, why (partial_reason) and which paths were not read (unreadable_paths, "
                         "unreadable_count), and shows what was covered."),
            parameters=_obj(self.props(
                paths={"type": "array", "minItems": 1, "maxItems": 16,
                       "items": {"type": "string", "minLength": 1},
                       "description": "absolute paths to measure, e.g. ['/var']"},
                depth={"type": "integer", "minimum": 1, "maximum": 5,
                       "description": "subdirectory levels to list (default 1)"},
                top_n={"type": "integer", "minimum": 1, "maximum": 50,
                       "description": "largest entries kept per level (default 10)"},
                time_limit_s={"type": "number", "minimum": 1, "maximum": WALK_MAX_S,
                              "description": f"walk at most this long, then return a partial result "
                                             f"(default 10, max {WALK_MAX_S})"}),
                ("paths",)),
            handler=handler, timeout_s=WALK_MAX_S + 10)

    def host_find_large_files(self) -> Tool:
        async def handler(args: dict[str, Any], ctx: ToolCallContext) -> Any:
            t = self.target(args)
            roots = self._walk_roots(args, t)
            kw = {"top_n": args.get("top_n", 20), "min_bytes": parse_size(args.get("min_size", "1M")),
                  "time_limit_s": args.get("time_limit_s", 10)}
            if t.is_local:
                return await fs.large_files_local(roots, **kw)
            return await remote.large_files_remote(t.host, self.settings, roots, **kw)

        return Tool(
            name="host_find_large_files",
            description=("The largest files under folders of a host, ranked by disk space used: path, size, "
                         "allocated bytes (sparse files flagged), mtime, owner. Same bounds as host_du_summary "
                         "(one filesystem, no /proc /sys /dev, no symlinks followed, time limit → partial)."),
            parameters=_obj(self.props(
                paths={"type": "array", "minItems": 1, "maxItems": 16,
                       "items": {"type": "string", "minLength": 1},
                       "description": "absolute paths to search, e.g. ['/var/log']"},
                top_n={"type": "integer", "minimum": 1, "maximum": 100,
                       "description": "how many files to return (default 20)"},
                min_size={"type": ["integer", "string"],
                          "description": "smallest file size to report: bytes, or '10M', '1G', '512K' "
                                         "(binary units; default '1M')"},
                time_limit_s={"type": "number", "minimum": 1, "maximum": WALK_MAX_S,
                              "description": f"search at most this long (default 10, max {WALK_MAX_S})"}),
                ("paths",)),
            handler=handler, timeout_s=WALK_MAX_S + 10)

    def host_stat_file(self) -> Tool:
        async def handler(args: dict[str, Any], ctx: ToolCallContext) -> Any:
            t = self.target(args)
            path = args["path"]
            if not path.startswith("/") or "\0" in path:
                raise ToolError(f"path: {path!r} is not an absolute path")
            if t.is_local:
                return await fs.stat_local(path)
            return await remote.stat_remote(t.host, self.settings, path)

        return Tool(
            name="host_stat_file",
            description=("Metadata of one file or folder on a host (symlinks not followed, target shown): type, "
                         "size, allocated bytes, mode, owner, mtime/atime/ctime, inode, link count, and the free "
                         "space and free inodes of its filesystem."),
            parameters=_obj(self.props(path={"type": "string", "minLength": 1, "description": "absolute path"}),
                            ("path",)),
            handler=handler, timeout_s=25)

    def host_probe_http(self) -> Tool:
        async def handler(args: dict[str, Any], ctx: ToolCallContext) -> Any:
            self.local_only("host_probe_http", args)
            return await probe_http(args["url"], method=args.get("method", "GET"),
                                    timeout_s=args.get("timeout_s", 10), insecure=args.get("insecure", False),
                                    ca_file=self.settings.ca_file, targets=self.targets)

        return Tool(
            name="host_probe_http",
            description=("One HTTP(S) request from the Ongrid host: status, timings in ms (dns, connect, tls, "
                         "ttfb, total), redirect location (not followed), and for https the certificate (issuer, "
                         "subject, expiry, days left). Certificates are verified; a failure is reported with its "
                         "reason and the certificate. Runs from host 'local' only."),
            parameters=_obj(self.props(
                url={"type": "string", "minLength": 1, "description": "http:// or https:// URL"},
                method={"type": "string", "enum": ["GET", "HEAD"], "description": "GET (default) or HEAD"},
                timeout_s={"type": "number", "minimum": 0.5, "maximum": 30,
                           "description": "time limit for the whole request (default 10)"},
                insecure={"type": "boolean",
                          "description": "make the request even if the certificate fails verification "
                                         "(default false; the failure is still reported)"}),
                ("url",)),
            handler=handler, timeout_s=35)

    def host_probe_dns(self) -> Tool:
        async def handler(args: dict[str, Any], ctx: ToolCallContext) -> Any:
            self.local_only("host_probe_dns", args)
            return await probe_dns(args["name"], args.get("type", "A"), server=args.get("server"),
                                   timeout_s=args.get("timeout_s", 5), targets=self.targets)

        return Tool(
            name="host_probe_dns",
            description=("One DNS query from the Ongrid host: rcode (NOERROR, NXDOMAIN, SERVFAIL…), answers "
                         "with TTLs, authority records, flags and duration. Runs from host 'local' only."),
            parameters=_obj(self.props(
                name={"type": "string", "minLength": 1,
                      "description": "name to look up (for PTR an IP address is accepted)"},
                type={"type": "string", "enum": list(DNS_TYPES), "description": "record type (default A)"},
                server={"type": "string", "description": "DNS server IP, optionally with :port "
                                                         "(default: the first nameserver in /etc/resolv.conf)"},
                timeout_s={"type": "number", "minimum": 0.5, "maximum": 15,
                           "description": "time limit (default 5)"}),
                ("name",)),
            handler=handler, timeout_s=20)

    def host_probe_tcp(self) -> Tool:
        async def handler(args: dict[str, Any], ctx: ToolCallContext) -> Any:
            self.local_only("host_probe_tcp", args,
                            hint=f" (to probe {args.get('host')}:{args['port']} from here, pass target="
                                 f"{args.get('host')!r})")
            return await probe_tcp(args["target"], args["port"], timeout_s=args.get("timeout_s", 5),
                                   targets=self.targets)

        return Tool(
            name="host_probe_tcp",
            description=("TCP connect from the Ongrid host to target:port: state open (accepting), closed "
                         "(refused), filtered (ICMP unreachable/prohibited) or timeout (no answer), with connect "
                         "and DNS times. Runs from host 'local' only."),
            parameters=_obj(self.props(
                target={"type": "string", "minLength": 1, "description": "host name or IP address to connect to"},
                port={"type": "integer", "minimum": 1, "maximum": 65535, "description": "TCP port"},
                timeout_s={"type": "number", "minimum": 0.1, "maximum": 30,
                           "description": "time limit (default 5)"}),
                ("target", "port")),
            handler=handler, timeout_s=35)

    def host_bash(self) -> Tool:
        def classify(args: dict[str, Any]) -> Classification:
            verdict = self.analyze(args)
            # a refused command never runs: it needs no review (the handler refuses it)
            return Classification(tool_class="write" if verdict.kind == "write" else "read", detail=verdict,
                                  reason=verdict.reason)

        def describe(args: dict[str, Any]) -> Proposal:
            return Proposal(action=f"run command: {args.get('cmd', '')}", target=args.get("host") or LOCAL,
                            blast_radius="single_host")

        async def handler(args: dict[str, Any], ctx: ToolCallContext) -> Any:
            verdict = await self.bash_verdict(args, ctx)
            if verdict.kind == "refused":
                raise ToolError(f"refused: {verdict.reason}. Nothing was run.")
            if verdict.kind == "write":
                if ctx.read_only:
                    raise ToolError(f"refused: persona {ctx.agent!r} is read-only and this command is not "
                                    f"read-only: {verdict.reason}. Nothing was run.")
                if not (args.get("reason") or "").strip():
                    raise ToolError(f"reason is required for a command that is not read-only "
                                    f"({verdict.reason}); nothing was run")
                if not ctx.approved(call_key(BASH_TOOL, args)):
                    raise ToolError(f"refused: this command is not read-only ({verdict.reason}) and runs only "
                                    "after the review gate approved this very call; no approval came with it. "
                                    "Nothing was run.")
            t = self.target(args)
            timeout_s = args.get("timeout_s", 15)
            # a read runs as the daemon's user and groups, without its file-read capability, and on the
            # very files that were checked (pinned: a path swapped after its check is refused); a
            # reviewed change runs with what the daemon has
            argv, fds, renamed = await trio.to_thread.run_sync(pin_checked_files, verdict, self.local_paths.cwd)
            try:
                result = await t.run(argv, timeout_s=timeout_s, max_stdout=BASH_MAX_STDOUT,
                                     max_stderr=BASH_MAX_STDERR, cwd=self.local_paths.cwd,
                                     reads_for_us=verdict.kind == "read", pass_fds=fds)
            finally:
                for fd in fds:
                    os.close(fd)
            if t.is_local and verdict.recheck_processes:
                # bounded (a process's command line can block its reader): unanswered in time, withheld
                problem: str | None = "pgrep: the processes' command lines could not be checked again in time"
                with trio.move_on_after(BASH_CLASSIFY_TIMEOUT_S):
                    problem = await trio.to_thread.run_sync(after_run_problem, verdict, abandon_on_cancel=True)
                if problem:
                    raise ToolError(f"refused: {problem}. It ran; its output is withheld.")
            # whatever ran (ps, a log, a unit file, a reviewed command): other programs' credentials in
            # its output (--token X, password=X, URL passwords) are hidden before the model sees them
            stdout, stderr = result.text("stdout"), result.text("stderr")
            for pinned, word in renamed:  # the files by the names they were given
                stdout, stderr = stdout.replace(pinned, word), stderr.replace(pinned, word)
            if journal_json(verdict.argv):
                stdout = journal_bytes_as_text(stdout)
            # in a thread: a hostile output can take the filter a good part of a second (it finishes
            # before a cancellation lands; the output is bounded)
            shown_out, shown_err = await trio.to_thread.run_sync(
                lambda: (redact_credentials(stdout), redact_credentials(stderr)))
            out = {
                "host": t.name, "argv": list(verdict.argv), "class": verdict.kind,
                "exit_code": result.exit_code, "timed_out": result.timed_out, "duration_ms": result.duration_ms,
                "stdout": shown_out, "stdout_bytes": result.stdout_total,
                "stdout_cut_bytes": result.stdout_cut,
                "stderr": shown_err, "stderr_bytes": result.stderr_total,
                "stderr_cut_bytes": result.stderr_cut,
            }
            if (shown_out, shown_err) != (stdout, stderr):
                out["redacted"] = REDACTED_NOTE
            notes = []
            if result.stdout_cut or result.stderr_cut:
                notes.append(f"output cut: kept the first {human_bytes(BASH_MAX_STDOUT)} of stdout and "
                             f"{human_bytes(BASH_MAX_STDERR)} of stderr")
            if verdict.kind == "read" and t.is_local and "Permission denied" in stderr and reduced_privileges_prefix():
                notes.append(PERMISSION_NOTE)
            if notes:
                out["note"] = "; ".join(notes)
            if result.timed_out:
                out["error"] = f"killed after {timeout_s:g} s"
                return Outcome(out, status="error")
            if verdict.kind != "read" and result.exit_code != 0:
                # a reviewed change that failed: its audit row and its change-log row say so (a read
                # that exits non-zero, grep finding nothing, is an answer)
                out["error"] = f"the command exited with status {result.exit_code}"
                return Outcome(out, status="error")
            return out

        return Tool(
            name=BASH_TOOL,
            description=("Run one command on a host, without a shell (no pipes, ';', '&&', redirections, "
                         "$(…), $VAR, globs or ~). Read-only commands on the allowlist (ls, cat, head, tail, "
                         "grep, cut, sort, uniq, diff, find, du, df, free, ps, ss, ip addr/route, stat, journalctl, "
                         "systemctl status/"
                         "show/list-units/cat, dmesg, …) run at once when every option is one the command may take "
                         "read-only; the result's `argv` shows the exact words that ran. An option, verb or "
                         "command that is not read-only is a change: it needs `reason` and passes the review "
                         "gate, and read-only personas may not run it (the refusal names the option or verb). "
                         "Secrets and /proc, /sys, /dev are never read, except the kernel statistics files "
                         "(/proc/loadavg, /proc/meminfo, /proc/pressure/*, /proc/PID/status, cgroup memory.* "
                         f"and cpu.* files). Output is capped ({human_bytes(BASH_MAX_STDOUT)} stdout)."),
            parameters=_obj(self.props(
                cmd={"type": "string", "minLength": 1, "maxLength": 4096,
                     "description": "the command line, split like a shell would split words"},
                reason={"type": "string",
                        "description": "why this is needed; required for commands off the read-only allowlist"},
                timeout_s={"type": "number", "minimum": 1, "maximum": BASH_MAX_TIMEOUT_S,
                           "description": "kill the command after this many seconds (default 15)"}),
                ("cmd",)),
            handler=handler, tool_class="read", classify=classify, describe=describe,
            timeout_s=BASH_MAX_TIMEOUT_S + 15, classify_timeout_s=BASH_CLASSIFY_TIMEOUT_S)

    def host_restart_service(self) -> Tool:
        def describe(args: dict[str, Any]) -> Proposal:
            service = args.get("service", "")
            try:
                unit = check_unit(service)
            except ToolError:
                unit = service
            host = args.get("host") or LOCAL
            return Proposal(action=f"restart service {unit}", target=f"{host}:{unit}", blast_radius="service")

        async def handler(args: dict[str, Any], ctx: ToolCallContext) -> Any:
            check_unit(args["service"])
            if not (args.get("reason") or "").strip():
                raise ToolError("reason: say why the service must be restarted")
            return await restart_service(self.target(args), args["service"])

        return Tool(
            name="host_restart_service",
            description=("Restart a systemd service on a host (systemctl restart), then report whether it is "
                         "active and since when. Destructive: passes the review gate. Fails clearly where "
                         "systemd is not running."),
            parameters=_obj(self.props(
                service={"type": "string", "minLength": 1, "maxLength": 255,
                         "description": "unit name, e.g. 'nginx' or 'nginx.service'"},
                reason={"type": "string", "minLength": 1, "description": "why the restart is needed"}),
                ("service", "reason")),
            handler=handler, tool_class="destructive", describe=describe, timeout_s=90)

def build_tools(context: PluginContext) -> list[Tool]:
    """Every host tool for ``context``.  Raises ConfigError for bad plugin settings."""
    return HostTools(context).all()
