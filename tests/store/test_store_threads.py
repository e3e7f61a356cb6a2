"""Console reads: a user's threads newest first with a (updated_at, id) cursor, transcript
pages, and audit rows linked to their review proposals — on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from ongridd.store.schema import chat_messages
from ongridd.store.threads import LAST_TEXT_CHARS


def _set_time(store, session_id: str, when: datetime) -> None:
    with store._db.engine.begin() as conn:
        conn.execute(sa.update(chat_messages).where(chat_messages.c.session_id == session_id).values(created_at=when))


async def test_threads_newest_first_only_own_coordinators_with_cursor(store):
    a, _ = await store.get_or_create_coordinator("alice", "a")
    b, _ = await store.get_or_create_coordinator("alice", "b")
    c, _ = await store.get_or_create_coordinator("alice", "c")
    empty, _ = await store.get_or_create_coordinator("alice", "empty")
    other, _ = await store.get_or_create_coordinator("bob", "a")
    worker = await store.create_session(agent_id="specialist-disk", user_id="alice", parent_session_id=a["id"],
                                        status="pending")
    for sid, text in ((a["id"], "first"), (b["id"], "second"), (c["id"], "third"), (other["id"], "bob's")):
        await store.append_message(sid, role="user", content=text)
    await store.append_message(a["id"], role="assistant", content="answer")
    await store.append_message(worker["id"], role="user", content="brief")
    t0 = datetime(2030, 1, 1, tzinfo=timezone.utc)
    _set_time(store, a["id"], t0 + timedelta(seconds=2))
    _set_time(store, b["id"], t0 + timedelta(seconds=1))  # b and c tie
    _set_time(store, c["id"], t0 + timedelta(seconds=1))

    rows = await store.list_threads("alice", limit=50)
    assert [r["thread"] for r in rows[:3]] == ["a", *sorted(["b", "c"], key=lambda t: {"b": b, "c": c}[t]["id"],
                                                                  reverse=True)]
    assert rows[3]["thread"] == "empty" and rows[3]["updated_at"] == empty["created_at"]
    assert {r["id"] for r in rows} == {a["id"], b["id"], c["id"], empty["id"]}  # no worker, no bob
    first = rows[0]
    assert first["last_user_text"] == "first" and first["last_role"] == "assistant"
    assert first["updated_at"] == "2030-01-01T00:00:02.000000Z" and first["status"] == "open"
    assert rows[1]["last_role"] == "user" and rows[3]["last_role"] is None

    # page of one at a time through the tie: nothing twice, nothing lost
    seen, before, before_id = [], None, None
    for _ in range(6):
        page = await store.list_threads("alice", limit=1, before=before, before_id=before_id)
        if not page:
            break
        seen.append(page[0]["id"])
        before = datetime.fromisoformat(page[0]["updated_at"].replace("Z", "+00:00"))
        before_id = page[0]["id"]
    assert seen == [r["id"] for r in rows]
    # before without an id: strictly older
    older = await store.list_threads("alice", limit=50, before=t0 + timedelta(seconds=1))
    assert [r["id"] for r in older] == [empty["id"]]


async def test_last_user_text_is_cut_and_one_line(store):
    s, _ = await store.get_or_create_coordinator("alice", "long")
    await store.append_message(s["id"], role="user", content="line one\nline two " + "x" * 5000)
    (row,) = await store.list_threads("alice", limit=5)
    assert row["last_user_text"].startswith("line one line two x")
    assert len(row["last_user_text"]) == LAST_TEXT_CHARS and row["last_user_text"].endswith("…")


async def test_message_pages(store):
    s, _ = await store.get_or_create_coordinator("alice", "m")
    for i in range(7):
        await store.append_message(s["id"], role="user" if i % 2 == 0 else "assistant", content=f"m{i}")
    first = await store.list_messages(s["id"], after_seq=0, limit=3)
    assert [m["seq"] for m in first] == [1, 2, 3]
    assert set(first[0]) == {"seq", "role", "content", "tool_calls", "tool_call_id", "name", "created_at"}
    rest = await store.list_messages(s["id"], after_seq=3, limit=100)
    assert [m["content"] for m in rest] == ["m3", "m4", "m5", "m6"]
    assert await store.list_messages(s["id"], after_seq=7, limit=10) == []


async def test_audit_items_carry_the_proposal_of_their_call(store):
    coord, _ = await store.get_or_create_coordinator("alice", "gate")
    worker = await store.create_session(agent_id="specialist-ops", user_id="alice", parent_session_id=coord["id"],
                                        status="running")
    reviewer = await store.create_session(agent_id="reviewer", user_id="alice", parent_session_id=worker["id"],
                                          status="running")
    pid = await store.create_proposal(session_id=worker["id"], action="restart nginx", target="local",
                                      reason="502s", blast_radius="single_host", operator="alice",
                                      tool_call_id="call_0_0")
    await store.decide_proposal(pid, decision="reject", decision_reason="no runbook covers it",
                                reviewer_session_id=reviewer["id"])
    # the same call id in another session must not pick this proposal up
    await store.add_audit(session_id=coord["id"], tool_name="AgentTool", arguments="{}", result="ok",
                          status="ok", duration_ms=5, tool_call_id="call_0_0")
    await store.add_audit(session_id=worker["id"], tool_name="host_restart_service", arguments='{"service":"nginx"}',
                          result="rejected", status="rejected", duration_ms=7, tool_call_id="call_0_0")
    await store.add_audit(session_id=worker["id"], tool_name="get_host_load", arguments="{}", result="1.0",
                          status="ok", duration_ms=1)
    items = await store.list_audit_items(coord["id"], include_children=True, limit=100)
    by_tool = {i["tool_name"]: i for i in items}
    assert set(by_tool) == {"AgentTool", "host_restart_service", "get_host_load"}
    assert by_tool["AgentTool"]["proposal"] is None and by_tool["AgentTool"]["tool_call_id"] == "call_0_0"
    assert by_tool["get_host_load"]["proposal"] is None and by_tool["get_host_load"]["tool_call_id"] is None
    p = by_tool["host_restart_service"]["proposal"]
    assert p["decision"] == "reject" and p["decision_reason"] == "no runbook covers it"
    assert p["reviewer_session_id"] == reviewer["id"] and p["id"] == pid and p["decided_at"]
    assert by_tool["host_restart_service"]["agent_id"] == "specialist-ops"
    # bounded pages
    assert [i["tool_name"] for i in await store.list_audit_items(coord["id"], include_children=True, limit=1,
                                                                  offset=1)] == ["host_restart_service"]
    assert len(await store.list_audit_items(worker["id"], include_children=False, limit=100)) == 2
    assert (await store.get_proposal(pid))["tool_call_id"] == "call_0_0"


async def test_a_turn_error_is_kept_until_a_later_message(store):
    from ongridd.store.writer import running_writer

    s, _ = await store.get_or_create_coordinator("alice", "failing")
    async with running_writer(store, linger_s=0) as writer:
        # the same batch: the turn's last message, then its error (kept with that message's seq)
        writer.append_message(s["id"], owner=s["id"], role="user", content="will it fail?")
        noted = writer.note_turn_error(s["id"], "provider_error: HTTP 400 from the model", owner=s["id"])
        await noted.settled()
        assert noted.result is True
        (row,) = await store.list_threads("alice", limit=5)
        assert row["last_turn_error"] == "provider_error: HTTP 400 from the model"
        assert row["last_role"] == "user"
        # a later turn's message (answered or cut off): the error is about an older turn now
        await writer.append_message(s["id"], owner=s["id"], role="user", content="again").settled()
        (row,) = await store.list_threads("alice", limit=5)
        assert row["last_turn_error"] is None
        gone = writer.note_turn_error("no-such-session", "internal: x", owner=s["id"])
        await gone.settled()
        assert gone.result is False
