"""``ongrid chat`` as a real process against the real ``ongridd serve``
process and the scripted model: re-attaching shows the thread's last
exchange (markdown rendered on a terminal, plain text in a pipe) and says
when the last turn was cut off by a restart (kill -9 mid-turn, restart).
docs/architecture.md §15.1."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
from contextlib import AsyncExitStack

import pytest
import trio
from pty_helpers import on_a_terminal, plain
from rt_helpers import ongrid_cmd, prepare, subprocess_env
from test_rt_process import serve, write_config, ws
from trio_websocket import ConnectionClosed, open_websocket_url

from ongridd.fakellm import open_fake_llm

ANSWER = "**Disk** is fine.\n\n- the largest folder is `logs`\n- nothing else grows"


def _config(tmp_path, fake=None, **llm):
    """The daemon's config file in ``tmp_path``: the scripted model ``fake`` (when given) and ``llm``
    settings on top of the test defaults."""
    mapping = prepare(tmp_path)
    if fake is not None:
        mapping["llm"].update(base_url=fake.base_url, **llm)
    return write_config(tmp_path, mapping)


async def _pipe_chat(url: str, thread: str, until: str | None = None, data: bytes = b"", code: int = 0) -> str:
    """Run ``ongrid chat`` with pipes (not a TTY): write ``data``, wait until ``until`` is printed
    (when given), then end its input (EOF quits); returns everything it printed once it exited with
    status ``code``."""
    proc = await trio.lowlevel.open_process(ongrid_cmd("chat", "--url", url, "--thread", thread),
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, env=subprocess_env())
    out = b""
    try:
        with trio.fail_after(30):
            if data:
                await proc.stdin.send_all(data)
            while until is not None and until.encode() not in out:
                chunk = await proc.stdout.receive_some(65536)
                assert chunk, f"chat exited before printing {until!r}: {out.decode(errors='replace')}"
                out += chunk
            await proc.stdin.aclose()  # EOF: the client quits
            while chunk := await proc.stdout.receive_some(65536):
                out += chunk
            assert await proc.wait() == code, out.decode(errors="replace")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return out.decode()


async def _leave_a_turn_running(daemon, fake, thread: str, text: str) -> None:
    """Send ``text`` on ``thread`` from a client that goes away once the model has the turn's request."""
    async with ws(daemon.ws_url, thread) as c:
        await c.send({"type": "user_message", "text": text})
        with trio.fail_after(15):
            await fake.wait_requests(1)


async def _pty_chat(url: str, thread: str, until: str) -> str:
    """Run ``ongrid chat`` on a pseudo-terminal until ``until`` is printed,
    then send Ctrl-D; returns what the terminal showed."""
    env = subprocess_env(COLUMNS="100", TERM="xterm-256color")
    async with on_a_terminal(ongrid_cmd("chat", "--url", url, "--thread", thread), env) as term:
        with trio.fail_after(30):
            await term.until(until)
            term.write(b"\x04")  # Ctrl-D on an empty line: EOF
            await term.read_to_end()
            assert await term.proc.wait() == 0
    return term.text  # without colours and cursor moves


async def test_chat_reattach_shows_last_exchange_and_the_restart_cut(tmp_path):
    script = {"default": [{"content": ANSWER}, {"delay_s": 120, "content": "never answered"}]}
    async with open_fake_llm(script) as fake:
        config = _config(tmp_path, fake)
        async with serve(config) as first:
            async with ws(first.ws_url, "cli") as c:
                assert (await c.ask("is the disk ok?"))["text"] == ANSWER
            # a pipe: the last exchange as plain text, up to its closing line
            piped = await _pipe_chat(first.url, "cli", until="\n—\n")
            assert "re-attached to thread cli" in piped
            assert "you> is the disk ok?" in piped
            assert ANSWER in piped and "cut off" not in piped
            # a terminal: the answer's markdown is rendered (no ** or list dashes left)
            shown = await _pty_chat(first.url, "cli", until="nothing else grows")
            assert "you> is the disk ok?" in shown
            assert "Disk is fine." in shown and "**Disk**" not in shown
            assert "• the largest folder is logs" in shown
            async with ws(first.ws_url, "cli") as c:
                await c.send({"type": "user_message", "text": "and the memory?"})
                with trio.fail_after(15):
                    await fake.wait_requests(2)  # the turn's model call is in flight
            first.proc.send_signal(signal.SIGKILL)
            with trio.fail_after(10):
                await first.proc.wait()
        async with serve(config) as second:
            piped = await _pipe_chat(second.url, "cli", until="\n—\n")
            assert "you> and the memory?" in piped
            assert "the last turn was cut off by a restart" in piped
            assert "never answered" not in piped
            shown = await _pty_chat(second.url, "cli", until="send a message to go on")
            assert "cut off by a restart" in shown and "and the memory?" in shown


