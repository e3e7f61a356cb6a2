"""Session rows: lifecycle, coordinator uniqueness, trees, shutdown close, counts."""

from __future__ import annotations

import re
import uuid
from datetime import datetime

import pytest
import trio

from ongridd.errors import NotFound, StoreError

ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def _is_uuid(text: str) -> bool:
    return str(uuid.UUID(text)) == text


async def _worker(store, parent, agent="specialist-disk", status="pending", description="look at /var"):
    return await store.create_session(
        agent_id=agent, user_id=parent["user_id"], parent_session_id=parent["id"], description=description, status=status
    )


async def test_coordinator_row_per_user_and_thread(store):
    a, created = await store.get_or_create_coordinator("alice", "main")
    assert created
    assert _is_uuid(a["id"])
    assert (a["agent_id"], a["status"], a["parent_session_id"], a["thread_id"]) == ("default", "open", None, "main")
    assert ISO_Z.match(a["created_at"]) and a["closed_at"] is None
    again, created = await store.get_or_create_coordinator("alice", "main")
    assert not created and again == a
    other_thread, created = await store.get_or_create_coordinator("alice", "ops")
    other_user, created2 = await store.get_or_create_coordinator("bob", "main")
    assert created and created2
    assert len({a["id"], other_thread["id"], other_user["id"]}) == 3
    with pytest.raises(StoreError, match="create session failed"):
        await store.create_session(agent_id="default", user_id="alice", thread_id="main", status="open")


async def test_coordinator_creation_is_race_safe(store):
    results = []

    async def one():
        results.append(await store.get_or_create_coordinator("carol", "race"))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for _ in range(30):
                nursery.start_soon(one)
    assert len({row["id"] for row, _ in results}) == 1
    assert sum(created for _, created in results) == 1


async def test_worker_lifecycle(store):
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    w = await _worker(store, coord)
    assert w["status"] == "pending" and w["started_at"] is None and w["parent_session_id"] == coord["id"]
    assert await store.get_session(w["id"]) == w

    running = await store.mark_running(w["id"])
    assert running["status"] == "running" and ISO_Z.match(running["started_at"])
    assert await store.mark_running(w["id"]) is None  # only from pending
    assert await store.mark_running(str(uuid.uuid4())) is None

    assert await store.close_session(w["id"], "completed", "done") is True
    closed = await store.get_session(w["id"])
    assert (closed["status"], closed["close_reason"]) == ("completed", "done")
    assert ISO_Z.match(closed["closed_at"])
    # Idempotent: a second close (even with another status) changes nothing.
    assert await store.close_session(w["id"], "killed", "late stop") is False
    assert await store.get_session(w["id"]) == closed
    assert await store.close_session(str(uuid.uuid4()), "failed") is False
    assert await store.mark_running(w["id"]) is None


async def test_pending_worker_can_be_killed_before_it_runs(store):
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    w = await _worker(store, coord)
    assert await store.close_session(w["id"], "killed", "turn stopped")
    row = await store.get_session(w["id"])
    assert (row["status"], row["started_at"], row["close_reason"]) == ("killed", None, "turn stopped")
    assert row["closed_at"] is not None


async def test_concurrent_closes_close_once(store):
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    w = await _worker(store, coord, status="running")
    outcomes = []

    async def close(status):
        outcomes.append((status, await store.close_session(w["id"], status, status)))

    async with trio.open_nursery() as nursery:
        for status in ("completed", "failed", "killed") * 5:
            nursery.start_soon(close, status)
    winners = [s for s, won in outcomes if won]
    assert len(winners) == 1
    row = await store.get_session(w["id"])
    assert row["status"] == winners[0] == row["close_reason"]


