"""Runtime pieces on their own: the session hub, the dedup table and key,
idle-state cleanup (no daemon needed)."""

from __future__ import annotations

import trio
import trio.testing

from ongridd.runtime.control import DedupTable, canonical_prompt, dedup_key
from ongridd.runtime.hub import SUBSCRIBER_BUFFER, SessionHub, UndeliveredEnds
from ongridd.runtime.workers import WorkerOutcome


def outcome(status: str, task_id: str = "w1") -> WorkerOutcome:
    return WorkerOutcome(task_id=task_id, persona="p", status=status, result=f"{status} result")


def test_dedup_key_is_canonical_and_collision_free():
    assert canonical_prompt("  a\t b\n\nc  ") == "a b c"
    assert dedup_key("p", "Cafe\u0301  x") == dedup_key("p", "Caf\u00e9 x")  # NFC
    assert dedup_key("a", "b c") != dedup_key("a b", "c")  # the separator cannot occur in a name
    assert dedup_key("p", "x") != dedup_key("q", "x")


async def test_dedup_single_flight_and_rerun_after_failure():
    table = DedupTable()
    calls = []
    gate = trio.Event()

    async def dispatch(status: str):
        calls.append(status)
        await gate.wait()
        return outcome(status, f"w{len(calls)}")

    results = []
    async with trio.open_nursery() as n:
        async def one():
            results.append(await table.run("k", lambda: dispatch("completed")))
        n.start_soon(one)
        n.start_soon(one)
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert calls == ["completed"]  # one worker for both
    assert sorted(dup for _, dup in results) == [False, True]
    assert {o.task_id for o, _ in results} == {"w1"}
    # a completed dispatch is served again within the window
    again, dup = await table.run("k", lambda: dispatch("completed"))
    assert dup and again.task_id == "w1" and calls == ["completed"]
    # failed or killed dispatches may run again
    for status in ("failed", "killed"):
        first, dup1 = await table.run(status, lambda s=status: dispatch(s))
        second, dup2 = await table.run(status, lambda s=status: dispatch(s))
        assert (dup1, dup2) == (False, False) and first.task_id != second.task_id
    assert not table.idle()  # "k" is still in its window


async def test_dedup_window_passes_and_the_table_goes_idle():
    now = [1000.0]
    table = DedupTable(clock=lambda: now[0])
    n = []

    async def dispatch():
        n.append(1)
        return outcome("completed", f"w{len(n)}")

    await table.run("k", dispatch)
    now[0] += 119.0
    assert (await table.run("k", dispatch))[1] is True  # within 120 s of the first dispatch
    assert not table.idle()
    now[0] += 2.0  # 121 s after the first dispatch: the window has passed, a new one runs
    second, dup = await table.run("k", dispatch)
    assert not dup and second.task_id == "w2"
    now[0] += 121.0
    assert table.idle()


async def test_dedup_crashed_dispatch_releases_waiters_to_run_again():
    table = DedupTable()
    gate = trio.Event()
    seen = []

    async def crash():
        await gate.wait()
        raise RuntimeError("boom")

    async def ok():
        seen.append("ok")
        return outcome("completed", "w2")

    async def first():
        try:
            await table.run("k", crash)
        except RuntimeError:
            seen.append("crashed")

    got = []
    async with trio.open_nursery() as n:
        n.start_soon(first)
        await trio.testing.wait_all_tasks_blocked()

        async def second():
            got.append(await table.run("k", ok))
        n.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert seen == ["crashed", "ok"] and got[0][0].task_id == "w2" and got[0][1] is False


async def test_hub_fanout_reattach_and_stuck_subscriber():
    hub = SessionHub()
    hub.turn_running = True
    hub.publish({"type": "agent_tile", "task_id": "w1", "status": "running"})
    with hub.subscribe() as (initial, chan):
        assert initial == [{"type": "agent_tile", "task_id": "w1", "status": "running"}]
        hub.publish({"type": "token", "text": "x"})
        assert chan.receive_nowait() == {"type": "token", "text": "x"}
        # a subscriber that never reads is dropped once its buffer is full; publishing never blocks
        for i in range(SUBSCRIBER_BUFFER + 5):
            hub.publish({"type": "token", "text": str(i)})
        assert hub.subscriber_count == 0
        received = []
        async for frame in chan:  # what was buffered, then the end of the channel
            received.append(frame)
        assert len(received) == SUBSCRIBER_BUFFER
    # a turn that ends with nobody attached keeps its final for one re-attach
    hub.end_turn({"type": "final", "text": "done", "html": "<p>done</p>\n"})
    assert not hub.idle
    with hub.subscribe() as (initial, _):
        assert initial == [{"type": "final", "text": "done", "html": "<p>done</p>\n"}]
    with hub.subscribe() as (initial, _):
        assert initial == []
    assert hub.idle


