"""``ongrid ask`` as a real process against the real daemon: on a terminal
it says on stderr where its turn waits in the queue and how its workers
progress (stdout keeps only the answer), and a refused or empty question
leaves no empty thread behind (docs/architecture.md §15.1)."""

from __future__ import annotations

import json
import subprocess

import trio
from pty_helpers import on_a_terminal
from rt_helpers import agent_call, ongrid_cmd, open_daemon, subprocess_env
from test_rt_cli import run_cli

BLOCKER = {"default": [{"delay_s": 120, "content": "never answered"}]}
ASK = {
    "default": [
        {"content": "Asking the disk specialist.",
         "tool_calls": [agent_call("specialist-disk", "Is the disk ok on host local?", "disk check")]},
        {"content": "The disk is fine."},
    ],
    "specialist-disk": [{"content": "disk ok"}],
}


async def _ask_on_a_terminal(url: str, text: str, until: str, when_seen: object) -> tuple[int, str, str]:
    """Run ``ongrid ask`` with stderr on a pseudo-terminal and stdout on a
    pipe; once ``until`` shows on the terminal, ``await when_seen()`` runs.
    Returns (exit code, stdout, what the terminal showed)."""
    env = subprocess_env(ONGRID_TOKEN="", ONGRID_URL="", COLUMNS="120")
    async with on_a_terminal(ongrid_cmd("ask", "--url", url, text), env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE) as term:
        out, called = b"", False
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                async def read_stdout() -> None:
                    nonlocal out
                    while chunk := await term.proc.stdout.receive_some(65536):
                        out += chunk

                nursery.start_soon(read_stdout)
                while await term.read():
                    if not called and until.encode() in term.shown:
                        called = True
                        await when_seen()
            code = await term.proc.wait()
    return code, out.decode(), term.text


def _threads(d) -> list[dict]:
    return d.rows("SELECT id, thread_id FROM chat_sessions WHERE parent_session_id IS NULL ORDER BY created_at")


async def test_ask_shows_its_queue_place_and_worker_progress_on_stderr(tmp_path):
    async with open_daemon(tmp_path, BLOCKER, limits={"max_concurrent_turns": 1}) as d, d.ws("blocker") as c:
        await c.send({"type": "user_message", "text": "hold the only slot"})
        with trio.fail_after(15):
            await d.fake.wait_requests(1)  # the blocker's turn holds the only slot
        d.use_script(ASK)

        async def free_the_slot() -> None:
            await c.send({"type": "stop"})

        code, out, shown = await _ask_on_a_terminal(d.base_url, "is the disk ok?", "queued (position 1)",
                                                    free_the_slot)
        assert code == 0, shown
        assert out == "The disk is fine.\n"  # stdout: only the answer
        lines = shown.splitlines()
        assert "… queued (position 1)" in lines
        assert "… the turn is starting (it waited in the queue)" in lines
        tiles = [line for line in lines if "specialist-disk [" in line]
        assert any("[running]" in t for t in tiles) and any("[completed]" in t for t in tiles), shown
        assert len(tiles) == len(set(tiles))  # one line per change, not per frame
        assert "The disk is fine." not in shown

        # --json is unchanged: frames on stdout, nothing more on stderr
        d.use_script({"default": [{"content": "plain"}]})
        code, out, err = await run_cli("ask", "--url", d.base_url, "--json", "hello")
        assert code == 0 and json.loads(out.splitlines()[-1])["type"] == "final" and "queued" not in err


