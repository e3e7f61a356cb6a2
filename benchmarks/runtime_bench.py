"""Runtime overhead per coordinator turn with one worker dispatch, and RSS
growth over many turns (prints measured numbers).

    python benchmarks/runtime_bench.py [--turns 200] [--warmup 20]

Starts the scripted model (``ongridd.fakellm``) and the real daemon in this
process (real HTTP, websocket and SQLite in a temporary state dir).  Each
turn: the coordinator dispatches ``specialist-disk`` with ``AgentTool`` (a
fresh prompt each turn, so dedup never answers), the worker answers at once,
the coordinator answers from the tool result — three model calls, two
sessions, one audit row, five stored messages.

Turn time is measured at the client: from sending ``user_message`` on the
chat socket to receiving ``final``.  Model time is the time spent waiting
for the model client's stream (HTTP to the scripted model and its answer),
measured around each ``__anext__`` of the provider's stream.  Overhead =
turn time − model time: the runtime, kernel, store writes, event fan-out and
websocket frames.

Two runs: every turn on a fresh thread over a fresh connection (like
``ongrid ask``: shows per-thread state that is never released), then every
turn on one thread (its history grows).  RSS (resident set size of this
process, which holds the daemon, the scripted model and the client) is read
after ``--warmup`` turns and at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins"))

from ongridd import logs
from ongridd.config import structure
from ongridd.daemon import make_model, run_daemon
from ongridd.fakellm.script import coerce_script
from ongridd.fakellm.server import FakeLLM


class TimedModel:
    """Wraps a ModelClient; ``waited_s`` sums the time spent waiting for its
    stream's events (the model's latency as the runtime sees it)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.waited_s = 0.0
        self.calls = 0

    async def stream(self, request: Any):
        self.calls += 1
        agen = self.inner.stream(request)
        try:
            while True:
                t = time.perf_counter()
                try:
                    event = await agen.__anext__()
                except StopAsyncIteration:
                    self.waited_s += time.perf_counter() - t
                    return
                self.waited_s += time.perf_counter() - t
                yield event
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None:
                await aclose()

    async def aclose(self) -> None:
        await self.inner.aclose()


def script(turns: int) -> dict:
    steps = []
    for _ in range(turns):
        steps.append({"tool_calls": [{"name": "AgentTool", "arguments": {
            "description": "bench", "subagent_type": "specialist-disk", "prompt": "${PROMPT}"}}]})
        steps.append({"content_from_tool_results": True})
    return {"default": steps, "specialist-disk": [{"content": "The disk is fine: 42% used."}]}


class Prompt(dict):
    """``${PROMPT}``: a new brief for every dispatch (dedup must not answer)."""

    n = 0

    def __contains__(self, key: object) -> bool:
        return key == "PROMPT"

    def __getitem__(self, key: str) -> str:
        Prompt.n += 1
        return f"Check the disk on host bench-{Prompt.n}."


async def one_turn(url: str, thread: str, text: str, conn: Any = None) -> tuple[float, Any]:
    from trio_websocket import open_websocket_url

    async def ask(ws: Any) -> float:
        t = time.perf_counter()
        await ws.send_message(json.dumps({"type": "user_message", "text": text}))
        while True:
            frame = json.loads(await ws.get_message())
            if frame["type"] == "final":
                return time.perf_counter() - t
            if frame["type"] == "error":
                raise RuntimeError(f"turn failed: {frame}")

    if conn is not None:
        return await ask(conn), conn
    async with open_websocket_url(url) as ws:
        await ws.send_message(json.dumps({"type": "hello", "thread": thread}))
        assert json.loads(await ws.get_message())["type"] == "session"
        return await ask(ws), None


def rss_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 1024 / 1024


