"""``ongrid demo`` — the main job on this host (docs/architecture.md §17).

Starts the daemon in-process on a free loopback port with a temporary state
dir, starts the scripted model (unless a real one is given), makes a real
situation (a temporary folder of real, non-sparse files of 1–5 MB in nested
folders), asks the coordinator over the real websocket what is filling the
disk there, and prints which model answers (the words "scripted model" when
it is the scripted one), one line per worker tile and tool step, the answer
rendered as markdown (``ongridd.cli.termui``, plain text off a terminal), and
the session tree with its audit rows.  The answer comes from the tool results, never
from what the demo knows.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

QUESTION = ("Something is filling the disk under {dir} on this host. What is using the space there? "
            "Name the largest folders and files.")

# The scripted transcript: the coordinator dispatches specialist-disk, whose
# two host tools read the real folder; each answer is built from the tool
# results it received (content_from_tool_results), so it names real files.
DEMO_SCRIPT = {
    "default": [
        {"content": "Dispatching the disk specialist to look at the folder.",
         "tool_calls": [{"name": "AgentTool", "arguments": {
             "description": "What fills ${ONGRID_DEMO_DIR}",
             "subagent_type": "specialist-disk",
             "prompt": "The user asks what is filling the disk under ${ONGRID_DEMO_DIR} on host local. "
                       "Measure the folder sizes (depth 2) and list the largest files there; report the "
                       "biggest consumers with their sizes."}}]},
        {"content_from_tool_results": "reports"},  # the worker's report, as a person reads it
    ],
    "specialist-disk": [
        {"tool_calls": [
            {"name": "host_du_summary", "arguments": {"paths": ["${ONGRID_DEMO_DIR}"], "depth": 2}},
            {"name": "host_find_large_files", "arguments": {"paths": ["${ONGRID_DEMO_DIR}"], "top_n": 5,
                                                            "min_size": "1M"}},
        ]},
        {"content_from_tool_results": "markdown"},  # its tool results laid out (in the console too)
    ],
}

LAYOUT = {  # relative folder → number of files; sizes are drawn at random (1–5 MB)
    "app/logs": 3,
    "app/logs/archive": 2,
    "cache/thumbnails": 2,
    "db/backups": 2,
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the main job on this host with the scripted model (or a real one)")
    p.add_argument("--llm-base-url", help="a real OpenAI-compatible endpoint (…/v1) instead of the scripted model")
    p.add_argument("--model", help="model name for --llm-base-url")
    p.add_argument("--keep", action="store_true", help="keep the temporary folders (their paths are printed)")
    p.add_argument("--serve", action="store_true",
                   help="after the answer, keep the daemon serving (the web console shows the demo's thread, "
                        "`ongrid --url …` reads it) until Ctrl-C")
    p.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT",
                   help="where the demo's daemon listens (default: a free port on 127.0.0.1)")
    p.add_argument("--json", action="store_true",
                   help="print every websocket frame on stdout as one JSON line (as `ongrid ask --json`); "
                        "the demo's report goes to stderr")
    p.set_defaults(func=run)


def make_situation(root: Path, seed: int | None = None) -> list[tuple[Path, int]]:
    """Write real, non-sparse files of 1–5 MB (random bytes) in nested folders."""
    rng = random.Random(seed)
    made = []
    for rel, count in LAYOUT.items():
        folder = root / rel
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            size = rng.randint(1, 5) * 1024 * 1024 + rng.randint(0, 1023) * 1024
            path = folder / f"{Path(rel).name}-{i + 1}.{'log' if 'logs' in rel else 'bin'}"
            with open(path, "wb") as fh:
                remaining = size
                while remaining:
                    chunk = min(remaining, 1 << 20)
                    fh.write(os.urandom(chunk))
                    remaining -= chunk
            made.append((path, size))
    return made


async def _demo(args: argparse.Namespace, work: Path, frames_out: Any = None) -> int:
    """The demo in ``work``; ``frames_out``: where ``--json`` writes each frame (one JSON line)."""
    from trio_websocket import open_websocket_url

    from ongridd import logs
    from ongridd.cli.sessions import format_audit, format_tree
    from ongridd.cli.termui import TileBoard, json_line, print_markdown, safe_frame, safe_text, tool_line
    from ongridd.config import structure
    from ongridd.daemon import run_daemon

    demo_dir = work / "disk"
    state_dir = work / "state"
    state_dir.mkdir()
    files = make_situation(demo_dir)
    total = sum(s for _, s in files)
    print(f"Made {len(files)} real files ({total / 1024 / 1024:.1f} MiB) under {demo_dir}")
    os.environ["ONGRID_DEMO_DIR"] = str(demo_dir)
    # the demo's own lines say what happens (a turn that fails ends in its "[error] …" line, which names
    # the cause); the daemon's retries, warnings and errors would only interleave with them as log lines
    logs.configure("CRITICAL", json_lines=False)

    async with trio.open_nursery() as nursery:
        if args.llm_base_url:
            llm = {"base_url": args.llm_base_url, "model": args.model}
            answered_by = f"model {args.model or '(server default)'} at {args.llm_base_url}"
            print(f"Model: {answered_by}")
        else:
            from ongridd.fakellm.server import FakeLLM, serve_fake_llm
            from ongridd.fakellm.script import coerce_script

            fake = FakeLLM(coerce_script(DEMO_SCRIPT))
            fake_url = await nursery.start(serve_fake_llm, fake)
            llm = {"base_url": fake_url, "model": "scripted"}
            answered_by = (f"the scripted model (ongrid fake-llm at {fake_url}) — a test double that replays a "
                           "fixed transcript, not a real model; its answers are built from the real tool results")
            print("Model: scripted model (ongrid fake-llm) — a test double, not a real model; its answers are "
                  "built from the real tool results. Use --llm-base-url URL --model NAME for a real one.")
        config = structure({"server": {"listen": args.listen}, "state_dir": str(state_dir), "llm": llm})
        handle = await nursery.start(lambda task_status: run_daemon(config, handle_signals=False,
                                                                    task_status=task_status))
        print(f"Daemon serving at {handle.base_url}; asking over {handle.base_url.replace('http', 'ws')}/ws\n")
        question = QUESTION.format(dir=demo_dir)
        print(f"> {question}\n")
        session_id = None
        final = None
        text = ""  # the coordinator's text since its last tool step
        board = TileBoard()
        async with open_websocket_url(handle.base_url.replace("http://", "ws://") + "/ws") as ws:
            await ws.send_message(json.dumps({"type": "hello", "thread": "demo"}))
            with trio.fail_after(300):
                while final is None:
                    frame = json.loads(await ws.get_message())
                    if args.json:
                        print(json_line(frame), file=frames_out or sys.stdout, flush=True)
                    frame = safe_frame(frame)  # model text shown as text, never as terminal controls
                    kind = frame["type"]
                    if kind == "session":
                        session_id = frame["session_id"]
                        await ws.send_message(json.dumps({"type": "user_message", "text": question}))
                    elif kind == "token":
                        text += frame["text"]
                    elif kind in ("agent_tile", "tool", "interim") and text.strip():
                        board.close()  # text sent before a tool call: one line of progress
                        print(f"  {text.strip().splitlines()[0][:200]}", flush=True)
                        text = ""
                    if kind == "agent_tile":
                        board.update(frame)
                    elif kind == "tool" and frame["status"] != "started":
                        board.close()
                        print(f"  ⚙ {tool_line(frame, dispatches=True)}", flush=True)
                    elif kind == "interim":
                        print(f"  … {frame['text']}", flush=True)
                    elif kind == "final":
                        final = frame["text"]
                    elif kind == "error":
                        print(f"\n[error] {frame['code']}: {frame['message']}", file=sys.stderr)
                        final = ""
        board.close()
        if not final:  # an error frame (printed above): nothing was answered, so nothing to show
            print(f"\nNo answer: the turn ended with the error above (the model: {answered_by}).",
                  file=sys.stderr)
        else:
            print("\n=== Answer ===")
            if not args.llm_base_url:
                print("(the scripted model answers with the worker's tool results, laid out as tables: the "
                      "console and `ongrid sessions messages` show the same text)\n")
            print_markdown(final)
            runtime = handle.services.runtime
            tree = await runtime.session_tree(session_id, user_id="local")
            audit = await runtime.session_audit(session_id, user_id="local")
            print("\n=== Session tree ===")
            print(safe_text("\n".join(format_tree(tree))))
            print("\n=== Audit (every tool call) ===")
            print(safe_text("\n".join(format_audit(audit, results=False))))  # the answer shows what they found
            print(f"\nAnswered by: {answered_by}.")
        biggest = max(files, key=lambda f: f[1])[0]
        if final and not args.llm_base_url:
            print(f"Check: the largest file made was {biggest.name}; "
                  f"{'it is named in the answer' if biggest.name in final else 'NOT named in the answer'}.")
        if args.serve:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                print(f"\nServing until Ctrl-C: the web console at {handle.base_url}/#/t/demo shows this thread, "
                      f"and `ongrid --url {handle.base_url} sessions tree demo` reads it."
                      + ("" if args.llm_base_url else " The scripted model only replays the demo: a new question "
                         "in this thread ends in an error that says so, and a new thread replays the same "
                         "investigation (--llm-base-url asks a real model)."), flush=True)
                async for _ in signals:  # then the daemon stops as it does after any demo
                    break
        handle.shutdown.set()
        with trio.move_on_after(10):
            await handle.stopped.wait()
        nursery.cancel_scope.cancel()
    return 0 if final else 1


def run(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="ongrid-demo-"))
    frames_out = sys.stdout
    try:
        if args.json:  # stdout holds the frames alone, so that it can be piped to jq
            with contextlib.redirect_stdout(sys.stderr):
                return trio.run(_demo, args, work, frames_out)
        return trio.run(_demo, args, work)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:  # the daemon could not start (a --listen it refuses, a port in use): say why
        from ongridd.errors import ConfigError

        cause = exc
        while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
            cause = cause.exceptions[0]
        if not isinstance(cause, (ConfigError, OSError)):
            raise
        print(f"ongrid demo: the daemon did not start: {cause}", file=sys.stderr)
        return 2
    finally:
        where = sys.stderr if args.json else sys.stdout
        if args.keep:
            print(f"(kept {work})", file=where)
        else:
            shutil.rmtree(work, ignore_errors=True)
            if work.exists():
                print(f"(could not remove all of {work}: remove it by hand)", file=where)
            else:
                print(f"(removed {work}: the demo's files and state; --keep keeps them)", file=where)
