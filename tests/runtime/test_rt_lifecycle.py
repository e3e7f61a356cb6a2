"""Worker lifecycle: stop, cancel, timeout, failures, interjection
(docs/architecture.md §4, §9, §11)."""

from __future__ import annotations

import json
import re

import httpx2
import trio
from rt_helpers import (
    agent_call,
    db_rows,
    open_daemon,
    rtt,
    tool_messages,
    tool_names,
    tool_result,
)

from ongridd.runtime.workers import WorkerManager
from ongridd.store import open_store
from ongridd.store.writer import running_writer


async def model_calls(base_url: str) -> dict[tuple[str, str], float]:
    """``ongrid_model_calls_total`` (persona, outcome) and ``ongrid_model_retries_total``
    (persona, "retry") from ``/metrics`` → value."""
    async with httpx2.AsyncClient(base_url=base_url) as http:
        text = (await http.get("/metrics")).text
    pattern = r'^ongrid_model_calls_total\{outcome="([^"]*)",persona="([^"]*)"\} (\S+)$'  # labels sorted
    out = {(a, o): float(v) for o, a, v in re.findall(pattern, text, re.M)}
    retries = r'^ongrid_model_retries_total\{persona="([^"]*)"\} (\S+)$'
    out.update({(a, "retry"): float(v) for a, v in re.findall(retries, text, re.M)})
    return out


def wait_call(key: str, content: str | None = None) -> dict:
    step: dict = {"tool_calls": [{"name": "rt_wait", "arguments": {"key": key}}]}
    if content:
        step["content"] = content
    return step


async def test_user_stop_frame_kills_a_running_worker_promptly(tmp_path):
    """TaskStop: the in-flight tool call is cancelled, the worker ends killed
    (row closed), no further model call starts, and the coordinator's
    AgentTool result says killed with the partial output."""
    script = {
        "default": [{"tool_calls": [agent_call("rt-worker", "check web-1")]}, {"content_from_tool_results": True}],
        "rt-worker": [wait_call("w1", content="checking disk usage on web-1"), {"content": "never reached"}],
    }
    started, _ = rtt.events("w1")
    async with open_daemon(tmp_path, script) as d, d.ws("stop-one") as c:
        await c.send({"type": "user_message", "text": "go"})
        with trio.fail_after(15):
            await started.wait()
        task_id = d.task_id("rt-worker")
        await c.send({"type": "stop", "task_id": task_id})
        with trio.fail_after(1):
            await c.until(lambda f: f.get("type") == "agent_result" and f["task_id"] == task_id)
        final = await c.until_type("final", "error")
        assert final["type"] == "final"
        row = d.row(task_id)
        assert (row["status"], row["close_reason"]) == ("killed", "stopped by the user") and row["closed_at"]
        assert len(d.requests("rt-worker")) == 1  # no model call after the stop
        assert [(a["tool_name"], a["status"]) for a in d.audit(task_id)] == [("rt_wait", "cancelled")]
        result = tool_result(d.requests("default")[1], "call_0_0")
        assert result["status"] == "killed" and result["task_id"] == task_id
        assert "checking disk usage on web-1" in result["result"]  # the partial output
        assert [t["status"] for t in c.of_type("agent_tile")] == ["pending", "running", "killed"]


async def test_taskstop_of_an_ended_worker_is_a_clear_error(tmp_path):
    """Stopping a worker that already completed changes nothing."""
    script = {
        "default": [
            {"tool_calls": [agent_call("rt-worker", "quick")]},
            {"tool_calls": [{"name": "TaskStop", "arguments": {"task_id": "${W1}"}}]},
            {"content": "done"},
        ],
        "rt-worker": [{"content": "quick answer"}],
    }
    async with open_daemon(tmp_path, script) as d:
        d.env["W1"] = lambda: d.task_id("rt-worker")
        async with d.ws("stop-ended") as c:
            assert (await c.ask("go"))["text"] == "done"
            task_id = d.task_id("rt-worker")
            before = d.row(task_id)
            err = tool_result(d.requests("default")[2], "call_1_0")
            assert err == {"status": "error", "error": f"{task_id} is not running (completed)"}
            # the user's stop frame takes the same path
            await c.send({"type": "stop", "task_id": task_id})
            frame = await c.until_type("error")
            assert frame["code"] == "not_found" and frame["message"] == f"{task_id} is not running (completed)"
            assert d.row(task_id) == before
            assert [a["status"] for a in d.audit(c.session_id)] == ["ok", "error"]


