"""The real ``ongridd serve`` process: SIGKILL with a worker running, then a
restart (recovery); SIGTERM with a worker running (graceful stop).
docs/architecture.md §4, §15."""

from __future__ import annotations

import json
import signal
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio
from rt_helpers import (
    LiveEnv,
    WsClient,
    agent_call,
    check_invariants,
    db_rows,
    ongridd_cmd,
    prepare,
    subprocess_env,
)
from trio_websocket import open_websocket_url

from ongridd.fakellm import open_fake_llm


@attrs.define
class ServeProcess:
    proc: trio.Process
    logs: list[dict]
    url: str = ""

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws"


@asynccontextmanager
async def serve(config_path: Path):
    """Run ``ongridd serve --config FILE`` until the block ends (then SIGKILL
    if it still runs); yields once it logged ``daemon_ready``."""
    proc = await trio.lowlevel.open_process(ongridd_cmd("serve", "--config", str(config_path)),
                                            stderr=subprocess.PIPE, env=subprocess_env())
    sp = ServeProcess(proc=proc, logs=[])
    ready = trio.Event()

    async def read_logs() -> None:
        buf = b""
        async for chunk in proc.stderr:
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                try:
                    entry = json.loads(line)
                except ValueError:
                    entry = {"event": "text", "text": line.decode(errors="replace")}
                sp.logs.append(entry)
                if entry.get("event") == "daemon_ready":
                    sp.url = entry["url"]
                    ready.set()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_logs)
            with trio.fail_after(30):
                await ready.wait()
            yield sp
            nursery.cancel_scope.cancel()
    finally:
        if proc.returncode is None:
            proc.kill()
        with trio.move_on_after(10, shield=True):
            await proc.wait()


@asynccontextmanager
async def ws(url: str, thread: str):
    async with open_websocket_url(url) as conn:
        c = WsClient(conn)
        await c.send({"type": "hello", "thread": thread})
        c.session = await c.recv()
        yield c


def write_config(root: Path, mapping: dict) -> Path:
    path = root / "ongrid.yaml"
    path.write_text(json.dumps(mapping))  # JSON is YAML 1.2
    return path


async def test_kill_9_with_a_worker_running_then_restart(tmp_path):
    env = LiveEnv()
    script = {
        "default": [
            {"tool_calls": [agent_call("rt-worker", "a long look")]},
            {"tool_calls": [{"name": "TaskStop", "arguments": {"task_id": "${W5}"}}]},
            {"content_from_tool_results": True},
        ],
        "rt-worker": [{"delay_s": 60, "content": "never answered"}],
    }
    async with open_fake_llm(script, env=env) as fake:
        mapping = prepare(tmp_path)
        mapping["llm"]["base_url"] = fake.base_url
        config = write_config(tmp_path, mapping)
        db = Path(mapping["state_dir"]) / "ongrid.db"
        async with serve(config) as first, ws(first.ws_url, "k9") as c:
            sid = c.session_id
            await c.send({"type": "user_message", "text": "look for a long time"})
            tile = await c.tile("running", "rt-worker")
            w5 = tile["task_id"]
            with trio.fail_after(15):
                while not [r for r in fake.requests if r.agent == "rt-worker"]:
                    await fake.wait_requests(len(fake.requests) + 1)
            first.proc.send_signal(signal.SIGKILL)
            with trio.fail_after(10):
                await first.proc.wait()
        (row,) = db_rows(db, "SELECT * FROM chat_sessions WHERE id = ?", (w5,))
        assert row["status"] == "running" and row["closed_at"] is None  # what a crash leaves behind

        async with serve(config) as second:
            check_invariants(db, stopped=True)  # recovery ran before the server accepted clients
            (row,) = db_rows(db, "SELECT * FROM chat_sessions WHERE id = ?", (w5,))
            assert (row["status"], row["close_reason"]) == ("failed", "daemon restarted") and row["closed_at"]
            assert db_rows(db, "SELECT status FROM chat_sessions WHERE id = ?", (sid,)) == [{"status": "open"}]
            tools = db_rows(db, "SELECT content FROM chat_messages WHERE session_id = ? AND role = 'tool'", (sid,))
            assert len(tools) == 1 and "interrupted by a daemon restart" in tools[0]["content"]
            # the dispatch the crash cut off is in the audit, as cancelled
            assert db_rows(db, "SELECT tool_name, status FROM audit_logs WHERE session_id = ?", (sid,)) == [
                {"tool_name": "AgentTool", "status": "cancelled"}]
            async with ws(second.ws_url, "k9") as c:
                assert c.session["session_id"] == sid and c.session["resumed"] is True
                await c.send({"type": "stop", "task_id": w5})
                err = await c.until_type("error")
                assert err["code"] == "not_found"
                assert err["message"] == f"{w5} is not running (failed: daemon restarted)"
                env["W5"] = w5
                final = await c.ask("stop that worker")
                assert final["type"] == "final"
                line = final["text"].split("TaskStop: ", 1)[1]
                assert json.loads(line) == {"status": "error",
                                            "error": f"{w5} is not running (failed: daemon restarted)"}
            second.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                assert await second.proc.wait() == 0
    check_invariants(db, stopped=True)


