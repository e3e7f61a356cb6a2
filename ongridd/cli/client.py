"""``ongrid ask`` (one turn) and ``ongrid chat`` (interactive) on the chat
socket, with trio-websocket (docs/architecture.md §15.1)."""

from __future__ import annotations

import argparse
import json
import locale as _locale
import os
import signal
import sys
import uuid
from typing import Any

import trio

from ongridd.cli.common import ClientError, add_client_args, token, ws_url


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ask", help="ask one question and print the final answer")
    add_client_args(p)
    p.add_argument("--thread", help="continue this thread (default: a fresh one)")
    p.add_argument("--json", action="store_true", help="print every frame received as one JSON line")
    p.add_argument("--locale", help="answer language, e.g. fr or zh-CN")
    p.add_argument("--timeout", type=float, default=1800.0, help="give up after this many seconds")
    p.add_argument("text", nargs="+", help="the question")
    p.set_defaults(func=run_ask)

    c = sub.add_parser("chat", help="interactive chat in the terminal (Ctrl-C stops a turn; twice quits)")
    add_client_args(c)
    c.add_argument("--thread", default="main", help="thread to open or re-attach (default main)")
    c.add_argument("--locale", help="answer language, e.g. fr or zh-CN")
    c.set_defaults(func=run_chat)


def _default_locale() -> str | None:
    lang = os.environ.get("LC_ALL") or os.environ.get("LANG") or ""
    lang = lang.split(".")[0]
    if not lang or lang in ("C", "POSIX"):
        return None
    return lang.replace("_", "-")


async def _connect(url: str) -> Any:
    from trio_websocket import open_websocket_url

    return open_websocket_url(url, max_message_size=16 * 1024 * 1024, connect_timeout=15)


def _hello(args: argparse.Namespace, thread: str) -> str:
    frame: dict[str, Any] = {"type": "hello", "thread": thread}
    tok = token(args)
    if tok:
        frame["token"] = tok
    loc = args.locale or _default_locale()
    if loc:
        frame["locale"] = loc
    return json.dumps(frame)


# ---- ask ----------------------------------------------------------------------

async def _ask(args: argparse.Namespace) -> int:
    from trio_websocket import ConnectionClosed, HandshakeError

    url = ws_url(getattr(args, "url", None))
    thread = args.thread or f"ask-{uuid.uuid4().hex[:12]}"
    text = " ".join(args.text)
    session_id = None
    try:
        async with await _connect(url) as ws:
            await ws.send_message(_hello(args, thread))
            sent = False
            with trio.move_on_after(args.timeout) as timer:
                while True:
                    frame = json.loads(await ws.get_message())
                    if args.json:
                        print(json.dumps(frame, ensure_ascii=False), flush=True)
                    kind = frame.get("type")
                    if kind == "session" and not sent:
                        session_id = frame.get("session_id")
                        await ws.send_message(json.dumps({"type": "user_message", "text": text}))
                        sent = True
                    elif kind == "final":
                        if not args.json:
                            print(frame.get("text", ""))
                            print(f"(thread {thread}, session {session_id}: see `ongrid sessions tree "
                                  f"{session_id}`)", file=sys.stderr)
                        return 0
                    elif kind == "error":
                        if not args.json:
                            print(f"ongrid: {frame.get('code')}: {frame.get('message')}", file=sys.stderr)
                        return 1  # bad_frame included: our one message was refused, nothing will follow
            if timer.cancelled_caught:
                print(f"ongrid: no final answer within {args.timeout:g} s; the turn goes on in the daemon "
                      f"(thread {thread}, session {session_id}: `ongrid chat --thread {thread}` re-attaches)",
                      file=sys.stderr)
                return 1
    except ConnectionClosed as exc:
        print(f"ongrid: the daemon at {url} closed the connection ({_why(exc)}); is it shutting down? "
              f"The turn's transcript is in thread {thread}.", file=sys.stderr)
        return 2
    except (OSError, HandshakeError, trio.BrokenResourceError) as exc:
        print(f"ongrid: cannot talk to the daemon at {url}: {_why(exc)} "
              "(point at the right daemon with --url or ONGRID_URL)", file=sys.stderr)
        return 2
    return 1