class SlowCreateWriter:
    """The real store writer, except that the creator of a ``persona``
    worker row hears back slowly (after ``release``, once the insert is
    committed): that worker has not run yet while the test stops the turn."""

    def __init__(self, real, persona: str):
        self.real = real
        self.persona = persona
        self.created = trio.Event()
        self.release = trio.Event()

    def __getattr__(self, name):
        return getattr(self.real, name)

    def create_session(self, **kwargs):
        pending = self.real.create_session(**kwargs)
        if kwargs.get("agent_id") != self.persona:
            return pending
        slow = self

        class Delayed:
            session_id = pending.session_id

            async def wait(self):
                row = await pending.wait()
                slow.created.set()
                await slow.release.wait()
                return row

        return Delayed()


async def test_stopping_the_turn_kills_running_and_pending_workers(tmp_path):
    """Stopping the turn: W1 running → killed; W2, whose row was written but
    whose run had not begun, → killed without a model call."""
    script = {
        "default": [{"tool_calls": [agent_call("rt-worker", "w1"), agent_call("rt-other", "w2")]}],
        "rt-worker": [wait_call("w1")],
        "rt-other": [{"content": "must never run"}],
    }
    started, _ = rtt.events("w1")
    async with open_daemon(tmp_path, script) as d, d.ws("stop-turn") as c:
        slow = SlowCreateWriter(d.runtime.workers.writer, "rt-other")
        d.runtime.workers.writer = slow
        try:
            await c.send({"type": "user_message", "text": "go"})
            with trio.fail_after(15):
                await started.wait()
                await slow.created.wait()
            (w1,) = d.workers("rt-worker")
            (w2,) = d.workers("rt-other")
            # W2's row is written pending and marked running in one transaction, before it runs
            assert (w1["status"], w2["status"]) == ("running", "running")
            await c.send({"type": "stop"})
            await c.tile("killed", "rt-worker")
            slow.release.set()  # W2's creator would hear back only after the stop
            frame = await c.until_type("final", "error")
        finally:
            d.runtime.workers.writer = slow.real
        assert frame["type"] == "error" and frame["code"] == "stopped"
        w1, w2 = d.row(w1["id"]), d.row(w2["id"])
        assert (w1["status"], w1["close_reason"]) == ("killed", "stopped: the turn was stopped")
        assert (w2["status"], w2["close_reason"]) == ("killed", "stopped: the turn was stopped")
        assert w1["closed_at"] and w2["closed_at"]
        assert d.requests("rt-other") == []  # W2 never ran
        assert sorted(a["status"] for a in d.audit(c.session_id)) == ["cancelled", "cancelled"]
        # the thread stays valid: the next turn works on the repaired history
        d.use_script({"default": [{"content": "fresh answer"}]})
        d.fake._cursors.clear()
        assert (await c.ask("again"))["text"] == "fresh answer"
        ids = [m["tool_call_id"] for m in tool_messages(d.requests("default")[-1])]
        assert ids == ["call_0_0", "call_0_1"]
        # each cut-off dispatch's stored result names its worker, so the transcript can link to it
        stored = [(tool_result(d.requests("default")[-1], i)) for i in ids]
        assert [(r["status"], r["task_id"], r["subagent_type"], r["worker_status"]) for r in stored] == [
            ("cancelled", w1["id"], "rt-worker", "killed"), ("cancelled", w2["id"], "rt-other", "killed")]


async def test_worker_over_its_time_limit_fails_with_timeout(tmp_path):
    script = {
        "default": [{"tool_calls": [agent_call("rt-worker", "slow")]}, {"content": "it timed out"}],
        "rt-worker": [wait_call("never", content="started measuring")],
    }
    async with open_daemon(tmp_path, script, limits={"worker_timeout_s": 1}) as d, d.ws("timeout") as c:
        assert (await c.ask("go"))["text"] == "it timed out"
        (row,) = d.workers()
        assert row["status"] == "failed" and row["close_reason"].startswith("timeout")
        assert "1 s" in row["close_reason"] and row["closed_at"]
        result = tool_result(d.requests("default")[1], "call_0_0")
        assert result["status"] == "failed" and result["result"].startswith("timeout")
        assert "started measuring" in result["result"]
        assert [a["status"] for a in d.audit(row["id"])] == ["cancelled"]
        # and the coordinator's AgentTool row says the dispatch timed out (not ok)
        assert [(a["tool_name"], a["status"]) for a in d.audit(c.session_id)] == [("AgentTool", "timeout")]


