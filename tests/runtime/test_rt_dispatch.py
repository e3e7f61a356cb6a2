"""Dispatch: AgentTool end to end on the real daemon over the real websocket
(docs/architecture.md §9, §11)."""

from __future__ import annotations

import json

import trio
from rt_helpers import (
    agent_call,
    open_daemon,
    rtt,
    tool_messages,
    tool_names,
    tool_result,
)


async def test_dispatch_and_answer(tmp_path):
    script = {
        "default": [
            {"content": "Asking the worker.", "tool_calls": [agent_call("rt-worker", "echo hello from the brief")]},
            {"content_from_tool_results": True},
        ],
        "rt-worker": [
            {"tool_calls": [{"name": "rt_echo", "arguments": {"text": "measured 42"}}]},
            {"content": "The worker found: measured 42."},
        ],
    }
    async with open_daemon(tmp_path, script) as d, d.ws("t1") as c:
        assert c.session["resumed"] is False and c.session["thread"] == "t1"
        final = await c.ask("what is the number?")
        assert final["type"] == "final"
        # the coordinator's answer is built from the AgentTool result it received
        body = json.loads(final["text"].split("AgentTool: ", 1)[1])
        (worker,) = d.workers()
        assert body["task_id"] == worker["id"]
        assert body["subagent_type"] == "rt-worker"
        assert body["status"] == "completed"
        assert body["result"] == "The worker found: measured 42."
        assert body["stopped_by"] is None
        assert {"task_id", "subagent_type", "status", "result", "stopped_by"} <= set(body)
        # the worker saw only the brief, never the coordinator's conversation
        first = d.requests("rt-worker")[0]
        users = [m["content"] for m in first.body["messages"] if m["role"] == "user"]
        assert "echo hello from the brief" in users[0]
        assert not any("what is the number" in (u or "") for u in users)
        # workers never hold control tools; the coordinator always does
        assert "AgentTool" not in tool_names(first) and "TaskStop" not in tool_names(first)
        assert {"AgentTool", "SendMessage", "TaskStop"} <= set(tool_names(d.requests("default")[0]))
        # rows: one closed worker under the coordinator
        assert worker["parent_session_id"] == c.session_id
        assert worker["status"] == "completed" and worker["closed_at"] and worker["started_at"]
        coord = d.row(c.session_id)
        assert coord["status"] == "open" and coord["agent_id"] == "default" and coord["thread_id"] == "t1"
        # frames: tile pending → running → completed, the agent result, the coordinator's tool frame
        tiles = [f["status"] for f in c.of_type("agent_tile")]
        assert tiles == ["pending", "running", "completed"]
        (res,) = c.of_type("agent_result")
        assert res == {"type": "agent_result", "task_id": worker["id"], "status": "completed",
                       "text": "The worker found: measured 42.", "html": "<p>The worker found: measured 42.</p>\n"}
        assert {"type": "tool", "name": "AgentTool", "status": "ok"} in c.frames
        assert "".join(f["text"] for f in c.of_type("token")).startswith("Asking the worker.")
        # audit: one row per tool call of every session
        audit = d.audit()
        assert [(a["agent_id"], a["tool_name"], a["status"]) for a in audit] == [
            ("rt-worker", "rt_echo", "ok"), ("default", "AgentTool", "ok")]
        # the whole thread is persisted
        roles = [m["role"] for m in d.rows("SELECT role FROM chat_messages WHERE session_id = ? ORDER BY seq",
                                          (c.session_id,))]
        assert roles == ["user", "assistant", "tool", "assistant"]


async def test_a_worker_that_answers_from_its_turn_limit_says_so(tmp_path):
    """``stopped_by`` names the limit; the worker still ends completed."""
    steps = [{"tool_calls": [{"name": "rt_echo", "arguments": {"text": f"step {i}"}}]} for i in range(6)]
    script = {"default": [{"tool_calls": [agent_call("rt-worker", "echo until the limit")]},
                          {"content_from_tool_results": True}],
              "rt-worker": steps + [{"content": "best effort after six turns"}]}
    async with open_daemon(tmp_path, script) as d, d.ws("limit") as c:
        final = await c.ask("go")
        body = json.loads(final["text"].split("AgentTool: ", 1)[1])
        assert (body["status"], body["stopped_by"], body["result"]) == (
            "completed", "max_turns", "best effort after six turns")
        (worker,) = d.workers("rt-worker")
        assert worker["status"] == "completed" and worker["close_reason"].startswith("max_turns")


