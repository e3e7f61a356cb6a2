"""The store's share of one agent flow: time, CPU, SQL statements and commits
per flow, with an optional profile (prints measured numbers).

    python benchmarks/store_flow_bench.py [--flows 300] [--warmup 20] [--concurrent 100]
                                          [--batches 3] [--profile cprofile|none] [--db URL]

The flow of the peer benchmarks: a coordinator dispatches one worker with
``AgentTool``, the worker makes three ``rt_echo`` calls and answers, the
coordinator answers.  The model is an instant in-process client (no
network); the daemon is the real one (``run_daemon``: registries, runtime,
store writer, SQLite in a temporary state dir, or ``--db``), driven through
the runtime's own API (``open_thread`` → ``submit`` → the hub's ``final``),
so the websocket is not measured.  Everything is stored as in production:
two sessions, 12 messages, 4 audit rows per flow.

Figures: sequential mean/p50/p99 ms per flow and CPU ms per flow (process
CPU time over the measured flows), concurrent flows per second (batches of
``--concurrent`` flows at once), SQL statements and commits per flow
(SQLAlchemy engine events plus the store's prebuilt DBAPI statements and
transactions; BEGIN and COMMIT not counted as statements), writer transactions per flow, and
with ``--profile cprofile`` the 25 functions with the most cumulative time
over the sequential flows.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy as sa
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "runtime"))

from ongridd import logs
from ongridd.config import structure
from ongridd.daemon import run_daemon
from ongridd.llm.types import Completion, Message, ModelRequest, ToolCall
from ongridd.store import fastsql

WORKER = "rt-worker"
ECHO_CALLS = 3


class InstantModel:
    """A ModelClient answering at once from the request: the coordinator
    dispatches the worker until it has a tool result, the worker calls
    ``rt_echo`` until it has three results, then each answers."""

    def __init__(self) -> None:
        self.calls = 0

    async def stream(self, request: ModelRequest) -> Any:
        self.calls += 1
        results = sum(1 for m in request.messages if m.role == "tool")
        n = self.calls
        if request.agent == WORKER:
            if results < ECHO_CALLS:
                calls = (ToolCall(id=f"e{n}", name="rt_echo", arguments=json.dumps({"text": f"ping {results}"})),)
                yield Completion(message=Message(role="assistant", tool_calls=calls), finish_reason="tool_calls")
            else:
                yield Completion(message=Message(role="assistant", content="echoed three times"),
                                 finish_reason="stop")
            return
        if results == 0:
            args = {"description": "echo", "subagent_type": WORKER, "prompt": f"echo three times ({n})"}
            calls = (ToolCall(id=f"a{n}", name="AgentTool", arguments=json.dumps(args)),)
            yield Completion(message=Message(role="assistant", tool_calls=calls), finish_reason="tool_calls")
        else:
            yield Completion(message=Message(role="assistant", content="The worker echoed three times."),
                             finish_reason="stop")

    async def aclose(self) -> None:
        return None


class SqlCounter:
    """Counts statements and commits on an engine: SQLAlchemy's statement and
    commit events, plus the store's prebuilt statements and transactions on
    the DBAPI connection (ongridd/store/fastsql.py), which those events do
    not see.  BEGIN and COMMIT are not counted as statements."""

    def __init__(self, engine: Any) -> None:
        self._statements = 0
        self._commits = 0
        sa.event.listen(engine, "before_cursor_execute", self._stmt)
        sa.event.listen(engine, "commit", self._commit)

    @property
    def statements(self) -> int:
        return self._statements + fastsql.Counter.statements

    @property
    def commits(self) -> int:
        return self._commits + fastsql.Counter.commits

    def _stmt(self, *_args: Any) -> None:
        self._statements += 1

    def _commit(self, *_args: Any) -> None:
        self._commits += 1


async def one_flow(rt: Any, i: int, tag: str) -> float:
    t = time.perf_counter()
    sid, _ = await rt.open_thread(user_id="bench", thread=f"{tag}-{i}")
    with rt.subscribe(sid) as (_initial, chan):
        await rt.submit(sid, user_id="bench", text="echo something three times")
        async for frame in chan:
            if frame["type"] == "final":
                break
            if frame["type"] == "error":
                raise RuntimeError(f"flow failed: {frame}")
    return time.perf_counter() - t


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="ongrid-flow-bench-") as tmp:  # removed afterwards, whatever happens
        await run(args, Path(tmp))


async def run(args: argparse.Namespace, work: Path) -> None:
    from rt_helpers import prepare

    logs.configure("WARNING")
    raw = prepare(work)
    if args.db:
        raw["database"] = {"url": args.db}
    config = structure(raw)
    model = InstantModel()
    proc = psutil.Process()
    async with trio.open_nursery() as nursery:
        handle = await nursery.start(partial(run_daemon, config, handle_signals=False, model=model))
        rt = handle.services.runtime
        counter = SqlCounter(rt.store._db.engine)
        print(f"store flow bench: {rt.store.url}, python {sys.version.split()[0]}, {psutil.cpu_count()} CPUs")
        for i in range(args.warmup):
            await one_flow(rt, i, "warm")
        s0, c0, tx0 = counter.statements, counter.commits, rt.writer.transactions
        prof = cProfile.Profile() if args.profile == "cprofile" else None
        cpu0 = proc.cpu_times()
        times = []
        if prof:
            prof.enable()
        for i in range(args.flows):
            times.append(await one_flow(rt, i, "seq"))
        if prof:
            prof.disable()
        cpu1 = proc.cpu_times()
        n = args.flows
        cpu_ms = ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) * 1000 / n
        ms = [t * 1000 for t in times]
        q = statistics.quantiles(ms, n=100)
        print(f"sequential ({n} flows after {args.warmup} warm-up)")
        print(f"  flow            mean {statistics.mean(ms):6.2f} ms   p50 {statistics.median(ms):6.2f} ms"
              f"   p99 {q[98]:6.2f} ms")
        print(f"  CPU per flow    {cpu_ms:6.2f} ms{'  (profiled: inflated)' if prof else ''}")
        print(f"  SQL per flow    {(counter.statements - s0) / n:6.1f} statements (besides BEGIN), "
              f"{(counter.commits - c0) / n:5.1f} commits, {(rt.writer.transactions - tx0) / n:5.1f} "
              "writer transactions")
        rates = []
        for b in range(args.batches):
            t = time.perf_counter()
            async with trio.open_nursery() as inner:
                for i in range(args.concurrent):
                    inner.start_soon(one_flow, rt, i, f"conc{b}")
            rates.append(args.concurrent / (time.perf_counter() - t))
        print(f"concurrent ({args.batches} batches of {args.concurrent}): median "
              f"{statistics.median(rates):6.1f} flows/s (each: {', '.join(f'{r:.0f}' for r in rates)})")
        print(f"  peak RSS {proc.memory_info().rss / 2**20:6.1f} MiB")
        if args.json:  # one line for benchmarks/run_all.py
            print(json.dumps({"mean_ms": statistics.mean(ms), "p50_ms": statistics.median(ms), "p99_ms": q[98],
                              "cpu_ms_per_flow": cpu_ms, "median_runs_per_s": statistics.median(rates),
                              "peak_rss_mib": proc.memory_info().rss / 2**20}))
        if prof:
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats(args.sort).print_stats(args.top)
            print(out.getvalue())
        handle.shutdown.set()
        await handle.stopped.wait()
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flows", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=100)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--profile", choices=("cprofile", "none"), default="none")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sort", default="cumulative", help="the profile's order (pstats: cumulative, tottime, ...)")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    parser.add_argument("--db", default="", help="database URL (default: SQLite in a temporary state dir)")
    trio.run(main, parser.parse_args())
