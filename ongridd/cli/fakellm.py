"""``ongrid fake-llm --script FILE [--listen HOST:PORT]`` — the scripted model
server (docs/architecture.md §16), a test and demo double, never a real model.

Prints the base URL (``http://HOST:PORT/v1``) alone on stdout once it
listens, then a note on stderr; logs one JSON line per model call on stderr.
SIGINT/SIGTERM stop it with exit status 0.  Exit 2: bad script, bad
``--listen``, the address cannot be bound, or the ``--record`` file cannot
be opened.  ``--record FILE`` appends every request received to FILE (one
JSON line each), for tests that check what the daemon sent to the model.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
from typing import Any

DEFAULT_LISTEN = "127.0.0.1:0"


def add_parser(subparsers: Any) -> None:
    """Register the ``fake-llm`` sub-command."""
    parser = subparsers.add_parser(
        "fake-llm",
        help="run the scripted model server (an OpenAI-compatible test double, not a real model)",
        description=(
            "Serve an OpenAI-compatible chat-completions endpoint whose answers come from a YAML script "
            "keyed by persona (format: docs/fake-llm.md). It is a test and demo double: it never pretends to be a real "
            "model. Prints the base URL on stdout when ready."
        ),
    )
    parser.add_argument("--script", required=True, metavar="FILE", help="the YAML script")
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to listen on (default {DEFAULT_LISTEN}: a free loopback port)",
    )
    parser.add_argument(
        "--record",
        metavar="FILE",
        help="append every chat-completion request received to FILE as one JSON line "
             "({agent, session, headers, body, step, status}; credential headers as ***)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the server until SIGINT/SIGTERM.  Returns the exit code."""
    import trio

    from ongridd import logs
    from ongridd.config import parse_listen
    from ongridd.errors import ConfigError
    from ongridd.fakellm.script import load_script

    try:
        host, port = parse_listen(args.listen)
        script = load_script(args.script)
    except ConfigError as exc:
        print(f"ongrid fake-llm: {exc}", file=sys.stderr)
        return 2
    logs.configure()
    missing = sorted(name for name in script.variables() if name not in os.environ)
    if missing:
        print(
            "ongrid fake-llm: warning: the script uses environment variable(s) that are not set: "
            + ", ".join(missing)
            + " (steps using them will answer HTTP 400)",
            file=sys.stderr,
        )
    from ongridd.fakellm.server import FakeLLM

    try:
        fake = FakeLLM(script, record=args.record)
    except OSError as exc:
        print(f"ongrid fake-llm: cannot open the record file {args.record}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        return trio.run(_serve, fake, args.script, host, port)
    finally:
        fake.close()


async def _serve(fake: Any, path: str, host: str, port: int) -> int:
    import trio

    from ongridd.fakellm.server import serve_fake_llm

    script = fake.script
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            try:
                base_url = await nursery.start(functools.partial(serve_fake_llm, fake, host=host, port=port))
            except OSError as exc:
                print(f"ongrid fake-llm: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
                nursery.cancel_scope.cancel()
                return 2
            print(base_url, flush=True)
            personas = ", ".join(sorted(script.personas)) or "none"
            print(
                f"ongrid fake-llm: scripted model (a test double, not a real model) serving {path} "
                f"(personas: {personas}) at {base_url}; Ctrl-C or SIGTERM to stop",
                file=sys.stderr,
                flush=True,
            )
            async for signum in signals:
                print(f"ongrid fake-llm: stopping on {signal.Signals(signum).name}", file=sys.stderr, flush=True)
                nursery.cancel_scope.cancel()
                break
    return 0