async def test_sigterm_with_a_worker_running_exits_0_and_kills_it(tmp_path):
    script = {
        "default": [{"tool_calls": [agent_call("rt-worker", "sleep a while")]}],
        "rt-worker": [{"tool_calls": [{"name": "rt_sleep", "arguments": {"seconds": 60}}]}],
    }
    async with open_fake_llm(script) as fake:
        mapping = prepare(tmp_path)
        mapping["llm"]["base_url"] = fake.base_url
        db = Path(mapping["state_dir"]) / "ongrid.db"
        async with serve(write_config(tmp_path, mapping)) as sp:
            async with ws(sp.ws_url, "term") as c:
                await c.send({"type": "user_message", "text": "go"})
                tile = await c.tile("running", "rt-worker")
                with trio.fail_after(15):  # the worker asked the model; the answer sends it into rt_sleep
                    await fake.wait_requests(2)
                assert fake.requests[1].agent == "rt-worker"
                sp.proc.send_signal(signal.SIGTERM)
                with trio.fail_after(10):
                    code = await sp.proc.wait()
            assert code == 0
            events = [e.get("event") for e in sp.logs]
            assert "signal_received" in events and "daemon_stopped" in events
    (row,) = db_rows(db, "SELECT * FROM chat_sessions WHERE id = ?", (tile["task_id"],))
    assert (row["status"], row["close_reason"]) == ("killed", "daemon shutdown") and row["closed_at"]
    audit = db_rows(db, "SELECT tool_name, status FROM audit_logs WHERE session_id = ?", (tile["task_id"],))
    assert audit == [{"tool_name": "rt_sleep", "status": "cancelled"}]
    check_invariants(db, stopped=True)


@asynccontextmanager
async def joined_while_a_worker_waits(tmp_path: Path, *then: dict):
    """The scripted model and config of a turn that dispatches a worker which waits 60 s, then
    acknowledges a message sent meanwhile (the interjection call), then answers ``then``:
    yields ``(fake, config path, database path)``."""
    script = {"default": [{"tool_calls": [agent_call("rt-worker", "a long look")]},
                          {"content": "Noted, I will look at web-2 too."}, *then],
              "rt-worker": [{"delay_s": 60, "content": "never answered"}]}
    async with open_fake_llm(script) as fake:
        mapping = prepare(tmp_path)
        mapping["llm"]["base_url"] = fake.base_url
        yield fake, write_config(tmp_path, mapping), Path(mapping["state_dir"]) / "ongrid.db"


async def test_kill_9_after_a_message_joined_a_running_turn_keeps_that_message(tmp_path):
    """A message sent while a worker runs is read by the turn's model only at
    its next call; it is held in the database from the moment it is accepted,
    so a SIGKILL before that call loses nothing: after the restart it is in
    the thread (after the interrupted call's result, with the time it was
    sent), stored once, and the next turn's model reads it."""
    async with joined_while_a_worker_waits(tmp_path, {"content": "answered after the restart"}) as (fake, config, db):
        async with serve(config) as first, ws(first.ws_url, "k9-joined") as c:
            sid = c.session_id
            await c.send({"type": "user_message", "text": "look at web-1 for a long time"})
            await c.tile("running", "rt-worker")
            await c.send({"type": "user_message", "text": "also check web-2, please"})
            assert (await c.until_type("interim"))["text"] == "Noted, I will look at web-2 too."
            with trio.fail_after(15):  # held: committed on its own, long before any model call reads it
                while not db_rows(db, "SELECT content FROM pending_messages"):
                    await trio.sleep(0.02)
            first.proc.send_signal(signal.SIGKILL)
            with trio.fail_after(10):
                await first.proc.wait()
        held = db_rows(db, "SELECT session_id, content FROM pending_messages")
        assert held == [{"session_id": sid, "content": "also check web-2, please"}]
        assert not db_rows(db, "SELECT seq FROM chat_messages WHERE content = 'also check web-2, please'")

        async with serve(config) as second:
            check_invariants(db, stopped=True)
            assert db_rows(db, "SELECT id FROM pending_messages") == []
            rows = db_rows(db, "SELECT role, content, name FROM chat_messages WHERE session_id = ? ORDER BY seq",
                           (sid,))
            assert [r["role"] for r in rows] == ["user", "assistant", "tool", "user"]
            assert "interrupted by a daemon restart" in rows[2]["content"]
            assert (rows[3]["content"], rows[3]["name"]) == ("also check web-2, please", None)  # nothing answered it
            times = db_rows(db, "SELECT seq, created_at FROM chat_messages WHERE session_id = ? ORDER BY seq", (sid,))
            assert times[3]["created_at"] < times[2]["created_at"]  # when it was sent, before the crash's repair
            async with ws(second.ws_url, "k9-joined") as c:
                assert c.session["session_id"] == sid
                final = await c.ask("so, anything?")
                assert final == {"type": "final", "text": "answered after the restart",
                                 "html": "<p>answered after the restart</p>\n"}
            users = [m["content"] for m in fake.requests[-1].body["messages"] if m["role"] == "user"
                     and not m["content"].startswith("<system-reminder>")]
            assert users[-2:] == ["also check web-2, please", "so, anything?"]
            second.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                assert await second.proc.wait() == 0
    check_invariants(db, stopped=True)


