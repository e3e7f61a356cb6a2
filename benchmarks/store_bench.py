"""Store throughput under concurrent writers (prints measured numbers).

    python benchmarks/store_bench.py [--writers 50] [--rows 40] [--url URL]

Default: a SQLite file in a temporary state dir.  With ``--url`` (e.g. a
PostgreSQL URL) the tables are created there by the migrations and the rows
are left behind, so point it at a scratch database.

Measures, with ``--writers`` Trio tasks each writing ``--rows`` rows:
  * append_message, each writer on its own session (workers in parallel)
  * append_message, all writers on one session (worst case for seq locking)
  * add_audit, each writer on its own session
and prints rows/s, the process RSS before and after, and the peak RSS.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import psutil
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ongridd.store import open_store


def rss_mb() -> float:
    return psutil.Process(os.getpid()).memory_info().rss / 2**20


async def _phase(label: str, writers: int, rows: int, write) -> tuple[str, int, float]:
    async def writer(w: int) -> None:
        for i in range(rows):
            await write(w, i)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for w in range(writers):
            nursery.start_soon(writer, w)
    elapsed = time.perf_counter() - start
    return label, writers * rows, elapsed


async def run(url: str, writers: int, rows: int) -> None:
    rss_start = rss_mb()
    async with open_store(url) as store:
        coord, _ = await store.get_or_create_coordinator("bench", f"bench-{time.time_ns()}")
        sessions = [
            (
                await store.create_session(
                    agent_id="specialist-bench", user_id="bench", parent_session_id=coord["id"], status="running"
                )
            )["id"]
            for _ in range(writers)
        ]
        payload = "x" * 400  # a typical short tool result

        async def own_session(w: int, i: int) -> None:
            await store.append_message(sessions[w], role="tool", content=payload, tool_call_id=f"c{i}", name="t")

        async def one_session(w: int, i: int) -> None:
            await store.append_message(coord["id"], role="user", content=payload)

        async def audit(w: int, i: int) -> None:
            await store.add_audit(
                session_id=sessions[w], tool_name="host_du_summary", arguments='{"paths":["/var"]}',
                result=payload, status="ok", duration_ms=12,
            )

        results = [
            await _phase("append_message (own session)", writers, rows, own_session),
            await _phase("append_message (one session)", writers, rows, one_session),
            await _phase("add_audit", writers, rows, audit),
        ]
        seqs = [m["seq"] for m in await store.load_messages(coord["id"])]
        assert seqs == list(range(1, writers * rows + 1)), "seq gap or duplicate under load"
        dialect = store.dialect
    rss_end = rss_mb()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

    print(f"store benchmark: {dialect}, {writers} concurrent writers × {rows} rows each")
    for label, n, elapsed in results:
        print(f"  {label:32s} {n:6d} rows in {elapsed:6.2f} s = {n / elapsed:8.0f} rows/s")
    print(f"  memory: RSS {rss_start:.1f} MiB before, {rss_end:.1f} MiB after, peak {peak:.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writers", type=int, default=50)
    parser.add_argument("--rows", type=int, default=40, help="rows per writer and phase")
    parser.add_argument("--url", default=None, help="database URL (default: SQLite in a temp dir)")
    args = parser.parse_args()
    if args.url:
        trio.run(run, args.url, args.writers, args.rows)
        return
    with tempfile.TemporaryDirectory(prefix="ongrid-bench-") as state_dir:
        trio.run(run, f"sqlite:///{Path(state_dir) / 'ongrid.db'}", args.writers, args.rows)


if __name__ == "__main__":
    main()