async def test_an_answer_given_while_away_is_shown_once_on_reattach(tmp_path):
    """The turn ends while no client is attached: re-attaching prints it in the
    last exchange, and the replayed ``final`` of that turn is not printed again."""
    script = {"default": [{"delay_s": 1.0, "content": "the answer while you were away"}]}
    async with open_fake_llm(script) as fake:
        config = _config(tmp_path, fake)
        async with serve(config) as daemon:
            await _leave_a_turn_running(daemon, fake, "away", "go away")
            await trio.sleep(2.0)  # the turn ends with nobody attached
            piped = await _pipe_chat(daemon.url, "away", until="\n—\n")
            assert "you> go away" in piped
            assert piped.count("the answer while you were away") == 1, piped


async def test_chat_reconnects_after_the_daemon_restarts(tmp_path):
    """kill -9 the daemon while ``ongrid chat`` is attached, start it again on
    the same port: the chat says so on a line of its own, re-attaches to the
    same thread (the re-attach notice and the restart cut) and can send."""
    script = {"default": [{"content": "first answer"}, {"delay_s": 120, "content": "never answered"},
                          {"content": "answer after the restart"}]}
    async with open_fake_llm(script) as fake:
        mapping = prepare(tmp_path)
        mapping["llm"]["base_url"] = fake.base_url
        with socket.socket() as s:  # one fixed port for both daemons: the chat reconnects to the same URL
            s.bind(("127.0.0.1", 0))
            mapping["server"]["listen"] = f"127.0.0.1:{s.getsockname()[1]}"
        config = write_config(tmp_path, mapping)
        async with AsyncExitStack() as stack:  # the chat outlives the first daemon
            async with serve(config) as first:
                url = first.url
                chat = await stack.enter_async_context(on_a_terminal(
                    ongrid_cmd("chat", "--url", url, "--thread", "again"),
                    subprocess_env(COLUMNS="100", TERM="xterm-256color")))
                with trio.fail_after(30):
                    await chat.until("you> ")
                    chat.write(b"hello\n")
                    await chat.until("first answer")
                    chat.write(b"a long one\n")
                    await fake.wait_requests(2)  # the second turn's model call is in flight
                first.proc.send_signal(signal.SIGKILL)
                with trio.fail_after(10):
                    await first.proc.wait()
                with trio.fail_after(30):
                    await chat.until("reconnecting")
            async with serve(config) as second:
                assert second.url == url
                with trio.fail_after(45):
                    await chat.until("cut off by a restart")
                    await chat.until("you> ")
                    chat.write(b"are you back?\n")
                    await chat.until("answer after the restart")
                chat.write(b"\x04")
                with trio.fail_after(15):
                    assert await chat.proc.wait() == 0
    screen = re.sub(r"[^\r\n]*\r\x1b\[K", "", chat.shown.decode(errors="replace"))  # a line erased (CR + EL) is gone
    text = plain(screen)
    at = text.index("[the daemon went away; reconnecting…]")
    assert text[:at].endswith("\n"), repr(text[at - 200:at + 40])  # on a line of its own
    assert "re-attached to thread again" in text
    assert "never answered" not in text