async def test_refused_and_empty_questions_leave_no_thread(tmp_path):
    limits = {"max_concurrent_turns": 1, "max_queued_turns": 0}
    async with open_daemon(tmp_path, BLOCKER, limits=limits) as d, d.ws("blocker") as c:
        await c.send({"type": "user_message", "text": "hold the only slot"})
        with trio.fail_after(15):
            await d.fake.wait_requests(1)
        code, out, err = await run_cli("ask", "--url", d.base_url, "--thread", "refused", "hello")
        assert code == 1 and out == ""
        assert err.startswith("ongrid: the daemon is busy: ") and "busy: the daemon is busy" not in err
        # an empty question fails at once, without connecting, as the daemon would refuse it
        for text in ("", "   "):
            code, out, err = await run_cli("ask", "--url", "http://127.0.0.1:9", "--thread", "empty", text)
            assert (code, out) == (1, "") and err == "ongrid: bad_frame: user_message.text must be a non-empty string\n"
        # the same refusal straight on the socket: the daemon drops the row it created for it
        async with d.ws("empty-socket") as e:
            await e.send({"type": "user_message", "text": "  "})
            assert (await e.until_type("error"))["code"] == "bad_frame"
        with trio.fail_after(10):
            while [t for t in _threads(d) if t["thread_id"] != "blocker"]:
                await trio.sleep(0.05)
        code, out, err = await run_cli("sessions", "list", "--json", "--url", d.base_url)
        assert code == 0, err
        assert [t["thread"] for t in json.loads(out)] == ["blocker"]

        # two connections on one new thread: the one that created it leaves early, the other sends
        await c.send({"type": "stop"})
        await c.until_type("error", "final")
        d.use_script({"default": [{"content": "kept"}]})
        attached, leave, left = trio.Event(), trio.Event(), trio.Event()
        created: dict = {}

        async def creator() -> None:
            async with d.ws("shared") as first:
                created.update(first.session)
                attached.set()
                await leave.wait()
            left.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(creator)
            await attached.wait()
            assert not created["resumed"]
            async with d.ws("shared") as other:
                assert other.session_id == created["session_id"]
                leave.set()  # the connection that created the thread leaves first
                await left.wait()
                await trio.sleep(0.5)  # its release has run by now (it keeps the thread: one holder is left)
                assert (await other.ask("keep this thread"))["text"] == "kept"
        async with d.ws("created-then-left") as third:
            assert not third.session["resumed"]
        # a connection that attached without sending: its empty thread goes; one that talked stays
        with trio.fail_after(10):
            while "created-then-left" in {t["thread_id"] for t in _threads(d)}:
                await trio.sleep(0.05)
        assert {t["thread_id"] for t in _threads(d)} == {"blocker", "shared"}
        code, out, err = await run_cli("sessions", "list", "--url", d.base_url)
        assert code == 0 and "shared" in out and "created-then-left" not in out


async def test_a_failed_dispatch_is_said_by_ask_and_chat(tmp_path):
    """A dispatch that fails has no worker tile: ``ask`` says it on stderr (a terminal or not),
    ``chat`` in its transcript, with the daemon's reason."""
    script = {"default": [
        {"content": "Asking the log janitor.", "tool_calls": [agent_call("log-janitor", "Clean the logs.", "logs")]},
        {"content": "I could not ask the log janitor."},
    ]}
    async with open_daemon(tmp_path, script) as d:
        code, out, err = await run_cli("ask", "--url", d.base_url, "--thread", "janitor", "clean the logs")
        assert code == 0 and out == "I could not ask the log janitor.\n", err
        said = [line for line in err.splitlines() if "tool AgentTool" in line]
        assert len(said) == 1 and said[0].startswith("  tool AgentTool: error — ") and "log-janitor" in said[0], err
        d.use_script(script)
        with trio.fail_after(60):
            proc = await trio.run_process(ongrid_cmd("chat", "--url", d.base_url, "--thread", "janitor-chat"),
                                          stdin=b"clean the logs\n", capture_stdout=True, capture_stderr=True,
                                          check=False, env=subprocess_env(ONGRID_TOKEN="", ONGRID_URL=""))
        shown = proc.stdout.decode()
        assert proc.returncode == 0, proc.stderr.decode()
        assert "[tool AgentTool: error — " in shown and "log-janitor" in shown, shown
        assert shown.index("[tool AgentTool: error") < shown.index("I could not ask the log janitor."), shown

