"""The model-client path alone: Ongrid's provider against the official openai SDK, per call.

    python benchmarks/model_client_bench.py [--calls 60] [--delay-s 0.1]

Both clients stream the same chat completion from the same ``ongrid fake-llm`` (a real
OpenAI-compatible server over loopback HTTP), one call after another, both under Trio in this
process: Ongrid's :class:`~ongridd.llm.openai_provider.OpenAIProvider` (request body written
once, server-sent events parsed into the stream assembler, a Completion at the end) and
``openai.AsyncOpenAI().chat.completions.create(stream=True)`` (every chunk a typed object;
the tool call is not assembled, which spares the SDK some work). The request: a 4,000-character
system prompt, six history messages and three tool schemas; the answer: one tool call.

Printed per client: CPU per call (this thread's ``time.thread_time``, which counts the
scheduler's wake-ups and the client's own parsing, not the server's), twice — with the server
answering each call after ``--delay-s`` (the serve benchmark's gap: the process goes idle and
wakes up on cold caches, as a daemon waiting on a model does) and answering at once — and the
Ongrid / SDK ratio for each. Six calls make one turn of ``serve_bench.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from serve_bench import MODEL_CALLS, scripted_model

from ongridd.llm.openai_provider import OpenAIProvider
from ongridd.llm.types import Completion, Message, ModelRequest, ToolCall

#: the persona whose first scripted step answers with one tool call (each call uses a fresh
#: session id, so every call gets that step)
PERSONA = "bench-worker"
WARMUP = 5


def request_parts() -> tuple[list[Message], list[dict[str, Any]]]:
    system = "You are an operations assistant. " + "Follow the runbook and cite what you read. " * 95
    call = ToolCall(id="call_1", name="query_knowledge", arguments='{"query": "disk full"}')
    messages = [
        Message(role="system", content=system[:4000]),
        Message(role="user", content="Why is /var filling up on web-3?"),
        Message(role="assistant", content=None, tool_calls=(call,)),
        Message(role="tool", content="runbook: disk-full — check journald and rotated logs " * 8,
                tool_call_id="call_1", name="query_knowledge"),
        Message(role="assistant", content="The journal holds 9 GB; rotated logs 2 GB."),
        Message(role="user", content="And on web-4?"),
    ]
    tools = [{"type": "function", "function": {
        "name": name, "description": f"{name} (benchmark schema)",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                       "required": ["query"]}}} for name in ("query_knowledge", "disk_usage", "service_status")]
    return messages, tools


async def ongrid_calls(url: str, calls: int) -> float:
    """CPU seconds per call of :class:`OpenAIProvider` streaming ``calls`` answers."""
    messages, tools = request_parts()
    ids = itertools.count()
    async with OpenAIProvider(url, model="scripted", max_retries=0) as provider:
        async def one() -> None:
            request = ModelRequest(messages=messages, tools=tools, agent=PERSONA, session_id=f"o{next(ids)}")
            last = None
            async for event in provider.stream(request):
                last = event
            if not isinstance(last, Completion) or not last.message.tool_calls:
                raise RuntimeError(f"unexpected end of stream: {last!r}")

        return await timed(one, calls)


async def sdk_calls(url: str, calls: int) -> float:
    """CPU seconds per call of the openai SDK streaming ``calls`` answers."""
    import openai

    messages, tools = request_parts()
    wire = [m.to_wire() for m in messages]
    ids = itertools.count()
    async with openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as client:
        async def one() -> None:
            stream = await client.chat.completions.create(
                model="scripted", messages=wire, tools=tools, stream=True,  # type: ignore[arg-type]
                extra_headers={"X-Ongrid-Agent": PERSONA, "X-Ongrid-Session": f"s{next(ids)}"})
            seen = 0
            async for chunk in stream:
                seen += bool(chunk.choices and chunk.choices[0].delta.tool_calls)
            if not seen:
                raise RuntimeError("the SDK's stream carried no tool call")

        return await timed(one, calls)


async def timed(one: Any, calls: int) -> float:
    for _ in range(WARMUP):
        await one()
    start = time.thread_time()
    for _ in range(calls):
        await one()
    return (time.thread_time() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=60, help="measured calls per client and gap")
    parser.add_argument("--delay-s", type=float, default=0.1, help="the server's delay before each answer")
    args = parser.parse_args()
    try:
        import openai
    except ImportError:
        raise SystemExit("model_client_bench: the openai SDK is not installed; it comes with the test extras: "
                         ".venv/bin/pip install '.[test]'") from None
    print(f"model client bench: {args.calls} streamed calls per client and gap against ongrid fake-llm; "
          f"openai SDK {openai.__version__}, python {sys.version.split()[0]}")
    figures: dict[float, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="ongrid-model-client-bench-") as tmp:
        for gap in (args.delay_s, 0.0):
            with contextlib.ExitStack() as stack:
                url, _ = stack.enter_context(scripted_model(Path(tmp) / f"gap-{gap:g}", gap))
                ours = trio.run(ongrid_calls, url, args.calls)
                sdk = trio.run(sdk_calls, url, args.calls)
            figures[gap] = (ours, sdk)
            what = f"answers after {gap:g} s" if gap else "answers at once"
            print(f"  server {what:20}  Ongrid {ours * 1e3:6.3f} ms CPU/call   openai SDK {sdk * 1e3:6.3f} ms CPU/call"
                  f"   Ongrid/SDK {ours / sdk:4.2f}×   ({MODEL_CALLS} calls: {MODEL_CALLS * ours * 1e3:5.1f} vs "
                  f"{MODEL_CALLS * sdk * 1e3:5.1f} ms)")
    if args.delay_s > 0:
        (ours_gap, sdk_gap), (ours_now, sdk_now) = figures[args.delay_s], figures[0.0]
        print(f"  waking from a {args.delay_s:g} s idle: Ongrid +{(ours_gap - ours_now) * 1e3:.3f} ms/call "
              f"({ours_gap / ours_now:.1f}×), openai SDK +{(sdk_gap - sdk_now) * 1e3:.3f} ms/call "
              f"({sdk_gap / sdk_now:.1f}×)")


if __name__ == "__main__":
    main()