async def test_piped_chat_sends_each_line_as_its_own_turn_and_waits_for_the_last_answer(tmp_path):
    """``printf 'q1\\nq2\\n' | ongrid chat``: both questions asked one after the
    other, both answers printed, exit 0 (the end of the input waits for them)."""
    script = {"default": [{"content": "first answer", "delay_s": 0.3}, {"content": "second answer", "delay_s": 0.3}]}
    async with open_fake_llm(script) as fake:
        async with serve(_config(tmp_path, fake)) as daemon:
            done = await trio.run_process(ongrid_cmd("chat", "--url", daemon.url, "--thread", "piped"),
                                          stdin=b"what is up?\n\nand now?\n", capture_stdout=True,
                                          capture_stderr=True, env=subprocess_env(), check=False)
        out = done.stdout.decode()
        assert done.returncode == 0, out + done.stderr.decode()
        assert out.index("first answer") < out.index("second answer"), out
        users = [[m["content"] for m in r.body["messages"] if m["role"] == "user"] for r in fake.requests]
        assert len(fake.requests) == 2  # two turns, one model call each (no follow-up merged in)
        assert "what is up?" in users[0] and "and now?" not in users[0]
        assert "and now?" in users[1]


async def test_ask_into_a_closed_pipe_is_not_called_a_daemon_failure(tmp_path):
    """``ongrid ask --json … | head -1``: the reader goes away after the first
    line; the client must not blame the daemon connection for its own stdout."""
    script = {"default": [{"content": "late answer", "delay_s": 0.5}]}
    async with open_fake_llm(script) as fake:
        async with serve(_config(tmp_path, fake)) as daemon:
            proc = await trio.lowlevel.open_process(ongrid_cmd("ask", "--url", daemon.url, "--json", "hello?"),
                                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                    env=subprocess_env())
            with trio.fail_after(30):
                first = await proc.stdout.receive_some(65536)  # the session frame
                assert b'"session"' in first
                await proc.stdout.aclose()  # like `head -1` exiting
                err = b""
                while chunk := await proc.stderr.receive_some(65536):
                    err += chunk
                code = await proc.wait()
    assert code == 1 and b"cannot talk to the daemon" not in err and b"Traceback" not in err, err.decode()


async def test_piped_chat_on_a_thread_shows_its_last_exchange_before_sending(tmp_path):
    """Piped input is there at once: its first line must not be sent before the thread's last
    exchange is read, or the line just sent is shown as that exchange (and its answer twice)."""
    script = {"default": [{"content": "first answer"}, {"content": "second answer"}]}
    async with open_fake_llm(script) as fake:
        async with serve(_config(tmp_path, fake)) as daemon:
            async with ws(daemon.ws_url, "piped") as c:
                assert (await c.ask("first question"))["text"] == "first answer"
            text = await _pipe_chat(daemon.url, "piped", data=b"second question\n")
    exchange = text.split("— last exchange in this thread —", 1)[1].split("\n—\n", 1)[0]
    assert "you> first question" in exchange and "first answer" in exchange, text
    assert "second question" not in exchange, text
    assert text.count("second answer") == 1, text
    # a transcript: each line sent is printed after the marker, before its answer; no bare markers,
    # no keyboard hints
    after = text.split("\n—\n", 1)[1]
    assert after.index("you> second question\n") < after.index("second answer"), text
    assert "you> \n" not in text and "press Enter" not in text, text


async def test_piped_chat_exits_1_when_a_line_gets_no_answer(tmp_path):
    script = {"default": [{"content": "first answer"}, {"http_status": 500}]}
    async with open_fake_llm(script) as fake:
        async with serve(_config(tmp_path, fake, max_retries=0)) as daemon:
            text = await _pipe_chat(daemon.url, "failing", data=b"one\ntwo\n", code=1)
    assert text.index("first answer") < text.index("you> two") < text.index("[provider_error]"), text