async def test_tool_exception_is_a_result_and_the_worker_carries_on(tmp_path):
    """As docs/architecture.md §8 has it: a handler exception becomes a tool result
    the model reads (audited ``error``); the worker goes on and completes."""
    script = {
        "default": [{"tool_calls": [agent_call("rt-worker", "look")]}, {"content_from_tool_results": True}],
        "rt-worker": [{"tool_calls": [{"name": "rt_raise", "arguments": {}}]},
                      {"content": "the host lookup failed; reporting what I know"}],
    }
    async with open_daemon(tmp_path, script) as d, d.ws("raise") as c:
        final = await c.ask("go")
        assert "the host lookup failed" in final["text"]
        (row,) = d.workers()
        assert row["status"] == "completed"
        (audit,) = d.audit(row["id"])
        assert audit["status"] == "error" and "KeyError" in audit["result"] and "'host'" in audit["result"]
        seen = tool_result(d.requests("rt-worker")[1], "call_0_0")
        assert seen["status"] == "error" and "rt_raise failed" in seen["error"]


async def test_provider_error_fails_the_worker_and_the_coordinator_carries_on(tmp_path):
    """A provider error: HTTP 500 on every attempt until the retry budget is used up."""
    script = {
        "default": [{"tool_calls": [agent_call("rt-worker", "look")]}, {"content_from_tool_results": True}],
        "rt-worker": [{"tool_calls": [{"name": "rt_echo", "arguments": {"text": "partial"}}],
                       "content": "first finding"},
                      {"http_status": 500}, {"http_status": 500}],
    }
    async with open_daemon(tmp_path, script, llm={"max_retries": 1}) as d, d.ws("provider") as c:
        before = await model_calls(d.base_url)
        final = await c.ask("go")
        assert final["type"] == "final"
        after = await model_calls(d.base_url)
        delta = {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k, 0.0)}
        # each call once (the worker's first call ok, its second an error), and the one retried attempt
        assert delta == {("default", "ok"): 2, ("rt-worker", "ok"): 1, ("rt-worker", "retry"): 1,
                         ("rt-worker", "error"): 1}
        (row,) = d.workers()
        assert row["status"] == "failed" and row["close_reason"].startswith("provider_error")
        assert "500" in row["close_reason"] and row["closed_at"]
        assert len(d.requests("rt-worker")) == 3  # one retry, then it gave up
        result = json.loads(final["text"].split("AgentTool: ", 1)[1])
        assert result["status"] == "failed" and "provider_error" in result["result"]
        assert "first finding" in result["result"]


async def test_exception_in_the_run_itself_fails_the_worker(tmp_path):
    """§4: an exception in the worker's run (not a tool's) ends it failed
    with the reason; the row is closed."""
    frames = []
    async with open_store(f"sqlite:///{tmp_path}/ongrid.db") as store, running_writer(store) as writer:
        coord, _ = await store.get_or_create_coordinator("local", "t")
        manager = WorkerManager(store, lambda sid, f: frames.append((sid, f)), writer)

        async def run(task):
            task.partial = "half a report"
            raise KeyError("host")

        outcome = await manager.spawn(persona="rt-worker", description="d", brief="b", parent_id=coord["id"],
                                      coordinator_id=coord["id"], user_id="local", timeout_s=5, run=run)
        assert outcome.status == "failed" and outcome.reason == "internal error: KeyError('host')"
        assert outcome.result == "half a report"
        row = await store.get_session(outcome.task_id)
        assert row["status"] == "failed" and row["closed_at"] and row["close_reason"].startswith("internal error")
        assert [f["status"] for _, f in frames if f["type"] == "agent_tile"] == ["pending", "running", "failed"]


