"""The host tools on remote hosts: fixed commands run over ssh (every
argument quoted with ``shlex.quote``), their output parsed into the same
shapes the local implementations return.

Assumes a Linux host with GNU coreutils/findutils and procps (``df
--output``, ``find -printf``, ``stat -c``, ``ps -o``, ``timeout``).
"""

from __future__ import annotations

import posixpath
import re
import shlex
import time
from typing import Any

from ongrid_host.fs import DuTree, LargeFiles, du_result, filesystem_info, large_files_result
from ongrid_host.local import CPU_SAMPLE_S, MAX_MOUNTS, PSEUDO_FSTYPES, top_processes
from ongrid_host.settings import HostSettings
from ongrid_host.ssh import run_remote, run_remote_checked
from ongrid_host.units import human_bytes, iso_utc
from ongrid_host.walk import MAX_SAMPLES, Entry, WalkState
from ongridd.plugins.api import ascii_digits, HostConfig
from ongridd.plugins.api import ToolError

SEP = "@@ongrid@@"
_READ_TIMEOUT_S = 20.0

LOAD_SCRIPT = (
    f"cat /proc/loadavg; echo {SEP}; getconf _NPROCESSORS_ONLN; echo {SEP}; cat /proc/meminfo; "
    f"echo {SEP}; cat /proc/uptime; date +%s; echo {SEP}; "
    "df -B1 --output=source,fstype,size,used,avail,itotal,iavail,target 2>/dev/null; true"
)

PROCESSES_SCRIPT = (
    f"getconf CLK_TCK; getconf PAGESIZE; date +%s; echo {SEP}; "
    f"cat /proc/uptime; cat /proc/[0-9]*/stat 2>/dev/null; echo {SEP}; sleep {CPU_SAMPLE_S}; "
    f"cat /proc/uptime; cat /proc/[0-9]*/stat 2>/dev/null; echo {SEP}; "
    "ps -e -ww -o pid=,user:32=,args="
)


def _sections(text: str, n: int, what: str, host: str) -> list[str]:
    parts = text.split(SEP + "\n")
    if len(parts) < n:
        raise ToolError(f"unexpected output of {what} on host {host!r} (is it a Linux host?)")
    return parts