async def test_close_in_a_cancelled_finally_with_a_shield(store):
    """The docs/architecture.md §4 pattern: the close runs although the task was cancelled."""
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    w = await _worker(store, coord, status="running")
    started = trio.Event()
    closed = []

    async def worker_task():
        try:
            started.set()
            await trio.sleep_forever()
        finally:
            with trio.move_on_after(5, shield=True):
                closed.append(await store.close_session(w["id"], "killed", "stopped by TaskStop"))

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker_task)
            await started.wait()
            nursery.cancel_scope.cancel()
    assert closed == [True]
    row = await store.get_session(w["id"])
    assert (row["status"], row["close_reason"]) == ("killed", "stopped by TaskStop")
    assert row["closed_at"] is not None


async def test_cancelled_call_still_completes_its_transaction(store):
    """A cancellation delivered while the thread runs never leaves half a write."""
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    with trio.CancelScope() as scope:
        scope.cancel()
        # Cancelled before it starts: nothing is written, Cancelled is raised (caught by the scope).
        await store.append_message(coord["id"], role="user", content="never")
    assert scope.cancelled_caught
    assert await store.load_messages(coord["id"]) == []


async def test_children_and_tree(store):
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    w1 = await _worker(store, coord, agent="specialist-disk", description="disk")
    w2 = await _worker(store, coord, agent="specialist-ops", description="restart nginx", status="running")
    reviewer = await _worker(store, w2, agent="reviewer", description="review restart", status="running")
    await store.close_session(reviewer["id"], "completed", "approved")

    children = await store.list_children(coord["id"])
    assert [c["id"] for c in children] == [w1["id"], w2["id"]]
    assert await store.list_children(w1["id"]) == []

    tree = await store.session_tree(coord["id"])
    assert tree["id"] == coord["id"] and tree["agent_id"] == "default" and tree["status"] == "open"
    assert [c["id"] for c in tree["children"]] == [w1["id"], w2["id"]]
    disk, ops = tree["children"]
    assert disk["description"] == "disk" and disk["children"] == []
    assert [g["agent_id"] for g in ops["children"]] == ["reviewer"]
    rev = ops["children"][0]
    assert (rev["status"], rev["close_reason"]) == ("completed", "approved")
    assert ISO_Z.match(rev["closed_at"]) and ISO_Z.match(rev["created_at"])
    assert {"id", "agent_id", "status", "description", "closed_at", "close_reason", "created_at", "children"} <= set(rev)

    sub = await store.session_tree(w2["id"])
    assert sub["id"] == w2["id"] and [g["id"] for g in sub["children"]] == [reviewer["id"]]
    assert await store.session_tree(str(uuid.uuid4())) is None


async def test_close_open_workers_at_shutdown(store):
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    pending = await _worker(store, coord)
    running = await _worker(store, coord, status="running")
    reviewer = await _worker(store, running, agent="reviewer", status="running")
    done = await _worker(store, coord, status="running")
    await store.close_session(done["id"], "completed", "ok")

    assert await store.close_open_workers("killed", "daemon shutdown") == 3
    for sid in (pending["id"], running["id"], reviewer["id"]):
        row = await store.get_session(sid)
        assert (row["status"], row["close_reason"]) == ("killed", "daemon shutdown")
        assert row["closed_at"] is not None
    assert (await store.get_session(done["id"]))["status"] == "completed"
    assert (await store.get_session(coord["id"]))["status"] == "open"
    assert await store.close_open_workers("killed", "daemon shutdown") == 0


async def test_count_sessions_by_status(store):
    assert await store.count_sessions_by_status() == {}
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    await _worker(store, coord)
    await _worker(store, coord)
    r = await _worker(store, coord, status="running")
    await store.close_session(r["id"], "failed", "boom")
    assert await store.count_sessions_by_status() == {"open": 1, "pending": 2, "failed": 1}


async def test_times_are_utc_and_ordered(store):
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    w = await _worker(store, coord, status="running")
    await store.close_session(w["id"], "completed")
    row = await store.get_session(w["id"])
    created = datetime.fromisoformat(row["created_at"])
    closed = datetime.fromisoformat(row["closed_at"])
    assert created.utcoffset().total_seconds() == 0
    assert created <= datetime.fromisoformat(row["started_at"]) <= closed