async def test_piped_chat_exits_0_when_only_an_earlier_turn_failed(tmp_path):
    # another client's turn failed after it left: its error is shown on attach, but every line of this
    # script was answered
    script = {"default": [{"http_status": 500, "delay_s": 1}, {"content": "second answer"}]}
    async with open_fake_llm(script) as fake:
        async with serve(_config(tmp_path, fake, max_retries=0)) as daemon:
            await _leave_a_turn_running(daemon, fake, "shared", "first")
            await trio.sleep(1.5)  # the call fails with nobody attached
            text = await _pipe_chat(daemon.url, "shared", data=b"second\n", code=0)
    assert "[provider_error]" in text and text.index("you> second") < text.index("second answer"), text


async def test_piped_chat_with_no_input_still_names_the_thread(tmp_path):
    async with serve(_config(tmp_path)) as daemon:
        out = await _pipe_chat(daemon.url, "empty-in")
    assert "[new thread empty-in" in out, out


async def test_ask_says_the_daemon_stopped_its_turn_when_it_is_sent_sigterm(tmp_path):
    # a graceful stop drains the turns while the chat sockets are still up, then closes them with 1001
    # (going away): the client tells a stop from a crash
    script = {"default": [{"content": "too late", "delay_s": 60}]}
    async with open_fake_llm(script) as fake:
        async with serve(_config(tmp_path, fake)) as daemon:
            ask = await trio.lowlevel.open_process(ongrid_cmd("ask", "--url", daemon.url, "--thread", "stopping",
                                                              "still there?"),
                                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                   env=subprocess_env())
            try:
                async with open_websocket_url(daemon.ws_url) as idle:  # another client, attached and idle
                    await idle.send_message(json.dumps({"type": "hello", "thread": "idle"}))
                    assert json.loads(await idle.get_message())["type"] == "session"
                    with trio.fail_after(30):
                        await fake.wait_requests(1)  # the turn is under way
                        daemon.proc.send_signal(signal.SIGTERM)
                        err = b""
                        while chunk := await ask.stderr.receive_some(65536):
                            err += chunk
                        code = await ask.wait()
                        with pytest.raises(ConnectionClosed) as closed:
                            while True:
                                await idle.get_message()
                    assert closed.value.reason.code == 1001, closed.value.reason
            finally:
                if ask.returncode is None:
                    ask.kill()
                    await ask.wait()
    text = err.decode()
    # the turn is drained before the server stops: its end reaches the client, which says what happened
    assert code == 1 and "the turn was stopped by a daemon shutdown" in text, text
    assert "CloseReason" not in text and "1006" not in text, text


async def test_chat_with_a_refused_token_says_how_to_give_one_and_exits(tmp_path, monkeypatch):
    # a refused hello is not the daemon going away: reconnecting changes nothing (it looped for ever)
    monkeypatch.setenv("RT_CHAT_TOKENS", "alice:tok-alice-chat-0123456789")
    monkeypatch.delenv("ONGRID_TOKEN", raising=False)
    mapping = prepare(tmp_path)
    mapping["server"] = {**mapping.get("server", {}), "tokens_env": "RT_CHAT_TOKENS"}
    async with serve(write_config(tmp_path, mapping)) as daemon:
        with trio.fail_after(20):
            out = await _pipe_chat(daemon.url, "locked", code=2)
    assert "a token is required (pass --token-file FILE or set $ONGRID_TOKEN)" in out, out
    assert "reconnecting" not in out, out