async def test_a_turn_ending_with_a_subscriber_delivers_live():
    hub = SessionHub()
    hub.turn_running = True
    with hub.subscribe() as (_, chan):
        hub.end_turn({"type": "final", "text": "live", "html": "<p>live</p>\n"})
        assert chan.receive_nowait() == {"type": "final", "text": "live", "html": "<p>live</p>\n"}
    with hub.subscribe() as (initial, _):
        assert initial == []


def _ended(text: str) -> SessionHub:
    hub = SessionHub()
    hub.end_turn({"type": "final", "text": text, "html": ""})
    return hub


def test_undelivered_answers_are_bounded_in_count_and_size_oldest_dropped_first():
    kept = UndeliveredEnds(max_frames=3, max_chars=100)
    hubs = {sid: _ended("x" * 10) for sid in ("a", "b", "c")}
    for sid, hub in hubs.items():
        assert kept.note(sid, hub) == []
    hubs["d"] = _ended("x" * 10)
    assert kept.note("d", hubs["d"]) == ["a"]  # the fourth pushes the oldest out
    assert hubs["a"].undelivered_end is None and hubs["a"].idle
    assert [h.undelivered_end is not None for h in (hubs["b"], hubs["c"], hubs["d"])] == [True] * 3
    with hubs["b"].subscribe() as (initial, _):  # b's client came back: delivered, no longer counted
        assert initial[0]["text"] == "x" * 10
    kept.prune()
    assert len(kept) == 2 and kept.chars == 20
    hubs["e"] = _ended("y" * 91)  # over the size bound: the oldest go until it fits
    assert kept.note("e", hubs["e"]) == ["c", "d"]
    assert len(kept) == 1 and kept.chars == 91
    again = SessionHub()  # a thread's next turn replaces its kept frame instead of adding one
    again.end_turn({"type": "final", "text": "1", "html": ""})
    kept.note("f", again)
    again.end_turn({"type": "final", "text": "22", "html": ""})
    kept.note("f", again)
    assert len(kept) == 2 and kept.chars == 93


class _OneToolCallModel:
    """A model double: asks for one ``block`` tool call."""

    async def stream(self, request):
        from ongridd.llm.types import Completion, Message, ToolCall

        yield Completion(message=Message(role="assistant", content=None,
                                         tool_calls=(ToolCall(id="c1", name="block", arguments="{}"),)),
                         finish_reason="tool_calls")


async def test_kernel_cancellation_leaves_as_plain_cancelled():
    from ongridd.kernel import run_agent
    from ongridd.tools.bag import ToolBag
    from ongridd.tools.spec import Tool, ToolCallContext

    started = trio.Event()

    async def block(args, ctx):
        started.set()
        await trio.sleep_forever()

    class Persona:
        name, max_turns, tool_budget, model = "p", 3, None, None

    bag = ToolBag(agent="p", tools={"block": Tool(name="block", description="blocks", handler=block)})
    caught: list[BaseException] = []
    async with trio.open_nursery() as n:
        async def run():
            try:
                await run_agent(model=_OneToolCallModel(), persona=Persona(), system_prompt="", bag=bag,
                                user_message="go", context=ToolCallContext(session_id="s", agent="p"))
            except BaseException as exc:
                caught.append(exc)
                raise
        n.start_soon(run)
        await started.wait()
        n.cancel_scope.cancel()
    assert type(caught[0]) is trio.Cancelled, repr(caught[0])


def test_a_workers_system_prompt_is_composed_once_per_persona_file():
    """Spawns of an unchanged persona reuse its prompt; an edited persona (a
    new object after a reload) or a new base prompt gets a new one; the cache is bounded."""
    import types

    from ongridd.config import Config
    from ongridd.personas.parse import Persona
    from ongridd.runtime import agentrun

    config = Config()
    runner = agentrun.AgentRunner(config=config, store=None, writer=None, workers=None, model=lambda: None)
    snap = types.SimpleNamespace(skills=None)
    disk = Persona(name="disk", description="Disk work", body="You look at disks.")
    first = runner._worker_prompt(snap, disk)
    assert "You look at disks." in first
    assert runner._worker_prompt(snap, disk) is first  # composed once
    edited = Persona(name="disk", description="Disk work", body="You look at disks, carefully.")
    second = runner._worker_prompt(snap, edited)
    assert second is not first and "carefully" in second
    for i in range(agentrun.WORKER_PROMPTS_KEPT + 10):
        runner._worker_prompt(snap, Persona(name=f"p{i}", description="d", body="b"))
    assert len(runner._worker_prompts) == agentrun.WORKER_PROMPTS_KEPT