async def test_bad_session_input(store):
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    with pytest.raises(ValueError, match="status"):
        await store.create_session(agent_id="x", user_id="alice", parent_session_id=coord["id"], status="weird")
    with pytest.raises(ValueError, match="coordinator"):
        await store.create_session(agent_id="default", user_id="alice", thread_id="t", status="pending")
    with pytest.raises(ValueError, match="'open' is for coordinator"):
        await store.create_session(agent_id="x", user_id="alice", parent_session_id=coord["id"], status="open")
    with pytest.raises(ValueError, match="agent_id"):
        await store.create_session(agent_id="", user_id="alice", parent_session_id=coord["id"], status="pending")
    with pytest.raises(ValueError, match="status"):
        await store.close_session(coord["id"], "open")
    with pytest.raises(ValueError, match="thread_id"):
        await store.get_or_create_coordinator("alice", "")
    with pytest.raises(NotFound, match="parent session"):
        await store.create_session(agent_id="x", user_id="alice", parent_session_id=str(uuid.uuid4()), status="pending")


async def test_delete_empty_coordinator_only_while_it_is_empty(store):
    """An empty thread row goes; one with a message, or with a child, stays;
    a worker row is never taken for a thread (SQLite and PostgreSQL)."""
    empty, created = await store.get_or_create_coordinator("alice", "empty")
    assert created
    assert await store.delete_empty_coordinator(empty["id"]) is True
    assert await store.get_session(empty["id"]) is None
    assert await store.delete_empty_coordinator(empty["id"]) is False  # gone already

    talked, _ = await store.get_or_create_coordinator("alice", "talked")
    await store.append_message(talked["id"], role="user", content="hello")
    assert await store.delete_empty_coordinator(talked["id"]) is False
    assert await store.get_session(talked["id"]) is not None

    parent, _ = await store.get_or_create_coordinator("alice", "parent")
    child = await store.create_session(agent_id="specialist-disk", user_id="alice", parent_session_id=parent["id"],
                                       status="pending")
    assert await store.delete_empty_coordinator(parent["id"]) is False
    assert await store.delete_empty_coordinator(child["id"]) is False  # not a coordinator
    assert await store.get_session(parent["id"]) is not None and await store.get_session(child["id"]) is not None
    _again, created = await store.get_or_create_coordinator("alice", "empty")
    assert created  # a deleted empty thread is simply created afresh


async def test_sqlite_new_thread_row_never_blocks_the_loop_on_a_held_lock(sqlite_url):
    """SQLite: get_or_create_coordinator runs on the loop's thread when it can
    go ahead at once; with the write lock held elsewhere it goes to a thread
    (which waits for the lock) and the loop keeps running."""
    import sqlite3

    from ongridd.store import open_store

    async with open_store(sqlite_url) as store:
        first, created = await store.get_or_create_coordinator("u", "quick")
        assert created
        other = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), timeout=0, isolation_level=None,
                                check_same_thread=False)
        try:
            other.execute("BEGIN IMMEDIATE")
            got: list[tuple[dict, bool]] = []
            ticks = 0
            async with trio.open_nursery() as nursery:
                async def make() -> None:
                    got.append(await store.get_or_create_coordinator("u", "waited"))

                nursery.start_soon(make)
                with trio.move_on_after(0.5):
                    while True:
                        await trio.sleep(0.01)
                        ticks += 1
                assert ticks >= 10 and not got  # the loop ran; the row waits for the lock
                other.execute("ROLLBACK")
            (row, created), = got
            assert created and row["thread_id"] == "waited"
        finally:
            other.close()
        again, created = await store.get_or_create_coordinator("u", "quick")
        assert not created and again["id"] == first["id"]