async def test_user_message_during_a_dispatch_gets_an_interjection(tmp_path):
    """§9: one model call with only SendMessage and TaskStop; the coordinator
    stops the now-useless worker; the message joins the turn's history."""
    script = {
        "default": [
            {"tool_calls": [agent_call("rt-worker", "check the disk on web-1")]},
            {"tool_calls": [{"name": "SendMessage", "arguments": {"text": "OK, switching to the network."}},
                            {"name": "TaskStop", "arguments": {"task_id": "${W1}"}}]},
            {"content": "Answering the network question."},
        ],
        "rt-worker": [wait_call("disk")],
    }
    started, _ = rtt.events("disk")
    async with open_daemon(tmp_path, script) as d:
        d.env["W1"] = lambda: d.task_id("rt-worker")
        async with d.ws("interject") as c:
            await c.send({"type": "user_message", "text": "is web-1's disk full?"})
            with trio.fail_after(15):
                await started.wait()
            await c.send({"type": "user_message", "text": "forget the disk, is the network ok?"})
            interim = await c.until_type("interim")
            assert interim["text"] == "OK, switching to the network."
            final = await c.until_type("final", "error")
            assert final == {"type": "final", "text": "Answering the network question.", "html": "<p>Answering the network question.</p>\n"}
            task_id = d.task_id("rt-worker")
            assert (d.row(task_id)["status"], d.row(task_id)["close_reason"]) == (
                "killed", "stopped by the coordinator (TaskStop)")  # who stopped it, in the tree and the tile
            inter = d.requests("default")[1]
            assert sorted(tool_names(inter)) == ["SendMessage", "TaskStop"]
            text = "\n".join(m["content"] or "" for m in inter.body["messages"] if m["role"] == "user")
            assert "forget the disk, is the network ok?" in text and task_id in text
            # the turn's next call has the AgentTool result and then the user's new message
            last = [m for m in d.requests("default")[2].body["messages"]
                    if not (m["role"] == "user" and m["content"].startswith("<system-reminder>"))]
            assert [m["role"] for m in last[-3:]] == ["assistant", "tool", "user"]
            assert json.loads(last[-2]["content"])["status"] == "killed"
            assert last[-1]["content"] == "forget the disk, is the network ok?"
            stored = d.rows("SELECT role, content FROM chat_messages WHERE session_id = ? AND role = 'user' "
                            "ORDER BY seq", (c.session_id,))
            assert [s["content"] for s in stored] == ["is web-1's disk full?", "forget the disk, is the network ok?"]
            assert d.rows("SELECT content FROM pending_messages") == []  # carried by that row, once
            # the transcript says the second one joined the running turn (a reload shows it inside that turn)
            items = await d.runtime.session_messages(c.session_id, user_id="local")
            assert [(m["content"], m.get("joined", False)) for m in items if m["role"] == "user"] == [
                ("is web-1's disk full?", False), ("forget the disk, is the network ok?", True)]
            audit = sorted((a["tool_name"], a["status"]) for a in d.audit(c.session_id))
            # the dispatch the interjection stopped is audited as cancelled, not ok
            assert audit == [("AgentTool", "cancelled"), ("SendMessage", "ok"), ("TaskStop", "ok")]


async def test_message_sent_while_the_final_answer_streams_is_answered(tmp_path):
    """A user message that arrives during the turn's last model call is not
    lost: it gets its own turn once this one ends."""
    script = {
        "default": [
            {"delay_s": 1.0, "content": "first answer"},
            {"content": "second answer"},  # the interjection call (text only: nothing to do)
            {"content": "second answer"},  # the follow-up turn
        ],
    }
    async with open_daemon(tmp_path, script) as d, d.ws("late") as c:
        await c.send({"type": "user_message", "text": "first question"})
        with trio.fail_after(10):
            await d.fake.wait_requests(1)
        await c.send({"type": "user_message", "text": "second question"})
        first = await c.until_type("final", "error")
        assert first == {"type": "final", "text": "first answer", "html": "<p>first answer</p>\n"}
        second = await c.until_type("final", "error")
        assert second == {"type": "final", "text": "second answer", "html": "<p>second answer</p>\n"}
        users = [m["content"] for m in d.requests("default")[2].body["messages"] if m["role"] == "user"]
        assert "first question" in users and "second question" in users
        # held until the follow-up turn stored it as its own message: stored once, nothing left held
        stored = d.rows("SELECT content FROM chat_messages WHERE session_id = ? AND role = 'user' ORDER BY seq",
                        (c.session_id,))
        assert [r["content"] for r in stored] == ["first question", "second question"]
        assert d.rows("SELECT content FROM pending_messages") == []