async def test_two_parallel_workers(tmp_path):
    script = {
        "default": [
            {"tool_calls": [agent_call("rt-worker", "wait for a"), agent_call("rt-other", "wait for b")]},
            {"content_from_tool_results": True},
        ],
        "rt-worker": [{"tool_calls": [{"name": "rt_wait", "arguments": {"key": "a"}}]}, {"content": "a done"}],
        "rt-other": [{"tool_calls": [{"name": "rt_wait", "arguments": {"key": "b"}}]}, {"content": "b done"}],
    }
    started_a, release_a = rtt.events("a")
    started_b, release_b = rtt.events("b")
    async with open_daemon(tmp_path, script) as d, d.ws("par") as c:
        await c.send({"type": "user_message", "text": "check a and b"})
        # both workers are inside their tool call at the same time: they run in parallel
        with trio.fail_after(15):
            await started_a.wait()
            await started_b.wait()
        running = {r["agent_id"]: r["status"] for r in d.workers()}
        assert running == {"rt-worker": "running", "rt-other": "running"}
        release_b.set()
        release_a.set()
        final = await c.until_type("final", "error")
        assert final["type"] == "final"
        assert "a done" in final["text"] and "b done" in final["text"]
        assert sorted((r["agent_id"], r["status"]) for r in d.workers()) == [
            ("rt-other", "completed"), ("rt-worker", "completed")]
        # one result per call, in the calls' order
        second = d.requests("default")[1]
        results = [json.loads(m["content"]) for m in tool_messages(second)]
        assert [r["subagent_type"] for r in results] == ["rt-worker", "rt-other"]


async def test_identical_dispatch_is_deduplicated_and_failed_one_may_run_again(tmp_path):
    prompt = "Check  the disk on\n web-1 "
    same = "Check the disk on web-1"  # canonically identical (whitespace runs, trim)
    script = {
        "default": [
            {"tool_calls": [agent_call("rt-worker", prompt)]},
            # the same task again, and the same prompt to another persona (a different key)
            {"tool_calls": [agent_call("rt-worker", same, description="again"), agent_call("rt-other", same)]},
            {"content": "done"},
        ],
        "rt-worker": [{"content": "web-1 disk is 80% full"}],
        "rt-other": [{"content": "other view"}],
    }
    async with open_daemon(tmp_path, script) as d, d.ws("dedup") as c:
        final = await c.ask("disk?")
        assert final == {"type": "final", "text": "done", "html": "<p>done</p>\n"}
        assert sorted(r["agent_id"] for r in d.workers()) == ["rt-other", "rt-worker"]
        (worker,) = d.workers("rt-worker")
        audit = [(a["tool_name"], a["status"]) for a in d.audit(c.session_id)]
        assert audit == [("AgentTool", "ok"), ("AgentTool", "dedup"), ("AgentTool", "ok")]
        req = d.requests("default")[2]
        dup = tool_result(req, "call_1_0")
        assert dup["task_id"] == worker["id"] and dup["status"] == "completed"
        assert dup["result"] == "web-1 disk is 80% full"
        assert "already dispatched" in dup["hint"] and "not dispatch it again" in dup["hint"]
        assert tool_result(req, "call_1_1")["subagent_type"] == "rt-other"
        assert len(d.requests("rt-worker")) == 1

        # a failed dispatch may be dispatched again: a second worker runs
        d.use_script({
            "default": [{"tool_calls": [agent_call("rt-worker", "flaky")]},
                        {"tool_calls": [agent_call("rt-worker", "flaky")]},
                        {"content": "gave up"}],
            "rt-worker": [{"http_status": 500}],
        })
        async with d.ws("dedup-failed") as c2:
            assert (await c2.ask("try"))["text"] == "gave up"
            rows = [r for r in d.workers("rt-worker") if r["id"] != worker["id"]]
            assert [r["status"] for r in rows] == ["failed", "failed"]
            # a dispatch whose worker failed is audited as an error, not as ok
            assert [a["status"] for a in d.audit(c2.session_id)] == ["error", "error"]


async def test_duplicate_in_flight_waits_for_the_same_worker(tmp_path):
    script = {
        "default": [
            {"tool_calls": [agent_call("rt-worker", "slow task"), agent_call("rt-worker", "slow  task ")]},
            {"content": "both answered"},
        ],
        "rt-worker": [{"tool_calls": [{"name": "rt_wait", "arguments": {"key": "slow"}}]}, {"content": "slow result"}],
    }
    started, release = rtt.events("slow")
    async with open_daemon(tmp_path, script) as d, d.ws("inflight") as c:
        await c.send({"type": "user_message", "text": "go"})
        with trio.fail_after(15):
            await started.wait()
        assert len(d.workers()) == 1  # the duplicate did not start a second worker
        release.set()
        assert (await c.until_type("final", "error"))["type"] == "final"
        (worker,) = d.workers()
        assert worker["status"] == "completed"
        req = d.requests("default")[1]
        first, second = tool_result(req, "call_0_0"), tool_result(req, "call_0_1")
        assert first["task_id"] == second["task_id"] == worker["id"]
        assert first["result"] == second["result"] == "slow result"
        assert sorted(a["status"] for a in d.audit(c.session_id)) == ["dedup", "ok"]
        assert len({r.session for r in d.requests("rt-worker")}) == 1
        assert [k for k, _ in rtt.CALLS] == ["rt_wait"]


