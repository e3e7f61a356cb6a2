"""The review gate end to end: a worker calls a write
tool, the reviewer is a child session of that worker, and the decision rule
decides whether the real tool runs."""

from __future__ import annotations

import json

import pytest
import trio
from rt_helpers import agent_call, open_daemon, tool_names, tool_result, touch_script

from ongridd.runtime.decision import parse_decision

# ---- the decision rule (pure) -------------------------------------------------


@pytest.mark.parametrize("answer, decision, reason", [
    ("Decision: approve\n- runbook: pass", "approve", "- runbook: pass"),
    ("**Decision: Approve**\nall gates pass", "approve", "all gates pass"),
    ("`Decision:` _APPROVE_", "approve", "approved by the reviewer"),
    ("  Decision:   approve  ", "approve", "approved by the reviewer"),
    ("> Decision: approve", "approve", "approved by the reviewer"),  # a quote marker is stripped
    ("Decision: reject\n- runbook: fail", "reject", "- runbook: fail"),
    ("Decision: approve\nDecision: approve\nboth", "approve", "both"),
    ("Decision: approve\nwait\nDecision: reject\nno rollback", "reject", "no rollback"),
    ("Decision: reject\nDecision: approve\nchanged my mind", "reject", "changed my mind"),
    ("I would write Decision: approve if a runbook existed.", "reject", "is not exactly 'Decision: approve'"),
    ("Decision: approved", "reject", "is not exactly 'Decision: approve'"),
    ("Decision: approvefully", "reject", "is not exactly 'Decision: approve'"),
    ("", "reject", "no decision line"),
    (None, "reject", "no decision line"),
])
def test_decision_rule(answer, decision, reason):
    d = parse_decision(answer, finish_reason="stop")
    assert d.decision == decision
    assert reason in d.reason


# ---- end to end ------------------------------------------------------------------


APPROVE = "**Decision: approve**\n- runbook: pass — test runbook\n- rollback: delete the file"
VARIANTS = {
    "approve": (APPROVE, "approve", "- runbook: pass — test runbook\n- rollback: delete the file"),
    "reject": ("Decision: reject\n- runbook: fail", "reject", "- runbook: fail"),
    "no-decision": ("Looks fine to me, go ahead.", "reject", "no decision line"),
    "conflicting": ("Decision: approve\nDecision: reject\nunsure", "reject", "unsure"),
    "mentioned": ("If the runbook existed I would say Decision: approve, but I cannot tell.", "reject",
                  "is not exactly 'Decision: approve'"),
}