def _int(s: str) -> int:
    return int(s.strip())


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` → {key: bytes}."""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and ascii_digits(fields[0]):
            mult = 1024 if len(fields) > 1 and fields[1] == "kB" else 1
            out[key.strip()] = int(fields[0]) * mult
    return out


def parse_df(text: str) -> tuple[list[dict[str, Any]], int]:
    """``df -B1 --output=source,fstype,size,used,avail,itotal,iavail,target``."""
    mounts: list[dict[str, Any]] = []
    seen: set[str] = set()
    omitted = 0
    for line in text.splitlines()[1:]:
        f = line.split(None, 7)
        if len(f) < 8 or f[1] in PSEUDO_FSTYPES or f[7] in seen or f[7].startswith(("/proc", "/sys")):
            continue
        try:
            size, used, avail = int(f[2]), int(f[3]), int(f[4])
        except ValueError:
            continue
        if size <= 0:
            continue
        seen.add(f[7])
        if len(mounts) >= MAX_MOUNTS:
            omitted += 1
            continue
        itotal = int(f[5]) if ascii_digits(f[5]) else None
        ifree = int(f[6]) if ascii_digits(f[6]) else None
        mounts.append({
            "mount": f[7], "device": f[0], "fstype": f[1],
            "size_bytes": size, "used_bytes": used, "available_bytes": avail,
            "used_pct": round(100.0 * used / (used + avail), 1) if used + avail else None,
            "size_human": human_bytes(size), "available_human": human_bytes(avail),
            "inodes_total": itotal, "inodes_free": ifree,
            "inodes_used_pct": (round(100.0 * (itotal - ifree) / itotal, 1)
                                if itotal and ifree is not None else None),
        })
    return mounts, omitted


async def load_remote(host: HostConfig, settings: HostSettings) -> dict[str, Any]:
    """``get_host_load`` for a remote host (from /proc and ``df``)."""
    text = await run_remote_checked(host, settings, LOAD_SCRIPT, timeout_s=_READ_TIMEOUT_S, what="get_host_load")
    loadavg, ncpu, meminfo, uptime, df = _sections(text, 5, "get_host_load", host.name)[:5]
    try:
        l1, l5, l15 = (float(x) for x in loadavg.split()[:3])
        mem = parse_meminfo(meminfo)
        up_lines = uptime.split()
        uptime_s = float(up_lines[0])
        now = int(up_lines[2])
        cpu_count = _int(ncpu)
    except (ValueError, IndexError) as exc:
        raise ToolError(f"unexpected output of get_host_load on host {host.name!r}: {exc}") from None
    total, avail = mem.get("MemTotal", 0), mem.get("MemAvailable", mem.get("MemFree", 0))
    sw_total, sw_free = mem.get("SwapTotal", 0), mem.get("SwapFree", 0)
    mounts, omitted = parse_df(df)
    return {
        "host": host.name,
        "load_avg": {"1m": l1, "5m": l5, "15m": l15},
        "cpu_count": cpu_count,
        "cpu_count_physical": None,
        "memory": {"total_bytes": total, "available_bytes": avail, "used_bytes": total - avail,
                   "used_pct": round(100.0 * (total - avail) / total, 1) if total else None,
                   "total_human": human_bytes(total), "available_human": human_bytes(avail)},
        "swap": {"total_bytes": sw_total, "used_bytes": sw_total - sw_free, "free_bytes": sw_free,
                 "used_pct": round(100.0 * (sw_total - sw_free) / sw_total, 1) if sw_total else 0.0,
                 "total_human": human_bytes(sw_total)},
        "mounts": mounts,
        "mounts_omitted": omitted,
        "uptime_s": int(uptime_s),
        "boot_time": iso_utc(now - uptime_s),
    }


def _parse_stats(text: str) -> tuple[float, dict[int, tuple[str, str, int, int, int]]]:
    """uptime line + /proc/*/stat lines → (uptime_s, {pid: (comm, state, ticks, start_ticks, rss_pages)})."""
    lines = text.splitlines()
    uptime = float(lines[0].split()[0])
    procs = {}
    for line in lines[1:]:
        lp, rp = line.find("("), line.rfind(")")
        if lp < 0 or rp < lp:
            continue
        try:
            pid = int(line[:lp])
            rest = line[rp + 2:].split()
            procs[pid] = (line[lp + 1:rp], rest[0], int(rest[11]) + int(rest[12]), int(rest[19]), int(rest[21]))
        except (ValueError, IndexError):
            continue
    return uptime, procs


async def processes_remote(host: HostConfig, settings: HostSettings, *, top_n: int,
                           sort_by: str) -> dict[str, Any]:
    """``get_host_processes`` for a remote host: two /proc/*/stat samples
    ``CPU_SAMPLE_S`` apart, names and command lines from ``ps``."""
    text = await run_remote_checked(host, settings, PROCESSES_SCRIPT, timeout_s=_READ_TIMEOUT_S,
                                    what="get_host_processes", max_stdout=8 * 1024 * 1024)
    head, first, second, ps = _sections(text, 4, "get_host_processes", host.name)[:4]
    try:
        clk, page, now = (int(x) for x in head.split()[:3])
        up1, s1 = _parse_stats(first)
        up2, s2 = _parse_stats(second)
    except (ValueError, IndexError) as exc:
        raise ToolError(f"unexpected output of get_host_processes on host {host.name!r}: {exc}") from None
    users: dict[int, tuple[str, str]] = {}
    for line in ps.splitlines():
        f = line.split(None, 2)
        if len(f) >= 2 and ascii_digits(f[0]):
            users[int(f[0])] = (f[1], f[2] if len(f) > 2 else "")
    interval = max(up2 - up1, 1e-3)
    boot = now - up2
    rows = []
    for pid, (comm, state, ticks, start, rss_pages) in s2.items():
        before = s1.get(pid)
        delta = ticks - before[2] if before and before[3] == start else ticks
        cpu = 100.0 * delta / clk / interval
        rss = rss_pages * page
        user, args = users.get(pid, (None, ""))
        rows.append({"pid": pid, "user": user, "name": comm, "status": state, "cpu_pct": round(cpu, 1),
                     "rss_bytes": rss, "rss_human": human_bytes(rss),
                     "started": iso_utc(boot + start / clk), "cmdline": args.split()})
    return {"host": host.name, "sort_by": sort_by, "cpu_interval_s": round(interval, 2),
            "cpu_count": None, "process_count": len(s2), "processes": top_processes(rows, top_n, sort_by)}


# ---- walks through find -printf ---------------------------------------------

_FIND_FMT = r"%H\t%y\t%s\t%b\t%D\t%i\t%n\t%T@\t%u\t%P\0"
_KINDS = {"d": "d", "f": "f", "l": "l"}


class _RecordParser:
    """Splits streamed ``find -printf`` output into NUL-ended records."""

    def __init__(self, roots: dict[str, Any], state: WalkState, on_entry):
        self.buf = b""
        self.roots = roots
        self.state = state
        self.on_entry = on_entry

    def feed(self, chunk: bytes) -> None:
        self.buf += chunk
        *records, self.buf = self.buf.split(b"\0")
        for rec in records:
            self._record(rec.decode("utf-8", "surrogateescape"))

    def _record(self, rec: str) -> None:
        f = rec.split("\t", 9)
        if len(f) != 10 or f[0] not in self.roots:
            self.state.errors += 1
            return
        try:
            entry = Entry(tuple(f[9].split("/")) if f[9] else (), _KINDS.get(f[1], "o"), int(f[2]),
                          int(f[3]) * 512, (int(f[4]), int(f[5])), int(f[6]), float(f[7]), f[8])
        except ValueError:
            self.state.errors += 1
            return
        self.state.entries += 1
        self.on_entry(f[0], entry)


_FIND_ERR = re.compile(r"^find: [\u2018'`\"](.*)[\u2019'\"]: Permission denied$")


