"""Load and processes of the local host (psutil)."""

from __future__ import annotations

import os
import shlex
import time
from typing import Any

import psutil
import trio

from ongridd.plugins.api import redact_credentials
from ongrid_host.units import human_bytes, iso_utc

#: filesystem types that hold no disk data (or are always full, like squashfs
#: images) and are left out of the per-mount usage
PSEUDO_FSTYPES = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "securityfs", "pstore", "debugfs",
    "tracefs", "mqueue", "hugetlbfs", "configfs", "fusectl", "bpf", "autofs", "binfmt_misc", "nsfs",
    "rpc_pipefs", "selinuxfs", "efivarfs", "squashfs", "ramfs", "fuse.gvfsd-fuse", "fuse.portal",
})
MAX_MOUNTS = 50
CPU_SAMPLE_S = 0.5


def mount_usage(mountpoint: str, fstype: str, device: str) -> dict[str, Any] | None:
    """Usage of one mount (bytes and inodes), None when it cannot be read."""
    try:
        vfs = os.statvfs(mountpoint)
    except OSError:
        return None
    total = vfs.f_blocks * vfs.f_frsize
    avail = vfs.f_bavail * vfs.f_frsize
    used = (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize
    return {
        "mount": mountpoint, "device": device, "fstype": fstype,
        "size_bytes": total, "used_bytes": used, "available_bytes": avail,
        "used_pct": round(100.0 * used / (used + avail), 1) if used + avail else None,
        "size_human": human_bytes(total), "available_human": human_bytes(avail),
        "inodes_total": vfs.f_files, "inodes_free": vfs.f_ffree,
        "inodes_used_pct": round(100.0 * (vfs.f_files - vfs.f_ffree) / vfs.f_files, 1) if vfs.f_files else None,
    }


def _under_pseudo(mountpoint: str) -> bool:
    return mountpoint.startswith(("/proc/", "/sys/")) or mountpoint in ("/proc", "/sys")


def mounts_local() -> tuple[list[dict[str, Any]], int]:
    """Usage of every real mounted filesystem (pseudo ones and bind-mounted
    files skipped, one entry per mount point).  Returns (mounts, omitted)."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    omitted = 0
    for part in psutil.disk_partitions(all=True):
        if part.fstype in PSEUDO_FSTYPES or part.mountpoint in seen or _under_pseudo(part.mountpoint):
            continue
        if not os.path.isdir(part.mountpoint):  # a bind-mounted file (containers)
            continue
        seen.add(part.mountpoint)
        if len(out) >= MAX_MOUNTS:
            omitted += 1
            continue
        usage = mount_usage(part.mountpoint, part.fstype, part.device)
        if usage is not None and usage["size_bytes"] > 0:
            out.append(usage)
    return out, omitted


def _load_local_sync() -> dict[str, Any]:
    load1, load5, load15 = os.getloadavg()
    vm = psutil.virtual_memory()
    sw = psutil.swap_memory()
    boot = psutil.boot_time()
    mounts, omitted = mounts_local()
    return {
        "host": "local",
        "load_avg": {"1m": round(load1, 2), "5m": round(load5, 2), "15m": round(load15, 2)},
        "cpu_count": psutil.cpu_count(logical=True),
        "cpu_count_physical": psutil.cpu_count(logical=False),
        "memory": {
            "total_bytes": vm.total, "available_bytes": vm.available, "used_bytes": vm.total - vm.available,
            "used_pct": round(100.0 * (vm.total - vm.available) / vm.total, 1) if vm.total else None,
            "total_human": human_bytes(vm.total), "available_human": human_bytes(vm.available),
        },
        "swap": {"total_bytes": sw.total, "used_bytes": sw.used, "free_bytes": sw.free,
                 "used_pct": round(sw.percent, 1), "total_human": human_bytes(sw.total)},
        "mounts": mounts,
        "mounts_omitted": omitted,
        "uptime_s": int(time.time() - boot),
        "boot_time": iso_utc(boot),
    }


async def load_local() -> dict[str, Any]:
    """``get_host_load`` for this host.  Runs in a worker thread (statvfs on a
    hung network mount must not block the event loop); cancellation abandons
    the thread."""
    return await trio.to_thread.run_sync(_load_local_sync, abandon_on_cancel=True)


def redact_cmdline(args: list[str], max_chars: int = 300) -> str:
    """A process's argv as one line, quoted as a shell would need it (so an argument holding a
    space stays one word: ``-p'correct horse'`` is hidden whole), secret-looking values hidden
    (:func:`ongridd.credfilter.redact_credentials`), cut to ``max_chars``."""
    text = redact_credentials(shlex.join(arg.replace("\n", " ") for arg in args))
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def _snapshot() -> dict[int, psutil.Process]:
    procs = {}
    for p in psutil.process_iter():
        try:
            p.cpu_percent(None)  # first sample; the value is meaningless
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        procs[p.pid] = p
    return procs


def _measure(procs: dict[int, psutil.Process], top_n: int, sort_by: str) -> list[dict[str, Any]]:
    rows = []
    for pid, p in procs.items():
        try:
            with p.oneshot():
                cpu = p.cpu_percent(None)
                rss = p.memory_info().rss
                rows.append({
                    "pid": pid, "user": p.username(), "name": p.name(), "status": p.status(),
                    "cpu_pct": round(cpu, 1), "rss_bytes": rss, "rss_human": human_bytes(rss),
                    "started": iso_utc(p.create_time()),
                    "cmdline": p.cmdline(),
                })
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return top_processes(rows, top_n, sort_by)


def top_processes(rows: list[dict[str, Any]], top_n: int, sort_by: str) -> list[dict[str, Any]]:
    """The ``top_n`` of ``rows`` by ``sort_by`` (``cpu``: ``cpu_pct``, then ``rss_bytes``; else the
    reverse), largest first; the ``cmdline`` (a list of arguments) of each row kept becomes its
    :func:`redact_cmdline` text.  Sorts ``rows`` in place."""
    key = "cpu_pct" if sort_by == "cpu" else "rss_bytes"
    rows.sort(key=lambda r: (r[key], r["rss_bytes"] if key == "cpu_pct" else r["cpu_pct"]), reverse=True)
    kept = rows[:top_n]
    for row in kept:
        row["cmdline"] = redact_cmdline(row["cmdline"])
    return kept


async def processes_local(*, top_n: int, sort_by: str) -> dict[str, Any]:
    """``get_host_processes`` for this host: CPU % measured between two
    samples ``CPU_SAMPLE_S`` apart (a Trio sleep, not a blocking one; 100 % =
    one full CPU).  Cancellation during the interval just stops."""
    procs = await trio.to_thread.run_sync(_snapshot, abandon_on_cancel=True)
    await trio.sleep(CPU_SAMPLE_S)
    rows = await trio.to_thread.run_sync(_measure, procs, top_n, sort_by, abandon_on_cancel=True)
    return {"host": "local", "sort_by": sort_by, "cpu_interval_s": CPU_SAMPLE_S,
            "cpu_count": psutil.cpu_count(logical=True), "process_count": len(procs),
            "processes": rows}
