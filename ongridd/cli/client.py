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

    c = sub.add_parser("chat", help="interactive chat in the terminal (Ctrl-C stops a turn, or quits when none "
                                    "runs; Ctrl-D quits)")
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

#: the daemon's refusal of an empty message (``bad_frame``); ``ongrid ask`` says it without connecting
EMPTY_MESSAGE = "user_message.text must be a non-empty string"


class _AskProgress:
    """What ``ongrid ask`` says on stderr while it waits (not with ``--json``): each change of the
    turn's queue place (``interim`` frames with ``queue_position``) and one line per change of a
    worker's status (``agent_tile``) when stderr is a terminal; a coordinator's tool call that did
    not succeed (a failed dispatch included) always.  stdout keeps only the answer."""

    def __init__(self, err: Any, *, tty: bool = True) -> None:
        self.err = err
        self.tty = tty
        self.position: int | None = None
        self.status: dict[str, str] = {}

    def _say(self, text: str) -> None:
        from ongridd.cli.termui import one_line

        self.err.write(one_line(text) + "\n")
        self.err.flush()

    def feed(self, frame: dict) -> None:
        from ongridd.cli.termui import tile_line, tool_line

        kind = frame.get("type")
        if kind == "tool" and frame.get("status") not in ("ok", "started"):
            said = tool_line(frame)
            if said:
                self._say(f"  {said}")
        elif not self.tty:
            return
        elif kind == "interim" and isinstance(frame.get("queue_position"), int):
            position = frame["queue_position"]
            if position != self.position:
                self.position = position
                self._say(f"… {frame.get('text', '')}")
        elif kind == "agent_tile":
            task, status = str(frame.get("task_id")), str(frame.get("status", ""))
            if self.status.get(task) != status:
                self.status[task] = status
                self._say(tile_line(frame))


def _error_line(frame: dict, args: argparse.Namespace | None = None) -> str:
    """``ongrid: CODE: MESSAGE``, without the code when the message already says it (``busy``); a
    refused token says how to give one (as the HTTP commands do)."""
    code, message = str(frame.get("code") or ""), str(frame.get("message") or "")
    if code == "unauthorized" and args is not None:
        message += (" (pass --token-file FILE or set $ONGRID_TOKEN)" if not token(args)
                    else " (check the token given by --token, --token-file or $ONGRID_TOKEN)")
    if code and code.replace("_", " ") in message.lower():
        return f"ongrid: {message}"
    return f"ongrid: {code}: {message}"