async def test_a_stopped_turn_keeps_the_unseen_message_in_the_thread(tmp_path):
    """A message sent during a dispatch and then the whole turn stopped: the
    model never saw it, but the thread keeps it for the next turn.  Idle
    in-memory state is dropped afterwards."""
    script = {
        "default": [
            {"tool_calls": [agent_call("rt-worker", "long")]},
            {"content": "noted"},  # the interjection: nothing to do
            {"content": "next turn"},
        ],
        "rt-worker": [wait_call("long")],
    }
    started, _ = rtt.events("long")
    async with open_daemon(tmp_path, script) as d, d.ws("keep") as c:
        await c.send({"type": "user_message", "text": "first"})
        with trio.fail_after(15):
            await started.wait()
        await c.send({"type": "user_message", "text": "also check the certificates"})
        with trio.fail_after(15):
            await d.fake.wait_requests(3)  # coordinator, worker, interjection
        with trio.fail_after(10):  # held in the database while the worker runs (a crash keeps it)
            while d.rows("SELECT content FROM pending_messages") != [{"content": "also check the certificates"}]:
                await trio.sleep(0.01)
        # and shown at the end of the transcript (a reload sees it), without a place of its own yet
        items = await d.runtime.session_messages(c.session_id, user_id="local")
        held = items[-1]
        assert (held["seq"], held["content"], held["joined"], held["held"]) == (
            None, "also check the certificates", True, True)
        assert [m["seq"] for m in items[:-1]] == list(range(1, len(items)))
        await c.send({"type": "stop"})
        assert (await c.until_type("error"))["code"] == "stopped"
        assert (await c.ask("and now?"))["text"] == "next turn"
        users = [m["content"] for m in d.requests("default")[-1].body["messages"] if m["role"] == "user"]
        assert users[:3] == ["first", "also check the certificates", "and now?"]
        # the stopped turn never answered it: kept as a message of its own, not one that joined a turn
        items = await d.runtime.session_messages(c.session_id, user_id="local")
        assert [m.get("joined", False) for m in items if m["role"] == "user"] == [False, False, False]
        assert d.rows("SELECT content FROM pending_messages") == []  # stored once, nothing left held
        kept = next(m for m in items if m["content"] == "also check the certificates")
        assert kept["created_at"] == held["created_at"]  # the time it was sent, not the time of the stop
        sid = c.session_id
        d.runtime._hub("an-idle-thread")
        assert sid in d.runtime.dedup and "an-idle-thread" in d.runtime.hubs
        d.runtime.forget_idle()
        assert sid in d.runtime.hubs  # a client is attached
        assert "an-idle-thread" not in d.runtime.hubs
        assert sid not in d.runtime.dedup  # its only dispatch was killed: nothing to deduplicate


class SlowUserMessageWriter:
    """The real store writer, except that a user message's commit is heard
    of only after ``release`` (the message itself is queued as usual)."""

    def __init__(self, real):
        self.real = real
        self.queued = trio.Event()
        self.release = trio.Event()

    def __getattr__(self, name):
        return getattr(self.real, name)

    def append_message(self, session_id, **kwargs):
        pending = self.real.append_message(session_id, **kwargs)
        if kwargs.get("role") != "user":
            return pending
        slow = self
        slow.queued.set()

        class Delayed:
            async def settled(self):
                await pending.settled()
                await slow.release.wait()

        return Delayed()


async def test_the_users_message_is_committed_before_the_model_is_asked(tmp_path):
    """A crash while the model answers must not lose what the person sent:
    the coordinator's first model call waits for the user message's commit."""
    async with open_daemon(tmp_path, {"default": [{"content": "stored first"}]}) as d, d.ws("durable") as c:
        slow = SlowUserMessageWriter(d.runtime.runner.writer)
        d.runtime.runner.writer = slow
        try:
            await c.send({"type": "user_message", "text": "keep me"})
            with trio.fail_after(15):
                await slow.queued.wait()
            await trio.sleep(0.5)
            assert d.requests("default") == []  # no model call before the commit is confirmed
            slow.release.set()
            frame = await c.until_type("final", "error")
        finally:
            d.runtime.runner.writer = slow.real
        assert frame["text"] == "stored first"
        assert [m["content"] for m in d.rows("SELECT content FROM chat_messages WHERE role = 'user'")] == ["keep me"]