def _find_error_path(line: str) -> str:
    """The path in GNU find's ``find: 'PATH': Permission denied`` (either
    quote style), or the whole line (at most 1,000 chars) when it has
    another shape."""
    m = _FIND_ERR.match(line[:4096])
    return m.group(1) if m else line[:1000]


async def _find_remote(host: HostConfig, settings: HostSettings, paths: list[str], state: WalkState,
                       time_limit_s: float, on_entry, *, extra: list[str] | None = None) -> None:
    """Stream ``find`` over ``paths`` on ``host`` into ``on_entry(root, Entry)``.

    Raises ToolError when a path does not exist there.  Sets
    ``state.partial_reason`` when the time limit cut the walk short.
    """
    parser = _RecordParser({p: None for p in paths}, state, on_entry)
    limit = max(1, int(time_limit_s))
    checks = "".join(f"{{ test -e {q} || test -L {q}; }} || {{ printf '%s\\n' {q} >&2; exit 3; }}; "
                     for q in map(shlex.quote, paths))
    cmd = (["timeout", str(limit), "find", "-P", *paths, "-xdev",
            "(", "-path", "/proc", "-o", "-path", "/sys", "-o", "-path", "/dev", ")", "-prune", "-o"]
           + (extra or []) + ["-printf", _FIND_FMT])
    result = await run_remote(host, settings, checks + shlex.join(cmd),
                              timeout_s=limit + settings.connect_timeout_s + 2,
                              max_stdout=0, on_stdout=parser.feed)
    stderr = result.text("stderr")
    if result.exit_code == 3:
        raise ToolError(f"paths: {stderr.strip()!r} does not exist on host {host.name!r}")
    state.errors += stderr.count("Permission denied")
    for line in stderr.splitlines():
        if "Permission denied" in line and len(state.error_samples) < MAX_SAMPLES:
            state.error_samples.append({"path": _find_error_path(line), "error": "Permission denied"})
    if result.timed_out or result.exit_code == 124:
        state.partial_reason = "time limit reached"