def report(label: str, turn_s: list[float], model_s: list[float], rss: tuple[float, float], warmup: int) -> None:
    over = [(t - m) * 1000 for t, m in zip(turn_s, model_s)][warmup:]
    total = [t * 1000 for t in turn_s][warmup:]
    model = [m * 1000 for m in model_s][warmup:]
    q = statistics.quantiles(over, n=20)
    print(f"\n{label} ({len(turn_s)} turns, first {warmup} excluded from the times)")
    print(f"  turn time (client)      mean {statistics.mean(total):7.1f} ms   median {statistics.median(total):7.1f} ms")
    print(f"  model time (3 calls)    mean {statistics.mean(model):7.1f} ms")
    print(f"  runtime overhead        mean {statistics.mean(over):7.1f} ms   median {statistics.median(over):7.1f} ms"
          f"   p95 {q[18]:7.1f} ms")
    first, last = over[: max(1, len(over) // 10)], over[-max(1, len(over) // 10):]
    print(f"  overhead first/last 10% mean {statistics.mean(first):6.1f} / {statistics.mean(last):6.1f} ms")
    growth = rss[1] - rss[0]
    n = len(turn_s) - warmup
    print(f"  RSS after warm-up {rss[0]:7.1f} MiB, at the end {rss[1]:7.1f} MiB: growth {growth:+.1f} MiB "
          f"over {n} turns ({growth * 1024 / max(1, n):+.1f} KiB per turn)")


async def main(args: argparse.Namespace) -> None:
    logs.configure("WARNING")
    work = Path(tempfile.mkdtemp(prefix="ongrid-runtime-bench-"))
    fake = FakeLLM(coerce_script(script(args.turns * 2 + 10)), env=Prompt())
    async with trio.open_nursery() as nursery:
        from ongridd.fakellm.server import serve_fake_llm

        fake_url = await nursery.start(serve_fake_llm, fake)
        config = structure({"server": {"listen": "127.0.0.1:0"}, "state_dir": str(work / "state"),
                            "llm": {"base_url": fake_url, "model": "scripted", "max_retries": 0}})
        model = TimedModel(make_model(config))
        handle = await nursery.start(partial(run_daemon, config, handle_signals=False, model=model))
        url = handle.base_url.replace("http://", "ws://") + "/ws"
        print(f"runtime bench: daemon {handle.base_url}, scripted model {fake_url}, state {work / 'state'}")
        print(f"python {sys.version.split()[0]}, {psutil.cpu_count()} CPUs")

        for label, same_thread in (("fresh thread per turn (like `ongrid ask`)", False),
                                   ("one thread, growing history", True)):
            turn_s, model_s = [], []
            rss_start = 0.0
            conn_cm = None
            conn = None
            if same_thread:
                from trio_websocket import open_websocket_url

                conn_cm = open_websocket_url(url)
                conn = await conn_cm.__aenter__()
                await conn.send_message(json.dumps({"type": "hello", "thread": "bench-one"}))
                json.loads(await conn.get_message())
            try:
                for i in range(args.turns):
                    if i == args.warmup:
                        rss_start = rss_mb()
                    fake.requests.clear()  # the scripted model's request log is not the daemon's memory
                    before = model.waited_s
                    t, _ = await one_turn(url, f"bench-{label[:5]}-{i}", f"turn {i}: how full is the disk?", conn)
                    turn_s.append(t)
                    model_s.append(model.waited_s - before)
            finally:
                if conn_cm is not None:
                    await conn_cm.__aexit__(None, None, None)
            report(label, turn_s, model_s, (rss_start, rss_mb()), args.warmup)
        rt = handle.services.runtime
        print(f"\nin-memory state at the end: {len(rt.hubs)} hubs, {len(rt.dedup)} dedup tables, "
              f"{len(rt.workers.tasks)} worker tasks (dropped by housekeeping after an hour)")
        rt.forget_idle()
        print(f"after forget_idle(): {len(rt.hubs)} hubs, {len(rt.dedup)} dedup tables")
        handle.shutdown.set()
        await handle.stopped.wait()
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    trio.run(main, parser.parse_args())