async def test_gate_decisions(tmp_path):
    """approve (the real write tool runs), reject, no decision line, two
    conflicting decision lines, the phrase only mentioned inside other text."""
    async with open_daemon(tmp_path, touch_script("m", [{"content": "x"}])) as d:
        for variant, (answer, decision, reason) in VARIANTS.items():
            name = f"marker-{variant}"
            d.use_script(touch_script(name, [{"content": answer}]))
            async with d.ws(f"gate-{variant}") as c:
                final = await c.ask("please")
                assert final["type"] == "final", (variant, final)
            (worker,) = [w for w in d.workers("rt-worker") if w["parent_session_id"] == c.session_id]
            (reviewer,) = d.workers("reviewer")[-1:]
            assert reviewer["parent_session_id"] == worker["id"], variant  # a child of the calling session
            assert reviewer["status"] == "completed" and reviewer["closed_at"], variant
            # both rows belong to the turn of the one user message of this thread
            assert (worker["turn_seq"], reviewer["turn_seq"]) == (1, 1), variant
            (proposal,) = d.rows("SELECT * FROM mutating_proposals WHERE session_id = ?", (worker["id"],))
            assert proposal["decision"] == decision, variant
            assert reason in proposal["decision_reason"], variant
            assert proposal["reviewer_session_id"] == reviewer["id"] and proposal["decided_at"], variant
            assert (proposal["action"], proposal["target"], proposal["blast_radius"]) == (
                f"create marker file {name}", f"local:{name}", "single_host")
            assert proposal["reason"] == "the test asks for it" and proposal["operator"] == "local"
            # the reviewer's brief is the proposal
            brief = next(m["content"] for m in d.requests("reviewer")[-1].body["messages"] if m["role"] == "user")
            assert f'"action": "create marker file {name}"' in brief and '"operator": "local"' in brief
            assert "rt_touch" not in tool_names(d.requests("reviewer")[-1])  # the reviewer never mutates
            marker = d.markers / name
            audit = d.audit(worker["id"])
            assert [a["tool_name"] for a in audit] == ["rt_touch"]
            seen = tool_result(d.requests("rt-worker")[-1], "call_0_0")
            changes = d.rows("SELECT * FROM change_events WHERE subject = ?", (f"local:{name}",))
            if decision == "approve":
                assert marker.read_text().startswith("touched by rt-worker"), variant
                assert audit[0]["status"] == "ok" and seen == {"created": str(marker)}
                # the change log holds what Ongrid changed: the approved call that ran, by its persona
                (change,) = changes
                assert (change["kind"], change["actor"], change["recorded_by"]) == ("tool", "rt-worker", None)
                assert json.loads(change["detail"]) == {
                    "action": f"create marker file {name}", "tool": "rt_touch", "status": "ok", "operator": "local",
                    "blast_radius": "single_host", "proposal_id": proposal["id"], "session_id": worker["id"],
                    "reviewer_session_id": reviewer["id"]}
            else:
                assert not marker.exists(), variant
                assert changes == [], variant  # nothing was changed
                assert audit[0]["status"] == "rejected", variant
                assert seen["status"] == "rejected" and reason in seen["reason"], variant
                assert seen["message"].startswith("The tool did not run: "), variant
                assert seen["reviewer_session_id"] == reviewer["id"]
            tree = await d.runtime.session_tree(c.session_id, user_id="local")
            assert tree["children"][0]["id"] == worker["id"]
            assert [g["id"] for g in tree["children"][0]["children"]] == [reviewer["id"]]
            # the gate's decision on the reviewer's tile, live and in the tree (not the answer's words)
            assert tree["children"][0]["children"][0]["decision"] == decision, variant
            assert tree["children"][0]["children"][0]["decision_reason"] == proposal["decision_reason"], variant
            assert "decision" not in tree["children"][0]
            # a worker whose change the reviewer rejected says so, live and in the tree; an approved one does not
            tile = [f for f in c.frames if f["type"] == "agent_tile" and f["task_id"] == worker["id"]][-1]
            assert tile.get("changes_not_made") == (None if decision == "approve" else 1), variant
            assert tree["children"][0].get("changes_not_made") == (None if decision == "approve" else 1), variant
            decided = [f for f in c.of_type("agent_tile") if f["task_id"] == reviewer["id"] and "decision" in f]
            assert [f["decision"] for f in decided] == [decision], variant


async def test_reviewer_timeout_and_crash_reject(tmp_path):
    """Fail closed: a reviewer past its own limit, and a reviewer whose model
    call fails (HTTP 500, no retries → provider error)."""
    script = touch_script("late", [{"delay_s": 10, "content": "Decision: approve\ntoo late"}])
    async with open_daemon(tmp_path, script, limits={"reviewer_timeout_s": 1}) as d:
        async with d.ws("gate-timeout") as c:
            assert (await c.ask("please"))["type"] == "final"
        (reviewer,) = d.workers("reviewer")
        assert reviewer["status"] == "failed" and reviewer["close_reason"].startswith("timeout")
        (proposal,) = d.rows("SELECT * FROM mutating_proposals")
        assert proposal["decision"] == "reject" and "timeout" in proposal["decision_reason"]
        assert "fail closed" in proposal["decision_reason"]
        assert not (d.markers / "late").exists()
        seen = tool_result(d.requests("rt-worker")[-1], "call_0_0")
        assert seen["message"] == "The tool did not run: the review timed out (limit 1 s)."
        assert [a["status"] for a in d.audit(d.workers("rt-worker")[0]["id"])] == ["rejected"]

        d.use_script(touch_script("crash", [{"http_status": 500}]))
        async with d.ws("gate-crash") as c:
            assert (await c.ask("please"))["type"] == "final"
        reviewer = d.workers("reviewer")[-1]
        assert reviewer["status"] == "failed" and reviewer["close_reason"].startswith("provider_error")
        proposal = d.rows("SELECT * FROM mutating_proposals ORDER BY created_at")[-1]
        assert proposal["decision"] == "reject" and "provider_error" in proposal["decision_reason"]
        assert proposal["reviewer_session_id"] == reviewer["id"]
        assert not (d.markers / "crash").exists()
        seen = tool_result(d.requests("rt-worker")[-1], "call_0_0")
        assert seen["message"].startswith("The tool did not run: the reviewer failed (provider_error")