async def test_ask_with_a_missing_or_refused_token_exits_2_saying_how_to_give_one(tmp_path, monkeypatch):
    # a refusal, as chat and the HTTP commands exit on it, not a turn that failed (1)
    monkeypatch.setenv("RT_ASK_TOKENS", "alice:tok-alice-ask-0123456789")
    mapping = prepare(tmp_path)
    mapping["server"] = {**mapping.get("server", {}), "tokens_env": "RT_ASK_TOKENS"}
    async with serve(write_config(tmp_path, mapping)) as daemon:
        for given, says in ((None, "(pass --token-file FILE or set $ONGRID_TOKEN)"),
                            ("tok-wrong-wrong-0123456789", "(check the token given by --token, --token-file or "
                                                          "$ONGRID_TOKEN)")):
            env = {k: v for k, v in subprocess_env().items() if k != "ONGRID_TOKEN"}
            if given:
                env["ONGRID_TOKEN"] = given
            with trio.fail_after(30):
                done = await trio.run_process(ongrid_cmd("ask", "--url", daemon.url, "hello?"), capture_stdout=True,
                                              capture_stderr=True, check=False, env=env)
            err = done.stderr.decode()
            assert done.returncode == 2 and says in err and "unauthorized" in err, (done.returncode, err)


async def test_reattach_says_why_the_last_turn_failed(tmp_path):
    # the error a turn ended with is stored with the thread: the thread list and a re-attaching
    # ``ongrid chat`` give it after the frame that said it is gone (and a daemon restart), until a
    # later message makes it stale
    script = {"default": [{"http_status": 400}, {"content": "back again"}, {"delay_s": 120, "content": "never"}]}
    async with open_fake_llm(script) as fake:
        config = _config(tmp_path, fake)
        async with serve(config) as first:
            async with ws(first.ws_url, "cli") as c:
                end = await c.ask("will this fail?")
            assert end["type"] == "error" and end["code"] == "provider_error", end
            first.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                await first.proc.wait()
        async with serve(config) as second:
            piped = await _pipe_chat(second.url, "cli", until="\n—\n")
            assert "you> will this fail?" in piped
            assert f"the last turn ended without an answer: provider_error: {end['message']}" in piped, piped
            listed = await trio.run_process(ongrid_cmd("sessions", "list", "--url", second.url), capture_stdout=True,
                                            env=subprocess_env())
            assert re.search(r"\bfailed\s+cli\b", listed.stdout.decode()), listed.stdout
            async with ws(second.ws_url, "cli") as c:  # answered: nothing to explain any more
                assert (await c.ask("and now?"))["text"] == "back again"
            piped = await _pipe_chat(second.url, "cli", until="\n—\n")
            assert "back again" in piped and "without an answer" not in piped
            async with ws(second.ws_url, "cli") as c:  # a turn cut off by a crash leaves no error of its own
                await c.send({"type": "user_message", "text": "one more?"})
                with trio.fail_after(15):
                    await fake.wait_requests(3)
            second.proc.send_signal(signal.SIGKILL)
            with trio.fail_after(10):
                await second.proc.wait()
        async with serve(config) as third:
            piped = await _pipe_chat(third.url, "cli", until="\n—\n")
            assert "the last turn was cut off by a restart" in piped and "provider_error" not in piped


async def test_a_failed_ask_names_its_thread_and_session(tmp_path):
    async with open_fake_llm({"default": [{"http_status": 400}]}) as fake:
        async with serve(_config(tmp_path, fake)) as daemon:
            done = await trio.run_process(ongrid_cmd("ask", "--url", daemon.url, "--thread", "why", "fail?"),
                                          capture_stdout=True, capture_stderr=True, check=False, env=subprocess_env())
    err = done.stderr.decode()
    assert done.returncode == 1 and "provider_error" in err, err
    assert re.search(r"\(thread why, session [0-9a-f-]{36}: see `ongrid sessions tree", err), err


async def test_piped_chat_with_no_input_waits_for_the_running_turn_it_reattached_to(tmp_path):
    """Re-attached to a thread whose turn still runs, ``ongrid chat`` says its
    progress and answer follow: with empty piped input it waits for that
    answer before it quits."""
    script = {"default": [{"delay_s": 3.0, "content": "the slow answer"}]}
    async with open_fake_llm(script) as fake:
        config = _config(tmp_path, fake)
        async with serve(config) as daemon:
            await _leave_a_turn_running(daemon, fake, "slow", "take your time")
            piped = await _pipe_chat(daemon.url, "slow")
            assert "its progress and answer follow" in piped
            assert piped.count("the slow answer") == 1, piped