async def du_remote(host: HostConfig, settings: HostSettings, paths: list[str], *, depth: int, top_n: int,
                    time_limit_s: float) -> dict[str, Any]:
    """``host_du_summary`` on a remote host (``find -printf`` streamed and
    aggregated here, so the output size does not depend on the tree size)."""
    trees = {p: DuTree(p, depth) for p in paths}
    state = WalkState(deadline=time.monotonic() + time_limit_s)
    await _find_remote(host, settings, paths, state, time_limit_s, lambda root, e: trees[root].add(e))
    return du_result(host.name, list(trees.values()), state, depth=depth, top_n=top_n)


async def large_files_remote(host: HostConfig, settings: HostSettings, paths: list[str], *, top_n: int,
                             min_bytes: int, time_limit_s: float) -> dict[str, Any]:
    """``host_find_large_files`` on a remote host (only regular files of at
    least ``min_bytes`` are sent back; ranked here)."""
    lf = LargeFiles(top_n, min_bytes)
    state = WalkState(deadline=time.monotonic() + time_limit_s)
    extra = ["-type", "f", "-size", f"+{max(min_bytes - 1, 0)}c"] if min_bytes > 0 else ["-type", "f"]
    await _find_remote(host, settings, paths, state, time_limit_s, lf.add, extra=extra)
    return large_files_result(host.name, lf, state)


_STAT_FMT = r"%F\t%s\t%b\t%a\t%A\t%u\t%U\t%g\t%G\t%X\t%Y\t%Z\t%i\t%h\t%m\n"
_STATFS_FMT = r"%S\t%b\t%f\t%a\t%c\t%d\t%T\n"


async def stat_remote(host: HostConfig, settings: HostSettings, path: str) -> dict[str, Any]:
    """``host_stat_file`` on a remote host (GNU ``stat``)."""
    q = shlex.quote(path)
    qdir = shlex.quote(posixpath.dirname(path) or "/")
    script = (f"stat --printf={shlex.quote(_STAT_FMT)} -- {q} || exit 3; "
              f"if [ -L {q} ]; then printf '@@L\\t'; readlink -- {q}; "
              f"stat -f --printf={shlex.quote(_STATFS_FMT)} -- {qdir}; "
              f"else stat -f --printf={shlex.quote(_STATFS_FMT)} -- {q}; fi")
    result = await run_remote(host, settings, script, timeout_s=_READ_TIMEOUT_S)
    if result.exit_code == 3:
        raise ToolError(f"path: cannot stat {path!r} on host {host.name!r}: "
                        f"{result.text('stderr').strip()[-300:]}")
    lines = result.text("stdout").splitlines()
    try:
        f = lines[0].split("\t")
        (ftype, size, blocks, mode, mode_text, uid, user, gid, group, at, mt, ct, ino, links, mnt) = f[:15]
        out: dict[str, Any] = {
            "host": host.name, "path": path,
            "type": "regular file" if ftype == "regular empty file" else ftype,
            "size_bytes": int(size), "size_human": human_bytes(int(size)),
            "allocated_bytes": int(blocks) * 512,
            "mode": f"{int(mode, 8):04o}", "mode_text": mode_text,
            "uid": int(uid), "owner": None if user == "UNKNOWN" else user,
            "gid": int(gid), "group": None if group == "UNKNOWN" else group,
            "mtime": iso_utc(int(mt)), "atime": iso_utc(int(at)), "ctime": iso_utc(int(ct)),
            "inode": int(ino), "links": int(links),
        }
        rest = lines[1:]
        if rest and rest[0].startswith("@@L\t"):
            out["link_target"] = rest[0][4:]
            rest = rest[1:]
        if rest:
            bs, total, free, avail, itotal, ifree, fstype = rest[0].split("\t")[:7]
            out["filesystem"] = filesystem_info(int(total), int(free), int(avail), int(bs), int(itotal),
                                                int(ifree), mount_point=mnt, fstype=fstype)
    except (ValueError, IndexError):
        raise ToolError(f"unexpected output of stat on host {host.name!r}: "
                        f"{result.text('stdout')[:200]!r} {result.text('stderr')[:200]!r}") from None
    return out