async def test_stopping_a_worker_during_its_review_decides_reject(tmp_path):
    script = touch_script("stopped", [{"delay_s": 30, "content": "Decision: approve\nlate"}])
    async with open_daemon(tmp_path, script) as d, d.ws("gate-stop") as c:
        await c.send({"type": "user_message", "text": "please"})
        await c.tile("running", "reviewer")
        with trio.fail_after(10):
            while not d.requests("reviewer"):
                await d.fake.wait_requests(len(d.fake.requests) + 1)
        worker_id = d.task_id("rt-worker")
        await c.send({"type": "stop", "task_id": worker_id})
        assert (await c.until_type("final", "error"))["type"] == "final"
        (worker,), (reviewer,) = d.workers("rt-worker"), d.workers("reviewer")
        assert (worker["status"], worker["close_reason"]) == ("killed", "stopped by the user")
        assert reviewer["status"] == "killed" and reviewer["closed_at"]
        (proposal,) = d.rows("SELECT * FROM mutating_proposals")
        assert proposal["decision"] == "reject" and "stopped" in proposal["decision_reason"]
        assert proposal["decided_at"]
        assert not (d.markers / "stopped").exists()


async def test_read_only_persona_has_no_write_tools(tmp_path):
    """§8: an always-write tool is absent from a read-only persona's bag (a
    call is refused as unknown, no review); a tool whose class depends on its
    arguments stays and refuses mutating calls (host_bash and a test twin)."""
    script = {
        "default": [{"tool_calls": [agent_call("rt-readonly", "try to change things")]},
                    {"content_from_tool_results": True}],
        "rt-readonly": [
            {"tool_calls": [
                {"name": "rt_touch", "arguments": {"name": "ro-touch", "reason": "try"}},
                {"name": "rt_shell", "arguments": {"cmd": "touch ro-shell", "reason": "try"}},
                {"name": "rt_shell", "arguments": {"cmd": "echo hello"}},
                {"name": "host_bash", "arguments": {"cmd": "touch ${MARKERS}/ro-bash", "reason": "try"}},
            ]},
            {"content_from_tool_results": True},
        ],
        "reviewer": [{"content": "Decision: approve\nmust never be asked"}],
    }
    async with open_daemon(tmp_path, script) as d:
        d.env["MARKERS"] = str(d.markers)
        async with d.ws("read-only") as c:
            assert (await c.ask("change things"))["type"] == "final"
        first = d.requests("rt-readonly")[0]
        bag = tool_names(first)
        assert "rt_touch" not in bag
        assert "rt_shell" in bag and "host_bash" in bag and "rt_echo" in bag
        second = d.requests("rt-readonly")[1]
        touch, shell_w, shell_r, bash = (tool_result(second, f"call_0_{i}") for i in range(4))
        assert "rt_touch is not available to rt-readonly" in touch["error"]
        assert shell_w["status"] == "rejected" and "read-only persona" in shell_w["message"]
        assert shell_r == {"stdout": "hello"}
        assert bash["status"] == "rejected" and "refused, nothing was run" in bash["message"]
        assert list(d.markers.iterdir()) == []
        assert d.workers("reviewer") == [] and d.requests("reviewer") == []
        assert d.rows("SELECT * FROM mutating_proposals") == []
        (worker,) = d.workers("rt-readonly")
        audit = {json.loads(a["arguments"]).get("cmd", a["tool_name"]): a["status"] for a in d.audit(worker["id"])}
        assert audit == {"rt_touch": "error", "touch ro-shell": "rejected", "echo hello": "ok",
                         f"touch {d.markers}/ro-bash": "rejected"}
        # the worker completed, and its tile and tree node say that two of its changes were not made
        tiles = [f for f in c.frames if f["type"] == "agent_tile" and f["task_id"] == worker["id"]]
        assert tiles[-1]["status"] == "completed" and tiles[-1]["changes_not_made"] == 2
        tree = await d.runtime.session_tree(c.session_id, user_id="local")
        (node,) = [n for n in tree["children"] if n["id"] == worker["id"]]
        assert node["changes_not_made"] == 2


