"""Per-turn cost over one long coordinator thread: first 10% vs last 10%
of the turns (prints measured numbers).

    python benchmarks/long_thread_bench.py [--turns 200] [--history-max-chars 200000] [--answer-chars 1500]

Starts the scripted model (``ongridd.fakellm``) and the real daemon in this
process (real HTTP, websocket and SQLite in a temporary state dir).  Every
turn is on the same thread: the coordinator makes one ``SendMessage`` call
(a tool call and its result), then answers with ``--answer-chars`` of text,
so the stored history grows by about that much per turn and, past
``--history-max-chars``, older turns are summarised (the scripted
``summarizer`` answers at once).

Cost of a turn = its time at the client (``user_message`` sent → ``final``
received) minus the time spent waiting for the model's streams (HTTP to the
scripted model and its answer): the runtime, kernel, history building,
store reads and writes, websocket frames.  The target: the last 10% of the
turns cost at most 1.2× the first 10%.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from runtime_bench import TimedModel

from ongridd import logs
from ongridd.config import structure
from ongridd.daemon import make_model, run_daemon
from ongridd.fakellm.script import coerce_script
from ongridd.fakellm.server import FakeLLM, serve_fake_llm


def script(turns: int, answer_chars: int) -> dict:
    steps = []
    for k in range(turns):
        steps.append({"tool_calls": [{"name": "SendMessage", "arguments": {"text": f"looking at item {k}"}}]})
        steps.append({"content": f"answer {k}: " + "lorem ipsum " * (answer_chars // 12)})
    return {"default": steps,
            "summarizer": [{"content": "The user asked about numbered items; each was answered in full."}]}


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="ongrid-long-thread-bench-") as tmp:  # removed afterwards, whatever happens
        await run(args, Path(tmp))


async def run(args: argparse.Namespace, work: Path) -> None:
    from trio_websocket import open_websocket_url

    logs.configure("WARNING")
    fake = FakeLLM(coerce_script(script(args.turns + 5, args.answer_chars)), env={})
    async with trio.open_nursery() as nursery:
        fake_url = await nursery.start(serve_fake_llm, fake)
        config = structure({"server": {"listen": "127.0.0.1:0"}, "state_dir": str(work / "state"),
                            "llm": {"base_url": fake_url, "model": "scripted", "max_retries": 0},
                            "limits": {"history_max_chars": args.history_max_chars}})
        model = TimedModel(make_model(config))
        handle = await nursery.start(partial(run_daemon, config, handle_signals=False, model=model))
        url = handle.base_url.replace("http://", "ws://") + "/ws"
        print(f"long-thread bench: {args.turns} turns on one thread, history_max_chars "
              f"{args.history_max_chars}, answers of {args.answer_chars} chars, state {work / 'state'}")
        costs, totals, sizes, summaries = [], [], [], 0
        async with open_websocket_url(url) as ws:
            await ws.send_message(json.dumps({"type": "hello", "thread": "long"}))
            json.loads(await ws.get_message())
            for i in range(args.turns):
                fake.requests.clear()
                before = model.waited_s
                t = time.perf_counter()
                await ws.send_message(json.dumps({"type": "user_message", "text": f"turn {i}: tell me about it"}))
                while True:
                    frame = json.loads(await ws.get_message())
                    if frame["type"] == "final":
                        break
                    if frame["type"] == "error":
                        raise RuntimeError(f"turn {i} failed: {frame}")
                total = time.perf_counter() - t
                costs.append((total - (model.waited_s - before)) * 1000)
                totals.append(total * 1000)
                mine = [r for r in fake.requests if r.agent == "default"]
                sizes.append(max(len(json.dumps(r.body["messages"])) for r in mine))
                summaries += len([r for r in fake.requests if r.agent == "summarizer"])
        n = max(1, args.turns // 10)
        first, last = statistics.mean(costs[:n]), statistics.mean(costs[-n:])
        print(f"  per-turn cost (turn time - model time): first 10% mean {first:.1f} ms, "
              f"last 10% mean {last:.1f} ms, ratio {last / first:.2f} (target <= 1.20)")
        print(f"  turn time at the client:               first 10% mean {statistics.mean(totals[:n]):.1f} ms, "
              f"last 10% mean {statistics.mean(totals[-n:]):.1f} ms")
        print(f"  largest request messages (JSON chars): first 10% {max(sizes[:n])}, last 10% {max(sizes[-n:])}")
        print(f"  summary calls made: {summaries}")
        if args.json:
            print(json.dumps({"first_ms": first, "last_ms": last, "ratio": last / first, "summary_calls": summaries}))
        handle.shutdown.set()
        await handle.stopped.wait()
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--history-max-chars", type=int, default=200_000)
    parser.add_argument("--answer-chars", type=int, default=1500)
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line at the end")
    trio.run(main, parser.parse_args())