async def test_a_joined_message_is_acknowledged_only_once_it_is_stored(tmp_path):
    """The interjection call that acknowledges a joined message waits until
    the message is held in the database: while another process holds
    SQLite's write lock no acknowledgement comes; once it is let go, it does,
    and a SIGKILL right after loses nothing."""
    import sqlite3

    async with joined_while_a_worker_waits(tmp_path) as (fake, config, db):
        async with serve(config) as first, ws(first.ws_url, "k9-locked") as c:
            sid = c.session_id
            await c.send({"type": "user_message", "text": "look at web-1 for a long time"})
            await c.tile("running", "rt-worker")
            with trio.fail_after(15):
                while not [r for r in fake.requests if r.agent == "rt-worker"]:
                    await trio.sleep(0.02)
            locker = sqlite3.connect(str(db), timeout=30, isolation_level=None)
            locker.execute("BEGIN IMMEDIATE")  # another writer (a backup, the sqlite3 shell) for a moment
            try:
                await c.send({"type": "user_message", "text": "also check web-2, please"})
                with trio.move_on_after(2):
                    await c.until_type("interim")
                    raise AssertionError("acknowledged before the message was stored")
            finally:
                locker.execute("ROLLBACK")
                locker.close()
            assert (await c.until_type("interim"))["text"] == "Noted, I will look at web-2 too."
            assert db_rows(db, "SELECT content FROM pending_messages") == [{"content": "also check web-2, please"}]
            first.proc.send_signal(signal.SIGKILL)
            with trio.fail_after(10):
                await first.proc.wait()
        async with serve(config) as second:
            check_invariants(db, stopped=True)
            users = db_rows(db, "SELECT content FROM chat_messages WHERE session_id = ? AND role = 'user' ORDER BY seq",
                            (sid,))
            assert [u["content"] for u in users] == ["look at web-1 for a long time", "also check web-2, please"]
            second.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                assert await second.proc.wait() == 0


async def test_kill_9_while_a_turn_waits_for_a_slot_keeps_its_messages(tmp_path):
    """A turn waiting for a slot (the daemon's turns all busy) holds its
    message and the ones sent to it meanwhile: a SIGKILL keeps them, and
    after the restart they are in the thread, unanswered, in order."""
    script = {"default": [{"delay_s": 60, "content": "never answered"}]}
    async with open_fake_llm(script) as fake:
        mapping = prepare(tmp_path, limits={"max_concurrent_turns": 1})
        mapping["llm"]["base_url"] = fake.base_url
        config = write_config(tmp_path, mapping)
        db = Path(mapping["state_dir"]) / "ongrid.db"
        async with serve(config) as first, ws(first.ws_url, "busy") as c1, ws(first.ws_url, "waits") as c2:
            await c1.send({"type": "user_message", "text": "the long one"})
            with trio.fail_after(15):
                await fake.wait_requests(1)
            await c2.send({"type": "user_message", "text": "queued question"})
            await c2.until(lambda f: "queue_position" in f)
            await c2.send({"type": "user_message", "text": "and a second thought"})
            with trio.fail_after(15):
                while len(db_rows(db, "SELECT id FROM pending_messages")) < 2:
                    await trio.sleep(0.02)
            waiting = c2.session_id
            first.proc.send_signal(signal.SIGKILL)
            with trio.fail_after(10):
                await first.proc.wait()
        async with serve(config) as second:
            check_invariants(db, stopped=True)
            rows = db_rows(db, "SELECT content FROM chat_messages WHERE session_id = ? ORDER BY seq", (waiting,))
            assert [r["content"] for r in rows] == ["queued question", "and a second thought"]
            second.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                assert await second.proc.wait() == 0