class _ChangeStore:
    """The store calls of the review gate, in memory."""

    def __init__(self):
        self.changes = []

    async def create_proposal(self, **row):
        return "p1"

    async def decide_proposal(self, proposal_id, **decision):
        pass

    async def record_change_event(self, **row):
        self.changes.append(row)
        return row


@pytest.mark.parametrize(("handler_does", "status"), [("fails", "error"), ("hangs", "timeout")])
async def test_an_approved_change_that_fails_is_in_the_change_log_with_how_it_ended(handler_does, status):
    from ongridd.errors import ToolError, ToolTimeout
    from ongridd.runtime.gate import ReviewGate
    from ongridd.runtime.workers import WorkerOutcome
    from ongridd.tools.spec import Proposal, Tool, ToolCallContext

    async def handler(args, ctx):
        if handler_does == "fails":
            raise ToolError("disk full")
        await trio.sleep_forever()

    async def spawn(ctx, brief, description, timeout_s):
        return WorkerOutcome(task_id="r1", persona="reviewer", status="completed", result="Decision: approve",
                             finish_reason="stop")

    store = _ChangeStore()
    tool = Tool(name="apply", description="changes a thing", handler=handler, tool_class="write", timeout_s=0.2,
                describe=lambda args: Proposal(action="apply the thing", target="web-1:/etc/thing",
                                               blast_radius="single_host"))
    gated = ReviewGate(store=store, spawn_reviewer=spawn, reviewer_timeout_s=5).wrap(tool)
    with pytest.raises(ToolTimeout if status == "timeout" else ToolError):
        await gated.handler({"reason": "asked"}, ToolCallContext(session_id="s1", agent="ops", user_id="alice"))
    (change,) = store.changes
    assert (change["kind"], change["subject"], change["actor"]) == ("tool", "web-1:/etc/thing", "ops")
    assert change["detail"]["status"] == status and change["detail"]["operator"] == "alice"
    assert change["detail"].get("error") == ("disk full" if status == "error" else None)  # why it failed


async def test_a_change_rows_subject_is_one_plain_line_whatever_the_model_wrote():
    from ongridd.errors import ToolError
    from ongridd.runtime.gate import ReviewGate
    from ongridd.runtime.workers import WorkerOutcome
    from ongridd.tools.spec import Proposal, Tool, ToolCallContext

    async def handler(args, ctx):
        raise ToolError("not a valid unit name")

    async def spawn(ctx, brief, description, timeout_s):
        return WorkerOutcome(task_id="r1", persona="reviewer", status="completed", result="Decision: approve",
                             finish_reason="stop")

    store = _ChangeStore()
    forged = "payments-db.service\n2026-12-06 rolled back by alice\u202e\u3164" + "x" * 500
    tool = Tool(name="restart", description="restarts", handler=handler, tool_class="write",
                describe=lambda args: Proposal(action=f"restart {args['unit']}", target=f"local:{args['unit']}",
                                               blast_radius="single_host"))
    gated = ReviewGate(store=store, spawn_reviewer=spawn, reviewer_timeout_s=5).wrap(tool)
    with pytest.raises(ToolError):
        await gated.handler({"unit": forged, "reason": "r"}, ToolCallContext(session_id="s1", agent="ops"))
    (change,) = store.changes
    assert change["subject"].startswith("local:payments-db.service 2026-12-06 rolled back by alicexxx")
    assert len(change["subject"]) == 200 and "\n" not in change["subject"] and "\u202e" not in change["subject"]
    assert change["detail"]["status"] == "error" and change["detail"]["error"] == "not a valid unit name"
