"""Kernel overhead per turn (prints measured numbers).

    python benchmarks/kernel_bench.py [--turns 200] [--calls 1 4 16] [--result-chars 2000]

Runs ``run_agent`` against an in-memory model that answers instantly: each
of ``--turns`` model calls asks for ``--calls`` tool calls of a trivial
``read`` tool (distinct arguments, so the read cache never answers), then
one final answer.  Model and tool cost nothing, so the wall time is the
kernel's own: request building, argument parsing and validation, the
nursery per message, result rendering and truncation, event delivery to a
sink that keeps every event.

Timing and memory come from two separate runs (tracemalloc slows Python
several times).  Prints per configuration: total model calls and tool calls, µs per turn
(mean over the run; history grows each turn, so later turns cost more —
also shown: the first and last tenth), µs per tool call, and the peak
Python memory (tracemalloc) with the history size at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ongridd.kernel import run_agent
from ongridd.llm.types import (
    Completion,
    Message,
    ModelRequest,
    TextDelta,
    ToolCall,
    Usage,
)
from ongridd.tools.bag import ToolBag
from ongridd.tools.spec import Tool, ToolCallContext


class Persona:
    def __init__(self, max_turns: int):
        self.name = "bench-worker"
        self.max_turns = max_turns
        self.tool_budget = None
        self.model = None


class InstantModel:
    """Answers ``turns`` times with ``calls`` tool calls, then a final answer;
    records when each request arrived."""

    def __init__(self, turns: int, calls: int):
        self.turns = turns
        self.calls = calls
        self.n = 0
        self.stamps: list[float] = []

    async def stream(self, request: ModelRequest):
        self.stamps.append(time.perf_counter())
        self.n += 1
        if self.n > self.turns:
            yield TextDelta("done")
            yield Completion(message=Message(role="assistant", content="done"), finish_reason="stop")
            return
        tool_calls = tuple(
            ToolCall(id=f"c{self.n}_{i}", name="lookup", arguments=f'{{"key": "k{self.n}-{i}", "limit": 5}}')
            for i in range(self.calls)
        )
        yield Completion(message=Message(role="assistant", content=None, tool_calls=tool_calls),
                         finish_reason="tool_calls", usage=Usage(prompt_tokens=1, completion_tokens=1))

    async def aclose(self) -> None:
        pass


def make_bag(result_chars: int) -> ToolBag:
    payload = "x" * result_chars

    async def lookup(args, ctx):
        return {"key": args["key"], "value": payload}

    tool = Tool(name="lookup", description="look a key up",
                parameters={"type": "object", "properties": {"key": {"type": "string"},
                                                             "limit": {"type": "integer", "minimum": 1}},
                            "required": ["key"]},
                handler=lookup)
    return ToolBag(agent="bench-worker", tools={"lookup": tool})


async def one(turns: int, calls: int, result_chars: int, trace_memory: bool = False) -> dict:
    model = InstantModel(turns, calls)
    events: list = []

    async def sink(event):
        events.append(event)

    if trace_memory:
        tracemalloc.start()
    t0 = time.perf_counter()
    result = await run_agent(model=model, persona=Persona(turns + 1), system_prompt="You are a benchmark.",
                             user_message="go", bag=make_bag(result_chars), reminder="<system-reminder>r</system-reminder>",
                             context=ToolCallContext(session_id="bench", agent="bench-worker"), sink=sink)
    total = time.perf_counter() - t0
    peak = 0
    if trace_memory:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert result.status == "ok" and result.tool_calls == turns * calls, result
    gaps = [b - a for a, b in zip(model.stamps, model.stamps[1:])]
    tenth = max(1, len(gaps) // 10)
    return {
        "turns": len(model.stamps), "tool_calls": result.tool_calls, "total_ms": total * 1000,
        "per_turn_us": statistics.mean(gaps) * 1e6,
        "first_tenth_us": statistics.mean(gaps[:tenth]) * 1e6,
        "last_tenth_us": statistics.mean(gaps[-tenth:]) * 1e6,
        "per_call_us": total * 1e6 / max(1, result.tool_calls),
        "peak_mib": peak / 2**20, "history": len(result.messages_added), "events": len(events),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--calls", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--result-chars", type=int, default=2000)
    args = parser.parse_args()
    print(f"kernel overhead, in-memory model, {args.turns} turns, tool results of {args.result_chars} chars")
    print(f"{'calls/turn':>10} {'model calls':>11} {'tool calls':>10} {'total ms':>9} {'µs/turn':>9} "
          f"{'first10%':>9} {'last10%':>9} {'µs/call':>8} {'peak MiB':>8} {'history':>7}")
    for calls in args.calls:
        r = trio.run(one, args.turns, calls, args.result_chars)  # timing without tracemalloc's cost
        r["peak_mib"] = trio.run(one, args.turns, calls, args.result_chars, True)["peak_mib"]
        print(f"{calls:>10} {r['turns']:>11} {r['tool_calls']:>10} {r['total_ms']:>9.1f} {r['per_turn_us']:>9.0f} "
              f"{r['first_tenth_us']:>9.0f} {r['last_tenth_us']:>9.0f} {r['per_call_us']:>8.0f} "
              f"{r['peak_mib']:>8.2f} {r['history']:>7}")


if __name__ == "__main__":
    main()