async def test_no_dedup_across_two_sessions(tmp_path):
    script = {
        "default": [{"tool_calls": [agent_call("rt-worker", "same brief")]}, {"content": "ok"}],
        "rt-worker": [{"content": "worker answer"}],
    }
    async with open_daemon(tmp_path, script) as d:
        async with d.ws("one") as c1, d.ws("two") as c2:
            assert c1.session_id != c2.session_id
            async with trio.open_nursery() as n:
                n.start_soon(c1.ask, "q")
                n.start_soon(c2.ask, "q")
        rows = d.workers()
        assert len(rows) == 2 and {r["status"] for r in rows} == {"completed"}
        assert {r["parent_session_id"] for r in rows} == {c1.session_id, c2.session_id}
        for sid in (c1.session_id, c2.session_id):
            assert [a["status"] for a in d.audit(sid)] == ["ok"]


async def test_c12_three_calls_three_results_in_order(tmp_path):
    """Two AgentTool calls and a TaskStop of an unknown task;
    the next request has exactly three tool messages, in order — also when
    the first worker crashes (provider error)."""
    calls = [
        {**agent_call("rt-worker", "Check 5xx on web-1", "web-1")},
        {**agent_call("rt-other", "Check disk usage on db-2", "db-2")},
        {"name": "TaskStop", "arguments": {"task_id": "w-unknown"}},
    ]
    script = {
        "default": [{"tool_calls": calls}, {"content": "summary"}],
        "rt-worker": [{"http_status": 500}],  # the worker for call 1 crashes
        "rt-other": [{"content": "db-2 disk fine"}],
    }
    async with open_daemon(tmp_path, script) as d, d.ws("c12") as c:
        assert (await c.ask("check"))["text"] == "summary"
        req = d.requests("default")[1]
        msgs = req.body["messages"]
        i = next(k for k, m in enumerate(msgs) if m["role"] == "assistant" and m.get("tool_calls"))
        ids = [tc["id"] for tc in msgs[i]["tool_calls"]]
        assert ids == ["call_0_0", "call_0_1", "call_0_2"]
        following = msgs[i + 1:i + 4]
        assert [m["role"] for m in following] == ["tool", "tool", "tool"]
        assert [m["tool_call_id"] for m in following] == ids
        assert len(tool_messages(req)) == 3  # none missing, none duplicated
        crashed = json.loads(following[0]["content"])
        assert crashed["status"] == "failed" and "provider_error" in crashed["result"]
        assert json.loads(following[1]["content"])["status"] == "completed"
        stop = json.loads(following[2]["content"])
        assert stop["status"] == "error" and "no such task w-unknown" in stop["error"]
        statuses = {r["agent_id"]: (r["status"], r["close_reason"]) for r in d.workers()}
        assert statuses["rt-other"] == ("completed", None)
        assert statuses["rt-worker"][0] == "failed" and statuses["rt-worker"][1].startswith("provider_error")


async def test_unknown_or_reserved_subagent_type_lists_the_valid_names(tmp_path):
    script = {
        "default": [
            {"tool_calls": [agent_call("k8s-wizard", "List failing pods"), agent_call("reviewer", "approve it"),
                            agent_call("default", "be me")]},
            {"content": "sorry"},
        ],
    }
    async with open_daemon(tmp_path, script) as d, d.ws("bad-persona") as c:
        assert (await c.ask("pods?"))["text"] == "sorry"
        req = d.requests("default")[1]
        errors = [json.loads(m["content"])["error"] for m in tool_messages(req)]
        assert "'k8s-wizard' is not a known persona" in errors[0]
        assert "'reviewer' is a reserved role" in errors[1] and "'default' is a reserved role" in errors[2]
        for err in errors:
            valid = err.split("valid subagent_type values: ", 1)[1]
            names = valid.split(", ")
            assert "rt-worker" in names and "specialist-disk" in names
            assert "default" not in names and "reviewer" not in names
        assert d.workers() == []  # no session row was created
        assert [a["status"] for a in d.audit(c.session_id)] == ["error", "error", "error"]