def _why(exc: BaseException) -> str:
    """A readable reason: trio-websocket's HandshakeError has an empty text
    and keeps the real cause (e.g. connection refused) in ``__cause__``."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):  # trio-websocket ConnectionRejected: never dump its header tuple
        return f"the websocket handshake was refused with HTTP {status} (is this an Ongrid daemon?)"
    text = str(exc)
    if not text and (exc.__cause__ or exc.__context__):
        text = str(exc.__cause__ or exc.__context__)
    return text or type(exc).__name__


def _check_daemon(args: argparse.Namespace) -> None:
    """Fail in seconds, with one sentence, when --url is not an Ongrid daemon
    (a TLS URL on a plain-HTTP port, another server, nothing listening)."""
    from ongridd.cli.common import base_url
    from ongridd.cli.reach import check_daemon

    tok = token(args)
    check_daemon(base_url(getattr(args, "url", None)), {"Authorization": f"Bearer {tok}"} if tok else None)


def run_ask(args: argparse.Namespace) -> int:
    """``ongrid ask``: exit 0 on a final answer, 1 on an error frame (or no
    answer within ``--timeout``), 2 on usage or connection errors."""
    try:
        token(args)  # resolve (and warn about --token) before connecting
        _check_daemon(args)
        return trio.run(_ask, args)
    except ClientError as exc:
        print(f"ongrid: {exc}", file=sys.stderr)
        return 2


# ---- chat -----------------------------------------------------------------------

class _ChatUI:
    """Renders frames: streamed tokens, one status line per agent tile."""

    def __init__(self, out: Any = None):
        self.out = out or sys.stdout
        self.streaming = False
        self.turn_running = False

    def _line(self, text: str) -> None:
        if self.streaming:
            self.out.write("\n")
            self.streaming = False
        self.out.write(text + "\n")
        self.out.flush()

    def render(self, frame: dict) -> None:
        kind = frame.get("type")
        if kind == "session":
            state = "re-attached to" if frame.get("resumed") else "new"
            self._line(f"[{state} thread {frame.get('thread')} — session {frame.get('session_id')}]")
            self._line("[type a message and press Enter; Ctrl-C stops a running turn; Ctrl-C twice or Ctrl-D quits]")
        elif kind == "token":
            self.turn_running = True
            self.out.write(frame.get("text", ""))
            self.out.flush()
            self.streaming = True
        elif kind == "interim":
            self._line(f"  … {frame.get('text', '')}")
        elif kind == "tool":
            self.turn_running = True
            if frame.get("status") != "started":
                self._line(f"  [tool {frame.get('name')}: {frame.get('status')}]")
        elif kind == "agent_tile":
            self.turn_running = True
            self._line(f"  ◆ {frame.get('subagent_type')} [{frame.get('status')}] {frame.get('description')}"
                       f"  (task {frame.get('task_id')})")
        elif kind == "agent_result":
            pass
        elif kind == "final":
            if self.streaming:
                self._line("")
            else:
                self._line(frame.get("text", ""))
            self.turn_running = False
        elif kind == "error":
            self._line(f"[{frame.get('code')}] {frame.get('message')}")
            if frame.get("code") in ("stopped", "provider_error", "internal"):
                self.turn_running = False


async def _chat(args: argparse.Namespace) -> int:
    from trio_websocket import ConnectionClosed, HandshakeError

    url = ws_url(getattr(args, "url", None))
    ui = _ChatUI()
    try:
        async with await _connect(url) as ws:
            await ws.send_message(_hello(args, args.thread))
            async with trio.open_nursery() as nursery:
                async def reader() -> None:
                    try:
                        while True:
                            ui.render(json.loads(await ws.get_message()))
                    except ConnectionClosed:
                        ui._line("[connection closed by the daemon]")
                        nursery.cancel_scope.cancel()

                async def writer() -> None:
                    while True:
                        line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
                        if not line:  # EOF
                            nursery.cancel_scope.cancel()
                            return
                        if line.strip():
                            ui.turn_running = True
                            await ws.send_message(json.dumps({"type": "user_message", "text": line.rstrip("\n")}))

                async def interrupts() -> None:
                    last = -10.0
                    with trio.open_signal_receiver(signal.SIGINT) as signals:
                        async for _ in signals:
                            now = trio.current_time()
                            if ui.turn_running and now - last > 2.0:
                                ui._line("[stopping the turn — press Ctrl-C again to quit]")
                                await ws.send_message(json.dumps({"type": "stop"}))
                                last = now
                            else:
                                nursery.cancel_scope.cancel()
                                return

                nursery.start_soon(reader)
                nursery.start_soon(writer)
                nursery.start_soon(interrupts)
    except (OSError, HandshakeError, trio.BrokenResourceError) as exc:
        print(f"ongrid: cannot talk to the daemon at {url}: {_why(exc)}", file=sys.stderr)
        return 2
    return 0


def run_chat(args: argparse.Namespace) -> int:
    """``ongrid chat``: 0 when the user quits, 2 on usage or connection errors."""
    try:
        _locale.setlocale(_locale.LC_ALL, "")
    except _locale.Error:
        pass
    try:
        token(args)
        _check_daemon(args)
        return trio.run(_chat, args)
    except ClientError as exc:
        print(f"ongrid: {exc}", file=sys.stderr)
        return 2