async def test_a_final_is_never_sent_before_its_rows_are_committed(tmp_path, monkeypatch):
    """During the shutdown drain a turn waits only a short while for its
    writes; when the database is still locked then, the turn ends with an
    ``error`` frame, not a ``final`` (a final promises stored rows)."""
    import sqlite3
    import threading
    import types

    from ongridd.runtime import core, frames
    from ongridd.runtime.core import Runtime, Turn

    monkeypatch.setattr(core, "STOPPED_TURN_WRITE_WAIT_S", 0.3)
    async with open_store(f"sqlite:///{tmp_path / 'ongrid.db'}") as store:
        coord, _ = await store.get_or_create_coordinator("u", "t")
        sid = coord["id"]
        async with running_writer(store, retry_for_s=30) as writer:
            con = sqlite3.connect(str(tmp_path / "ongrid.db"), timeout=0, isolation_level=None,
                                  check_same_thread=False)
            con.execute("BEGIN EXCLUSIVE")  # another process (or a slow disk) holds the lock
            release = threading.Timer(1.5, lambda: (con.execute("ROLLBACK"), con.close()))
            release.start()
            answer = writer.append_message(sid, owner=sid, role="assistant", content="the answer")
            draining = types.SimpleNamespace(writer=writer, accepting=False)  # as Runtime.drain() leaves it
            status, end = await Runtime._settle_writes(draining, Turn(session_id=sid, user_id="u", locale=None),
                                                       "ok", frames.final("the answer"))
            assert not answer.done.is_set()
            assert (status, end["type"], end["code"]) == ("error", "error", "internal")
            assert "not stored" in end["message"]
            assert await writer.flush(timeout_s=20)  # still written, once the lock is gone
            release.join()
        assert [m["content"] for m in await store.load_messages(sid)] == ["the answer"]


async def test_worker_rows_carry_the_seq_of_the_user_message_of_their_turn(tmp_path):
    """``turn_seq``: each worker row names the coordinator's user message whose turn started it."""
    script = {"default": [{"tool_calls": [agent_call("rt-worker", "first")]}, {"content": "one"},
                          {"tool_calls": [agent_call("rt-worker", "second"), agent_call("rt-other", "third")]},
                          {"content": "two"}],
              "rt-worker": [{"content": "done"}, {"content": "done"}], "rt-other": [{"content": "done"}]}
    async with open_daemon(tmp_path, script) as d, d.ws("turns") as c:
        assert (await c.ask("turn one"))["text"] == "one"
        assert (await c.ask("turn two"))["text"] == "two"
        users = d.rows("SELECT seq, content FROM chat_messages WHERE session_id = ? AND role = 'user' ORDER BY seq",
                       (c.session_id,))
        assert [u["content"] for u in users] == ["turn one", "turn two"]
        first, second = users[0]["seq"], users[1]["seq"]
        assert first == 1 and second > first
        by_brief = {}
        for w in d.workers():
            brief = d.rows("SELECT content FROM chat_messages WHERE session_id = ? AND seq = 1", (w["id"],))
            by_brief[brief[0]["content"]] = w["turn_seq"]
        assert by_brief == {"first": first, "second": second, "third": second}
        assert d.row(c.session_id)["turn_seq"] is None  # the coordinator row belongs to no single turn
        tree = await d.runtime.session_tree(c.session_id, user_id="local")  # also in the tree (API, CLI)
        assert tree["turn_seq"] is None and sorted(n["turn_seq"] for n in tree["children"]) == [first, second, second]
        from ongridd.cli.sessions import format_tree

        assert sum(f"(for message #{second})" in line for line in format_tree(tree)) == 2


async def test_a_message_to_a_queued_follow_up_turn_is_held_and_kept(tmp_path, monkeypatch):
    """A follow-up turn (for a message that came during the last model call)
    may wait for a slot; a message sent to it meanwhile is held like its own,
    so a shutdown before it runs keeps both in the thread."""
    from ongridd.runtime import core

    monkeypatch.setattr(core, "INTERJECTION_DEBOUNCE_S", 30.0)  # no interjection call takes a step
    script = {"default": [{"delay_s": 2.0, "content": "answer A1"}, {"content": "answer"}, {"content": "answer"}]}
    async with open_daemon(tmp_path, script, limits={"max_turns_per_user": 1}) as d:
        async with d.ws("A") as a, d.ws("B") as b:
            await a.send({"type": "user_message", "text": "qA"})
            with trio.fail_after(10):
                await d.fake.wait_requests(1)
            await b.send({"type": "user_message", "text": "qB"})  # queued behind A (one turn per user)
            await trio.sleep(0.3)
            await a.send({"type": "user_message", "text": "A-late"})  # during A's last model call
            await a.until_type("final")
            with trio.fail_after(10):
                while not ((t := d.runtime.turns.get(a.session_id)) and t.queued):
                    await trio.sleep(0.02)
            await a.send({"type": "user_message", "text": "A-queued"})
            with trio.fail_after(10):
                while len(d.rows("SELECT content FROM pending_messages")) < 2:
                    await trio.sleep(0.02)
            sid = a.session_id
    rows = db_rows(tmp_path / "state" / "ongrid.db",
                   "SELECT content FROM chat_messages WHERE session_id = ? AND role = 'user' ORDER BY seq", (sid,))
    assert [r["content"] for r in rows] == ["qA", "A-late", "A-queued"]
    assert db_rows(tmp_path / "state" / "ongrid.db", "SELECT id FROM pending_messages") == []


