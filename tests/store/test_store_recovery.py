"""Startup recovery (docs/architecture.md §4): rows closed, histories made valid."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from ongridd.store import RecoveryReport
from ongridd.store.engine import create_engine, normalize_url
from ongridd.store.recovery import INTERRUPTED_RESULT, plan_repair

SWEEP_TIME = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


def assert_history_valid(history):
    """Every assistant tool call is answered by the tool messages right after it, in call order."""
    i = 0
    while i < len(history):
        msg = history[i]
        i += 1
        calls = msg["tool_calls"] or [] if msg["role"] == "assistant" else []
        for call in calls:
            assert i < len(history), f"call {call['id']} unanswered at the end"
            answer = history[i]
            assert answer["role"] == "tool" and answer["tool_call_id"] == call["id"], (call, answer)
            i += 1


async def _crashed_state(store):
    """What a SIGKILL mid-turn leaves behind."""
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    cid = coord["id"]
    pending = await store.create_session(
        agent_id="specialist-sre", user_id="alice", parent_session_id=cid, description="5xx", status="pending"
    )
    running = await store.create_session(
        agent_id="specialist-ops", user_id="alice", parent_session_id=cid, description="restart", status="pending"
    )
    await store.mark_running(running["id"])
    reviewer = await store.create_session(
        agent_id="reviewer", user_id="alice", parent_session_id=running["id"], description="review", status="running"
    )
    done = await store.create_session(
        agent_id="specialist-disk", user_id="alice", parent_session_id=cid, description="du", status="running"
    )
    await store.close_session(done["id"], "completed", "final answer")
    proposal = await store.create_proposal(
        session_id=running["id"], action="restart nginx", target="web-1", reason="502s", blast_radius="service",
        operator="alice",
    )

    await store.append_message(cid, role="user", content="why 502s and is the disk full?")
    await store.append_message(
        cid,
        role="assistant",
        content="Checking.",
        tool_calls=[
            {"id": "call_1", "name": "AgentTool", "arguments": '{"subagent_type":"specialist-disk"}'},
            {"id": "call_2", "name": "AgentTool", "arguments": '{"subagent_type":"specialist-sre"}'},
            {"id": "call_3", "name": "AgentTool", "arguments": '{"subagent_type":"specialist-ops"}'},
        ],
    )
    await store.append_message(cid, role="tool", content='{"status":"completed"}', tool_call_id="call_1", name="AgentTool")
    # A message the user sent mid-turn was added to the running turn's history.
    await store.append_message(cid, role="user", content="also check web-2")

    # A second coordinator whose history is fine: it must not be touched.
    ok, _ = await store.get_or_create_coordinator("bob", "main")
    await store.append_message(ok["id"], role="user", content="hi")
    await store.append_message(ok["id"], role="assistant", content=None, tool_calls=[{"id": "c", "name": "get_active_incidents"}])
    await store.append_message(ok["id"], role="tool", content="[]", tool_call_id="c", name="get_active_incidents")
    await store.append_message(ok["id"], role="assistant", content="No incidents.")
    return {
        "coord": coord, "pending": pending, "running": running, "reviewer": reviewer, "done": done,
        "proposal": proposal, "ok": ok,
    }


def _all_sessions(url):
    engine = create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sa.text("SELECT * FROM chat_sessions"))]
    finally:
        engine.dispose()


async def test_recovery_sweep(store, db_url):
    s = await _crashed_state(store)
    ok_before = await store.load_messages(s["ok"]["id"])

    report = await store.recovery_sweep(SWEEP_TIME)
    assert report == RecoveryReport(closed_workers=3, repaired_sessions=1, added_tool_results=2, rejected_proposals=1)

    for key in ("pending", "running", "reviewer"):
        row = await store.get_session(s[key]["id"])
        assert (row["status"], row["close_reason"]) == ("failed", "daemon restarted"), key
        assert row["closed_at"] == "2026-05-01T12:00:00.000000Z"
    done = await store.get_session(s["done"]["id"])
    assert (done["status"], done["close_reason"]) == ("completed", "final answer")
    assert (await store.get_session(s["coord"]["id"]))["status"] == "open"
    assert (await store.get_session(s["ok"]["id"]))["status"] == "open"

    # The recovery invariants, read straight from the table.
    rows = _all_sessions(db_url)
    assert not [r for r in rows if r["status"] in ("pending", "running")]
    assert not [r for r in rows if r["status"] in ("completed", "failed", "killed") and r["closed_at"] is None]

    history = await store.load_messages(s["coord"]["id"])
    assert [m["seq"] for m in history] == list(range(1, 7))
    assert [(m["role"], m["tool_call_id"]) for m in history] == [
        ("user", None),
        ("assistant", None),
        ("tool", "call_1"),
        ("tool", "call_2"),
        ("tool", "call_3"),
        ("user", None),
    ]
    assert history[2]["content"] == '{"status":"completed"}'
    for added in history[3:5]:
        assert json.loads(added["content"]) == {
            "status": "error", "error": "interrupted by a daemon restart; the result is unknown",
        }
        assert added["name"] == "AgentTool"
    assert history[5]["content"] == "also check web-2"
    assert_history_valid(history)
    # each call the crash cut off is in the audit too: cancelled, with the arguments the model sent
    audit = sorted((a["tool_name"], a["tool_call_id"], a["status"], a["arguments"], a["duration_ms"])
                   for a in await store.list_audit(s["coord"]["id"]))  # (one time: ids order them at random)
    assert audit == [("AgentTool", "call_2", "cancelled", '{"subagent_type":"specialist-sre"}', 0),
                     ("AgentTool", "call_3", "cancelled", '{"subagent_type":"specialist-ops"}', 0)]
    assert await store.load_messages(s["ok"]["id"]) == ok_before

    proposal = await store.get_proposal(s["proposal"])
    assert proposal["decision"] == "reject" and "daemon restarted" in proposal["decision_reason"]

    # A second sweep finds nothing to do; appending continues after the repaired history.
    assert await store.recovery_sweep() == RecoveryReport()
    assert await store.append_message(s["coord"]["id"], role="user", content="next") == 7


async def test_sweep_on_a_clean_database(store):
    assert await store.recovery_sweep() == RecoveryReport()


async def test_full_scan_repairs_an_older_broken_block(store):
    coord, _ = await store.get_or_create_coordinator("alice", "old")
    cid = coord["id"]
    await store.append_message(cid, role="assistant", content=None, tool_calls=[{"id": "x1", "name": "t"}])
    await store.append_message(cid, role="assistant", content=None, tool_calls=[{"id": "x2", "name": "t"}])
    await store.append_message(cid, role="tool", content="r2", tool_call_id="x2", name="t")
    # The default sweep only looks at the tail (from the last assistant tool-call message): valid.
    assert (await store.recovery_sweep()).repaired_sessions == 0
    report = await store.recovery_sweep(full_scan=True)
    assert (report.repaired_sessions, report.added_tool_results) == (1, 1)
    history = await store.load_messages(cid)
    assert [(m["seq"], m["role"], m["tool_call_id"]) for m in history] == [
        (1, "assistant", None), (2, "tool", "x1"), (3, "assistant", None), (4, "tool", "x2"),
    ]
    assert_history_valid(history)


async def test_out_of_order_results_are_put_in_call_order(store):
    coord, _ = await store.get_or_create_coordinator("alice", "order")
    cid = coord["id"]
    await store.append_message(
        cid, role="assistant", content=None, tool_calls=[{"id": "p1", "name": "a"}, {"id": "p2", "name": "b"}]
    )
    await store.append_message(cid, role="tool", content="second", tool_call_id="p2", name="b")
    await store.append_message(cid, role="tool", content="first", tool_call_id="p1", name="a")
    report = await store.recovery_sweep()
    assert (report.repaired_sessions, report.added_tool_results) == (1, 0)
    history = await store.load_messages(cid)
    assert [m["content"] for m in history] == [None, "first", "second"]


# ---- plan_repair, the pure part -------------------------------------------------

def _m(role, calls=None, answers=None, tag=""):
    return {
        "role": role,
        "tool_calls": [{"id": c, "name": "t", "arguments": ""} for c in calls] if calls else None,
        "tool_call_id": answers,
        "content": tag,
        "id": object(),
    }


def test_plan_repair_leaves_a_valid_history_alone():
    msgs = [_m("user"), _m("assistant", ["a", "b"]), _m("tool", answers="a"), _m("tool", answers="b"), _m("assistant")]
    new, added = plan_repair(msgs)
    assert added == 0 and [id(m) for m in new] == [id(m) for m in msgs]


def test_plan_repair_reused_call_ids_are_matched_within_their_block():
    # Some providers reuse ids ("call_0") across messages: an answer never crosses an assistant message.
    msgs = [_m("assistant", ["call_0"]), _m("assistant", ["call_0"]), _m("tool", answers="call_0", tag="late")]
    new, added = plan_repair(msgs)
    assert added == 1
    assert [(m["role"], m["tool_call_id"], m["content"]) for m in new] == [
        ("assistant", None, ""), ("tool", "call_0", INTERRUPTED_RESULT), ("assistant", None, ""), ("tool", "call_0", "late"),
    ]


message_st = st.one_of(
    st.builds(lambda: _m("user")),
    st.builds(lambda: _m("assistant")),
    st.builds(lambda ids: _m("assistant", ids), st.lists(st.sampled_from("abcd"), min_size=1, max_size=3, unique=True)),
    st.builds(lambda cid: _m("tool", answers=cid), st.sampled_from("abcde")),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(message_st, max_size=12))
def test_plan_repair_properties(msgs):
    new, added = plan_repair(msgs)
    # Nothing is lost or duplicated; only interruption results are added.
    old_ids = sorted(id(m) for m in msgs)
    kept = [m for m in new if "id" in m]
    assert sorted(id(m) for m in kept) == old_ids
    fresh = [m for m in new if "id" not in m]
    assert len(fresh) == added and all(m["content"] == INTERRUPTED_RESULT for m in fresh)
    assert_history_valid(new)
    # A result added for a call answered later in the same block would be a wrong "unknown".
    new2, added2 = plan_repair(new)
    assert added2 == 0 and [id(m) for m in new2] == [id(m) for m in new]


async def test_history_cut_right_after_the_tool_calls(store):
    from ongridd.store.recovery import recovery_sweep

    coord, _ = await store.get_or_create_coordinator("alice", "cut")
    cid = coord["id"]
    await store.append_message(cid, role="user", content="disk?")
    await store.append_message(
        cid, role="assistant", content=None,
        tool_calls=[{"id": "k1", "name": "AgentTool", "arguments": "{}"}, {"id": "k2", "name": "query_devices"}],
    )
    report = await recovery_sweep(store, SWEEP_TIME)
    assert (report.repaired_sessions, report.added_tool_results) == (1, 2)
    history = await store.load_messages(cid)
    assert [(m["seq"], m["role"], m["tool_call_id"], m["name"]) for m in history] == [
        (1, "user", None, None),
        (2, "assistant", None, None),
        (3, "tool", "k1", "AgentTool"),
        (4, "tool", "k2", "query_devices"),
    ]
    assert history[3]["content"] == INTERRUPTED_RESULT
    assert history[3]["created_at"] == "2026-05-01T12:00:00.000000Z"
    assert_history_valid(history)


async def test_messages_held_for_a_turn_are_appended_to_their_thread(store):
    """A crash while messages were held for a running turn (sent, not yet
    read by its model): the sweep appends them to their threads after the
    repaired history, in the order they were accepted, as messages of their
    own (no turn answered them), and empties the table."""
    from ongridd.store.writer import running_writer

    s = await _crashed_state(store)
    cid = s["coord"]["id"]
    other, _ = await store.get_or_create_coordinator("carol", "main")
    async with running_writer(store) as writer:
        for sid, text in ((cid, "and web-3?"), (other["id"], "hello?"), (cid, "web-4 too")):
            await writer.hold_message(sid, owner=sid, content=text).wait()

    report = await store.recovery_sweep(SWEEP_TIME)
    assert report.kept_messages == 3 and report.added_tool_results == 2
    history = await store.load_messages(cid)
    assert [(m["role"], m["content"], m["name"]) for m in history[5:]] == [
        ("user", "also check web-2", None), ("user", "and web-3?", None), ("user", "web-4 too", None)]
    assert [m["seq"] for m in history] == list(range(1, 9))
    assert_history_valid(history)
    assert [(m["content"], m["name"]) for m in await store.load_messages(other["id"])] == [("hello?", None)]
    assert await store.recovery_sweep() == RecoveryReport()  # nothing held any more


async def test_a_cut_off_call_is_audited_even_when_its_id_was_used_before(store):
    """Some providers number calls per request (``call_0`` each turn): an
    earlier turn's audit row with the same id does not stand for the call
    the crash cut off."""
    from ongridd.store.writer import running_writer

    coord, _ = await store.get_or_create_coordinator("dave", "main")
    cid = coord["id"]
    await store.append_message(cid, role="user", content="list the hosts")
    await store.append_message(cid, role="assistant", content=None,
                               tool_calls=[{"id": "call_0", "name": "query_devices", "arguments": "{}"}])
    await store.append_message(cid, role="tool", content="[]", tool_call_id="call_0", name="query_devices")
    async with running_writer(store) as writer:
        await writer.add_audit(session_id=cid, owner=cid, tool_name="query_devices", arguments="{}", result="[]",
                               status="ok", duration_ms=3, tool_call_id="call_0").wait()
    await store.append_message(cid, role="assistant", content="None.")
    await store.append_message(cid, role="user", content="now check the disk")
    await store.append_message(cid, role="assistant", content=None, tool_calls=[
        {"id": "call_0", "name": "AgentTool", "arguments": '{"subagent_type":"specialist-disk"}'}])

    report = await store.recovery_sweep()
    assert report.added_tool_results == 1
    audit = sorted((a["tool_name"], a["status"]) for a in await store.list_audit(cid))
    assert audit == [("AgentTool", "cancelled"), ("query_devices", "ok")]
