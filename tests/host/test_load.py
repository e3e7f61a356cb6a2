"""get_host_load and get_host_processes on this machine: values a user would check."""

from __future__ import annotations

import os
import sys
from functools import partial

import trio


def _meminfo_bytes(key: str) -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


async def test_load_matches_the_kernel(call, tmp_path):
    result = await call("get_host_load")
    assert result["host"] == "local"
    assert result["cpu_count"] == os.cpu_count()
    assert result["memory"]["total_bytes"] == _meminfo_bytes("MemTotal")
    assert result["swap"]["total_bytes"] == _meminfo_bytes("SwapTotal")
    assert set(result["load_avg"]) == {"1m", "5m", "15m"} and result["load_avg"]["1m"] >= 0
    with open("/proc/uptime") as f:
        assert abs(result["uptime_s"] - float(f.read().split()[0])) < 120
    mounts = {m["mount"]: m for m in result["mounts"]}
    assert not [m for m in mounts if m == "/proc" or m.startswith(("/proc/", "/sys"))]
    assert not [m for m in result["mounts"] if m["fstype"] in ("proc", "sysfs", "cgroup2", "devpts")]
    # the filesystem holding the temporary folder is listed with the kernel's numbers
    here = os.stat(tmp_path).st_dev
    mine = [m for m in mounts.values() if os.stat(m["mount"]).st_dev == here]
    assert mine, f"no mount for {tmp_path} in {list(mounts)}"
    vfs = os.statvfs(tmp_path)
    assert mine[0]["size_bytes"] == vfs.f_blocks * vfs.f_frsize
    assert mine[0]["inodes_total"] == vfs.f_files


async def test_processes_finds_a_busy_process(call):
    spin = "import time\nend = time.time() + 60\nwhile time.time() < end: pass\n"
    async with trio.open_nursery() as nursery:
        proc = await nursery.start(partial(trio.run_process, [sys.executable, "-c", spin], check=False))
        try:
            result = await call("get_host_processes", {"top_n": 100, "sort_by": "cpu"})
        finally:
            proc.kill()
    assert result["cpu_interval_s"] == 0.5 and result["process_count"] > 1
    rows = {r["pid"]: r for r in result["processes"]}
    assert proc.pid in rows, "the spinning process is not among the top 100 by CPU"
    assert rows[proc.pid]["cpu_pct"] > 0 and rows[proc.pid]["name"].startswith("python")
    cpus = [r["cpu_pct"] for r in result["processes"]]
    assert cpus == sorted(cpus, reverse=True)


async def test_processes_by_rss(call):
    result = await call("get_host_processes", {"top_n": 5, "sort_by": "rss"})
    rss = [r["rss_bytes"] for r in result["processes"]]
    assert len(rss) == 5 and rss == sorted(rss, reverse=True) and rss[0] > 0