async def test_a_turn_stopped_before_its_first_model_call_keeps_its_message(tmp_path, monkeypatch):
    """Stopped while it reads the thread's history (a long thread takes a
    while), the turn never asked the model; what the person sent is kept
    in the thread all the same."""
    from ongridd.runtime import compaction

    real = compaction.ThreadHistories.history_for_turn
    reading = trio.Event()

    async def slow(self, **kw):
        reading.set()
        await trio.sleep(5)  # stands for reading a long thread's history
        return await real(self, **kw)

    monkeypatch.setattr(compaction.ThreadHistories, "history_for_turn", slow)
    async with open_daemon(tmp_path, {"default": [{"content": "never asked"}]}) as d, d.ws("first") as c:
        await c.send({"type": "user_message", "text": "is the disk full?"})
        with trio.fail_after(10):
            await reading.wait()
        await c.send({"type": "stop"})
        assert (await c.until_type("error", "final"))["code"] == "stopped"
        rows = d.rows("SELECT role, content FROM chat_messages WHERE session_id = ?", (c.session_id,))
        assert rows == [{"role": "user", "content": "is the disk full?"}]
        assert d.fake.requests == []


async def test_a_send_message_call_in_the_transcript_carries_its_interim_html(tmp_path):
    """The transcript gives a SendMessage call the html its interim frame carried (a reload
    shows it as it was shown live); a call whose arguments are not the tool's shape gets none
    and the transcript is still served."""
    script = {"default": [
        {"tool_calls": [{"name": "SendMessage", "arguments": {"text": " Checking **disk** <i>now</i> "}}]},
        {"tool_calls": [{"name": "SendMessage", "arguments": {"text": ["not", "text"]}}]},
        # nested past what a JSON reader takes: no html either, and the transcript is still served
        {"tool_calls": [{"name": "SendMessage", "raw_arguments": '{"text":"hi","x":' + "[" * 5000 + "]" * 5000 + "}"}]},
        {"content": "done"},
    ]}
    async with open_daemon(tmp_path, script) as d, d.ws("interim") as c:
        await c.send({"type": "user_message", "text": "disk?"})
        live = await c.until_type("interim")
        assert (await c.until_type("final"))["text"] == "done"
        items = await d.runtime.session_messages(c.session_id, user_id="local")
        calls = [call for m in items for call in m["tool_calls"] or []]
        assert [call["name"] for call in calls] == ["SendMessage"] * 3
        assert calls[0]["html"] == live["html"] == "<p>Checking <strong>disk</strong> &lt;i&gt;now&lt;/i&gt;</p>\n"
        assert set(calls[1]) == set(calls[2]) == {"id", "name", "arguments"}
        # a call that failed says why on its tool frame; one that succeeded carries no error
        ended = [f for f in c.of_type("tool") if f["status"] != "started"]
        assert [f["status"] for f in ended] == ["ok", "error", "error"]
        assert "error" not in ended[0]
        assert "SendMessage" in ended[1]["error"] and "text" in ended[1]["error"]
        assert 0 < len(ended[2]["error"]) <= 500


async def test_an_answer_nested_past_what_a_json_reader_takes_is_an_answer(tmp_path):
    """A model's answer that is JSON nested too deep to read (the kernel looks for tool calls
    written as text) is its answer: shown and stored, no internal error."""
    deep = "[" * 5000 + "]" * 5000
    async with open_daemon(tmp_path, {"default": [{"content": deep}]}) as d, d.ws("deep") as c:
        final = await c.ask("answer in JSON")
        assert final["type"] == "final" and final["text"] == deep
        assert d.rows("SELECT content FROM chat_messages WHERE role = 'assistant'")[-1]["content"] == deep