async def _ask(args: argparse.Namespace) -> int:
    from trio_websocket import ConnectionClosed, HandshakeError

    from ongridd.cli.termui import is_tty, json_line, safe_frame

    url = ws_url(getattr(args, "url", None))
    thread = args.thread or f"ask-{uuid.uuid4().hex[:12]}"
    text = " ".join(args.text)
    session_id = None
    progress = _AskProgress(sys.stderr, tty=is_tty(sys.stderr)) if not args.json else None
    try:
        async with await _connect(url) as ws:
            await ws.send_message(_hello(args, thread))
            sent = False
            with trio.move_on_after(args.timeout) as timer:
                while True:
                    frame = json.loads(await ws.get_message())
                    if args.json:
                        print(json_line(frame), flush=True)
                    frame = safe_frame(frame)  # model text shown as text, never as terminal controls
                    kind = frame.get("type")
                    if progress is not None:
                        progress.feed(frame)
                    if kind == "session" and not sent:
                        session_id = frame.get("session_id")
                        await ws.send_message(json.dumps({"type": "user_message", "text": text}))
                        sent = True
                    elif kind == "final":
                        if not args.json:
                            print(frame.get("text", ""))
                            print(_where(thread, session_id), file=sys.stderr)
                        return 0
                    elif kind == "error":
                        if not args.json:
                            print(_error_line(frame, args), file=sys.stderr)
                            if session_id is not None and sent:  # where the failed turn's transcript is
                                print(_where(thread, session_id, f"; `ongrid chat --thread {thread}` goes on there"),
                                      file=sys.stderr)
                        if frame.get("code") == "unauthorized" and session_id is None:
                            return 2  # the hello was refused (a missing or wrong token): as chat and the HTTP commands
                        return 1  # bad_frame included: our one message was refused, nothing will follow
            if timer.cancelled_caught:
                print(f"ongrid: no final answer within {args.timeout:g} s; the turn goes on in the daemon "
                      f"(thread {thread}, session {session_id}: `ongrid chat --thread {thread}` re-attaches)",
                      file=sys.stderr)
                return 1
    except ConnectionClosed as exc:
        reason = getattr(exc, "reason", None)
        if getattr(reason, "code", None) == 1001:  # going away: a stop, not a crash
            why = "it is stopping (a restart or a shutdown)"
        else:
            code = getattr(reason, "code", None)
            why = f"it closed the connection{f' (code {code})' if code else ''} (is it shutting down, or did it crash?)"
        print(f"ongrid: the daemon at {url} went away: {why}. The turn's transcript is in thread {thread} "
              f"(`ongrid chat --thread {thread}` re-attaches once it is back).", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise  # our own output was closed (`| head`), not the daemon's connection
    except (OSError, HandshakeError, trio.BrokenResourceError) as exc:
        print(f"ongrid: cannot talk to the daemon at {url}: {_why(exc)} "
              "(point at the right daemon with --url or ONGRID_URL)", file=sys.stderr)
        return 2
    return 1


def _where(thread: str, session_id: str | None, more: str = "") -> str:
    """The line ``ask`` ends a turn with on stderr: which thread and session hold its transcript."""
    return f"(thread {thread}, session {session_id}: see `ongrid sessions tree {session_id}`{more})"


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
    answer within ``--timeout``), 2 on usage or connection errors or a refused token."""
    if not " ".join(args.text).strip():
        print(f"ongrid: bad_frame: {EMPTY_MESSAGE}", file=sys.stderr)  # what the daemon would answer
        return 1
    try:
        token(args)  # resolve (and warn about --token) before connecting
        _check_daemon(args)
        return trio.run(_ask, args)
    except ClientError as exc:
        print(f"ongrid: {exc}", file=sys.stderr)
        return 2


# ---- chat -----------------------------------------------------------------------

class _ChatUI:
    """Renders frames: text the coordinator sends before a tool call as a
    line, one line per worker tile (redrawn in place on a terminal), the
    final answer as rendered markdown (plain text when stdout is not a TTY),
    and a ``you> `` prompt whenever no turn runs."""

    PROMPT = "you> "

    def __init__(self, out: Any = None, *, prompt: bool | None = None):
        from ongridd.cli.termui import TileBoard, is_tty

        self.out = out or sys.stdout
        self.board = TileBoard(self.out)
        self.pending_text = ""
        self.turn_running = False
        self.show_prompt = is_tty(sys.stdin) if prompt is None else prompt
        self.prompted = False
        #: lines sent, and how many of them have had their turn end (every turn so far, once idle);
        #: ``changed`` is set (and replaced) whenever either moves
        self.sent = 0
        self.ended = 0
        self.changed = trio.Event()
        #: set once the first session frame has been shown
        self.greeted = trio.Event()
        #: lines of this client whose turn ended without an answer: an error frame, or the daemon gone
        #: while it ran (piped input: exit status 1)
        self.errors = 0
        #: how this client's last line ended: None (answered), an error frame's code, "unsent" (the
        #: daemon went away before the line could be sent, or before it read it), or "unsure" (it went
        #: away after the line was sent, before a frame of its turn came: whether it was read is
        #: settled by the thread's last exchange once re-attached, :meth:`settle`)
        self.last_end: str | None = None
        #: the last line sent, and whether a frame of its turn has come since
        self.last_text: str | None = None
        self.heard = True
        #: the answer the re-attach's last exchange printed: the same turn's ``final``, replayed to a
        #: client that was away when it ended, is not printed a second time
        self.shown_answer: str | None = None

    def _moved(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def _line(self, text: str) -> None:
        from ongridd.cli.termui import safe_text

        self._end_prompt()
        self.out.write(safe_text(text) + "\n")
        self.out.flush()

    def notice(self, text: str) -> None:
        """A line of its own (the live tiles ended first, the prompt line
        closed) — e.g. the daemon went away; the running turn is over."""
        if self.ended < self.sent:  # a line of ours gets no answer
            self.errors += 1
            if not self.heard and self.last_end is None:  # sent, but maybe never read: see settle()
                self.last_end = "unsure"
        self.board.close()
        self.pending_text = ""
        self.turn_running = False
        self.ended = self.sent
        self._moved()
        self._line(text)

    def _end_prompt(self) -> None:
        if self.prompted:
            self.out.write("\n")
            self.prompted = False

    def prompt(self) -> None:
        """Show the prompt marker (once) when idle; with input from a pipe or a file there is
        none (each line sent is echoed after the marker instead: :meth:`user_sent`)."""
        if self.show_prompt and not self.turn_running and not self.prompted:
            self.out.write(self.PROMPT)
            self.out.flush()
            self.prompted = True

    def user_sent(self, text: str) -> None:
        """``text`` is being sent.  On a terminal the user's Enter ended the prompt
        line; a line typed ahead (echoed before the prompt was drawn) leaves ``you> ``
        dangling after it, so the current line is erased (CR + EL; a no-op at column 0); a
        line sent while a turn runs (the terminal echoed it wherever the live tiles left the
        cursor) is printed again as ``you> text`` above the tiles.
        Input from a pipe or a file is not echoed by a terminal: the line is printed
        after the marker, so the output reads as a transcript."""
        if self.show_prompt:
            self.out.write("\r\x1b[K")
            self.out.flush()
            if self.turn_running:  # sent while a turn runs (it joins it): its own line, above the tiles
                self.board.print_above(f"{self.PROMPT}{text}")
        else:
            self._line(f"{self.PROMPT}{text}")
        self.prompted = False
        self.turn_running = True
        self.sent += 1
        self.last_end = None  # this line's own outcome from here on (a retry's earlier busy is over)
        self.last_text, self.heard = text, False
        self._moved()

    def _flush_text(self) -> None:
        text, self.pending_text = self.pending_text.strip(), ""
        if text:
            self.board.close()
            self._line(text)

    def _turn_over(self) -> None:
        self.board.close()
        self.pending_text = ""
        self.turn_running = False
        self.ended = self.sent
        self._moved()
        self.prompt()

    def settle(self, messages: list[dict]) -> None:
        """Re-attached (``messages``: the thread's last messages, none for a new thread): a line
        sent just before the daemon went away, with no frame of its turn since ("unsure"), was
        read when the thread's last user message is that line — its turn ran, and it is not sent
        again — and otherwise never reached the daemon ("unsent": piped input sends it again)."""
        if self.last_end != "unsure":
            return
        last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        if last is not None and last.get("content") == self.last_text:
            self.last_end = None
        else:
            self.last_end = "unsent"
            self._line("[your last line did not reach the daemon before it went away; " + (
                "type it again]" if self.show_prompt else "it is sent again]"))
        self._moved()

    def last_exchange(self, info: dict | None, messages: list[dict]) -> None:
        """Print the thread's last user message and answer (re-attach), and
        say when its last turn was cut off (``last_turn: interrupted``)."""
        from ongridd.cli.termui import print_markdown

        at = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None)
        if at is None:
            return
        user, after = messages[at], messages[at + 1:]  # by place: a message held for the turn has no seq yet
        answer = next((m for m in reversed(after) if m.get("role") == "assistant" and m.get("content")
                       and not m.get("tool_calls")), None)
        self._line("— last exchange in this thread —")
        self._line(f"{self.PROMPT}{user.get('content', '')}")
        last_turn = (info or {}).get("last_turn")
        if answer is not None and last_turn != "interrupted":
            self._end_prompt()
            print_markdown(answer.get("content", ""), self.out)
            self.shown_answer = answer.get("content", "")
        why = (info or {}).get("last_turn_error")
        if last_turn == "interrupted" and isinstance(why, str) and why:
            self._line(f"[the last turn ended without an answer: {' '.join(why.split())}; send a message to go on]")
        elif last_turn == "interrupted":
            self._line("[the last turn was cut off by a restart, most likely, before it answered (the daemon log "
                       "says); send a message to go on]")
        elif last_turn == "running":
            self.turn_running = True  # until its final or error frame (piped input's end waits for it)
            self._line("[its turn is still running; its progress and answer follow]")
        self._line("—")

    def render(self, frame: dict) -> None:
        from ongridd.cli.termui import print_markdown, tool_line

        kind = frame.get("type")
        if kind != "session":
            self.heard = True
        if kind == "session":
            state = "re-attached to" if frame.get("resumed") else "new"
            self._line(f"[{state} thread {frame.get('thread')} — session {frame.get('session_id')}]")
            if self.show_prompt:
                self._line("[type a message and press Enter; Ctrl-C stops a running turn (again: quits); "
                           "Ctrl-C with none running, or Ctrl-D, quits]")
        elif kind == "token":
            self.turn_running = True
            self.pending_text += frame.get("text", "")
        elif kind == "interim":
            self._flush_text()
            self.board.close()
            self._line(f"  … {frame.get('text', '')}")
        elif kind == "tool":
            self.turn_running = True
            self._flush_text()
            said = tool_line(frame)
            if said is not None:
                self.board.close()
                self._line(f"  [{said}]")
        elif kind == "agent_tile":
            self.turn_running = True
            self._flush_text()
            self._end_prompt()
            self.board.update(frame)
        elif kind == "agent_result":
            pass
        elif kind == "final":
            self.board.close()
            self._end_prompt()
            mine = self.ended < self.sent
            if mine or frame.get("text", "") != self.shown_answer:  # not the replay of what was just shown
                print_markdown(frame.get("text", ""), self.out)
            self.shown_answer = None
            if mine:
                self.last_end = None
            self._turn_over()
        elif kind == "error":
            self.board.close()
            self._line(f"[{frame.get('code')}] {frame.get('message')}")
            if self.ended < self.sent:  # not an old turn's error replayed on attach
                self.errors += 1
                self.last_end = frame.get("code")
            if frame.get("code") in ("stopped", "provider_error", "internal", "busy"):
                self._turn_over()


def _fetch_last_exchange(args: argparse.Namespace, session_id: str) -> tuple[dict | None, list[dict]]:
    """``(thread row of GET /api/sessions, its last messages)``; raises what
    :func:`http_json` raises."""
    from urllib.parse import quote

    from ongridd.cli.common import http_json

    info = next((r for r in http_json("GET", args, "/api/sessions?limit=200", timeout_s=15)
                 if r.get("id") == session_id), None)
    messages: list[dict] = []
    after = 0
    while True:  # the transcript in pages; only the tail is shown
        page = http_json("GET", args, f"/api/sessions/{quote(session_id)}/messages?after_seq={after}&limit=2000",
                         timeout_s=15)
        page = [m for m in page if m.get("role") != "summary"]
        if not page:
            break
        messages = (messages + page)[-200:]
        after = page[-1]["seq"]
        if len(page) < 2000:
            break
    return info, messages


#: how long ``ongrid chat`` tries to reconnect after the daemon went away (seconds)
RECONNECT_FOR_S = 30.0
#: how long piped ``ongrid chat`` keeps sending a line again that was refused busy or not sent (seconds)
RETRY_FOR_S = 120.0


async def _chat(args: argparse.Namespace) -> int:
    """The chat loop.  One stdin reader and one Ctrl-C handler live for the
    whole run; the connection is opened, and — when the daemon goes away
    (restart, crash) — re-opened with backoff for up to ``RECONNECT_FOR_S``
    and re-attached to the same thread (the re-attach notice and last
    exchange are shown as on start).  2 when it cannot (re)connect."""
    from trio_websocket import ConnectionClosed, HandshakeError

    from ongridd.cli.termui import is_tty, safe_frame

    url = ws_url(getattr(args, "url", None))
    ui = _ChatUI()
    lines_send, lines_recv = trio.open_memory_channel[str](0)
    current: dict[str, Any] = {"ws": None}
    result = {"code": 0}
    gone = (ConnectionClosed, OSError, HandshakeError, trio.BrokenResourceError)

    async def attached(ws: Any) -> None:
        """Serve one connection until it closes (returns) or the user quits."""
        greeted = trio.Event()  # the session frame (and a resumed thread's last exchange) is shown

        async def reader() -> None:
            while True:
                frame = safe_frame(json.loads(await ws.get_message()))
                if frame.get("type") == "error" and frame.get("code") == "unauthorized" and not greeted.is_set():
                    current["refused"] = frame  # the hello was refused: no reconnecting will change that
                    return
                ui.render(frame)
                if frame.get("type") == "session":
                    messages: list[dict] = []
                    if frame.get("resumed"):
                        try:
                            info, messages = await trio.to_thread.run_sync(
                                _fetch_last_exchange, args, frame.get("session_id"))
                            ui.last_exchange(info, messages)
                        except (ClientError, RuntimeError) as exc:
                            ui._line(f"[could not read the thread's last exchange: {exc}]")
                            messages = [{"role": "user", "content": ui.last_text}]  # unknown: never sent twice
                    ui.settle(messages)
                    ui.prompt()
                    greeted.set()
                    ui.greeted.set()

        async def writer() -> None:
            # nothing is sent before the thread's last exchange is read: a line sent earlier (piped
            # input is there at once) would be read back as that exchange
            await greeted.wait()
            async for line in lines_recv:
                ui.user_sent(line)
                try:
                    await ws.send_message(json.dumps({"type": "user_message", "text": line}))
                except gone:
                    ui.last_end = "unsent"
                    ui.notice("[not sent — the daemon went away; " + (
                        "it is sent again once re-attached]" if piped else "type it again once re-attached]"))
                    raise

        try:
            async with trio.open_nursery() as inner:
                async def run_then_stop(fn: Any) -> None:
                    await fn()
                    inner.cancel_scope.cancel()

                inner.start_soon(run_then_stop, reader)
                inner.start_soon(run_then_stop, writer)
        except BaseException as raised:  # noqa: BLE001 - re-raised unless the connection is gone
            if only_gone(raised) is None:
                raise

    def only_gone(exc: BaseException) -> BaseException | None:
        """``exc`` (or the first of a group made only of them) when it says
        the connection is gone; None for anything else."""
        if isinstance(exc, gone):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            matched, rest = exc.split(gone)  # by leaf type, through nested groups
            if rest is None and matched is not None:
                return only_gone(matched.exceptions[0])
        return None

    async def connection(outer: trio.Nursery) -> None:
        first = True
        while True:
            deadline = trio.current_time() + (0 if first else RECONNECT_FOR_S)
            delay = 0.25
            while True:
                was_attached = False
                try:
                    async with await _connect(url) as ws:
                        await ws.send_message(_hello(args, args.thread))
                        current["ws"], was_attached, first = ws, True, False
                        await attached(ws)
                    if current.get("refused"):  # a missing or wrong token: say how to give one, and stop
                        ui._end_prompt()
                        print(_error_line(current["refused"], args), file=sys.stderr)
                        result["code"] = 2
                        outer.cancel_scope.cancel()
                        return
                    break
                except BaseException as raised:  # noqa: BLE001 - re-raised unless the connection is gone
                    exc = only_gone(raised)
                    if exc is None:
                        raise
                    if was_attached:
                        break  # it went away while attached: reconnect below
                    if trio.current_time() >= deadline:
                        if first:
                            print(f"ongrid: cannot talk to the daemon at {url}: {_why(exc)}", file=sys.stderr)
                        else:
                            ui.notice(f"[could not reconnect to the daemon at {url} within {RECONNECT_FOR_S:g} s; "
                                      f"once it is back, `ongrid chat --thread {args.thread}` re-attaches]")
                        result["code"] = 2
                        outer.cancel_scope.cancel()
                        return
                    await trio.sleep(delay)
                    delay = min(delay * 2, 4.0)
                finally:
                    current["ws"] = None
            ui.notice("[the daemon went away; reconnecting…]")

    # Input from a pipe or a file (not a terminal) is a script: each line is sent once the
    # previous line's turn has ended, and the end of the input quits after the last answer.
    piped = not is_tty(sys.stdin)

    async def answered() -> None:
        while ui.ended < ui.sent:
            await ui.changed.wait()

    async def stdin_reader(outer: trio.Nursery) -> None:
        while True:
            line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
            if not line:  # EOF
                if piped:
                    await ui.greeted.wait()  # the thread's header, even for empty input
                    await answered()
                    while ui.turn_running:  # re-attached to a running turn: its answer was promised
                        await ui.changed.wait()
                outer.cancel_scope.cancel()
                return
            if line.strip() and not piped:
                await lines_send.send(line.rstrip("\n"))
            elif line.strip():
                await send_piped(line.rstrip("\n"))

    async def send_piped(text: str) -> None:
        """Send one line of a script and wait for its turn to end.  A line the
        daemon refused ``busy`` (nothing was run or stored: it was full, or
        shutting down) or that could not be sent (it went away) is sent again,
        after 0.5 s doubling to 8 s, for up to RETRY_FOR_S; a line whose turn
        ran is never sent twice."""
        delay, deadline = 0.5, trio.current_time() + RETRY_FOR_S
        while True:
            sent = ui.sent
            await lines_send.send(text)  # once a writer takes it: after a reconnect, once re-attached
            while ui.sent == sent:  # the writer has taken it; then wait for its turn to end
                await ui.changed.wait()
            await answered()
            while ui.last_end == "unsure":  # the daemon went away just after it was sent: settled on re-attach
                await ui.changed.wait()
            if ui.last_end not in ("busy", "unsent") or trio.current_time() + delay > deadline:
                return
            ui.errors -= 1  # the line is sent again: its outcome is the retry's
            if ui.last_end == "busy":
                ui._line(f"[sending it again in {delay:g} s]")
                await trio.sleep(delay)
                delay = min(delay * 2, 8.0)

    async def interrupts(outer: trio.Nursery) -> None:
        last = -10.0
        with trio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                now = trio.current_time()
                ws = current["ws"]
                if ui.turn_running and ws is not None and now - last > 2.0:
                    ui._line("[stopping the turn — press Ctrl-C again to quit]")
                    try:
                        await ws.send_message(json.dumps({"type": "stop"}))
                    except gone:
                        pass
                    last = now
                else:
                    outer.cancel_scope.cancel()
                    return

    async with trio.open_nursery() as outer:
        outer.start_soon(connection, outer)
        outer.start_soon(stdin_reader, outer)
        outer.start_soon(interrupts, outer)
    ui._end_prompt()  # quitting at the prompt: the shell's own prompt starts on a line of its own
    if piped and result["code"] == 0 and ui.errors:
        return 1  # a script learns that a line got no answer
    return result["code"]


def run_chat(args: argparse.Namespace) -> int:
    """``ongrid chat``: 0 when the user quits, 2 on usage or connection errors; with input from a pipe or
    a file, 1 when a line's turn ended with an error instead of an answer."""
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
