"""A call's class is computed once, in a worker thread, bounded in time, and
carried through the runner, the review gate and the handler; the gate marks
the call it approved (tool contract)."""

from __future__ import annotations

import json
import threading

import trio

from ongridd.llm.types import ToolCall
from ongridd.runtime.gate import ReviewGate
from ongridd.runtime.workers import WorkerOutcome
from ongridd.tools.bag import ToolBag
from ongridd.tools.classify import call_key, classify_once
from ongridd.tools.runner import ToolRunner
from ongridd.tools.spec import Classification, Proposal, Tool, ToolCallContext

SCHEMA = {"type": "object", "properties": {"cmd": {"type": "string"}, "reason": {"type": "string"}},
          "required": ["cmd"], "additionalProperties": False}


class Store:
    def __init__(self):
        self.rows = []

    async def create_proposal(self, **row):
        self.rows.append(row)
        return f"p{len(self.rows)}"

    async def decide_proposal(self, proposal_id, **decision):
        self.rows[int(proposal_id[1:]) - 1].update(decision)

    async def record_change_event(self, **row):
        return row


def gate(answer="Decision: approve"):
    async def spawn(ctx, brief, description, timeout_s):
        return WorkerOutcome(task_id="r1", persona="reviewer", status="completed", result=answer,
                             finish_reason="stop")

    return ReviewGate(store=Store(), spawn_reviewer=spawn, reviewer_timeout_s=5)


def ctx(read_only=False):
    return ToolCallContext(session_id="s", agent="a", read_only=read_only)


def tool_with(classify, seen, **kw):
    async def handler(args, c):
        seen.append(c)
        return {"ran": args["cmd"]}

    return Tool(name="shell", description="d", parameters=SCHEMA, handler=handler, classify=classify,
                describe=lambda a: Proposal(action=f"run {a['cmd']}", target="local"), **kw)


async def run(tool, args, c=None):
    bag = ToolBag(agent="a", tools={tool.name: gate().wrap(tool)})
    return await ToolRunner(bag).run(ToolCall(id="c1", name=tool.name, arguments=json.dumps(args)), c or ctx())


async def test_classified_once_off_the_event_loop_and_carried_to_the_handler():
    calls, seen = [], []

    def classify(args):
        calls.append(threading.current_thread() is threading.main_thread())
        return Classification(tool_class="write", detail={"argv": args["cmd"].split()}, reason="changes things")

    result = await run(tool_with(classify, seen), {"cmd": "touch x", "reason": "r"})
    assert result.status == "ok" and json.loads(result.content) == {"ran": "touch x"}
    assert calls == [False]  # once, and not on the Trio thread
    (handler_ctx,) = seen
    key = call_key("shell", {"cmd": "touch x", "reason": "r"})
    assert handler_ctx.classification.call_key == key and handler_ctx.classification.detail == {
        "argv": ["touch", "x"]}
    # the gate marked the call it approved, for these very arguments
    assert handler_ctx.approved(key) and handler_ctx.approved_proposal_id == "p1"
    assert not handler_ctx.approved(call_key("shell", {"cmd": "rm -rf /", "reason": "r"}))


async def test_read_calls_carry_no_approval_and_plain_str_classify_still_works():
    seen = []
    result = await run(tool_with(lambda a: "read", seen), {"cmd": "uptime"})
    assert result.status == "ok"
    (c,) = seen
    assert c.classification.tool_class == "read" and c.approval is None
    assert tool_with(lambda a: "bogus", []).classify_call({"cmd": "x"}).tool_class == "write"
    assert tool_with(lambda a: "read", []).class_for({"cmd": "x"}) == "read"


async def test_an_approval_from_outside_the_gate_is_dropped():
    from ongridd.tools.spec import Approval

    seen = []
    forged = ToolCallContext(session_id="s", agent="a",
                             approval=Approval(proposal_id="forged", call_key=call_key("shell", {"cmd": "x"})))
    result = await run(tool_with(lambda a: "read", seen), {"cmd": "x"}, forged)
    assert result.status == "ok" and seen[0].approval is None


async def test_a_hung_classify_refuses_without_stalling_the_event_loop():
    release = threading.Event()
    seen, ticks = [], []

    def classify(args):
        release.wait(30)  # like os.path.realpath on a dead NFS mount
        return "read"

    tool = tool_with(classify, seen, classify_timeout_s=0.3)

    async def ticker():
        while True:
            ticks.append(trio.current_time())
            await trio.sleep(0.05)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            with trio.fail_after(5):
                result = await run(tool, {"cmd": "cat /mnt/nfs/x"})
            nursery.cancel_scope.cancel()
    finally:
        release.set()
    assert result.status == "error" and "could not decide within 0.3 s" in result.content
    assert "nothing was run" in result.content and seen == []
    assert len(ticks) >= 4  # the loop kept running while the classify thread hung


async def test_classify_once_keeps_a_classification_made_for_the_same_arguments():
    n = []

    def classify(args):
        n.append(1)
        return "write"

    tool = tool_with(classify, [])
    c = await classify_once(tool, {"cmd": "x"}, ctx())
    again = await classify_once(tool, {"cmd": "x"}, c)
    assert again is c and len(n) == 1
    other = await classify_once(tool, {"cmd": "y"}, c)
    assert other.classification.call_key != c.classification.call_key and len(n) == 2
