"""Audit rows and review-gate proposals."""

from __future__ import annotations

import uuid

import pytest

from ongridd.errors import NotFound, StoreError
from ongridd.tools.spec import AUDIT_STATUSES


async def _tree(store):
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    worker = await store.create_session(
        agent_id="specialist-ops", user_id="alice", parent_session_id=coord["id"], description="restart", status="running"
    )
    reviewer = await store.create_session(
        agent_id="reviewer", user_id="alice", parent_session_id=worker["id"], description="review", status="running"
    )
    return coord, worker, reviewer


async def test_audit_rows_per_session_and_subtree(store):
    coord, worker, reviewer = await _tree(store)
    other, _ = await store.get_or_create_coordinator("bob", "main")
    a1 = await store.add_audit(
        session_id=coord["id"], tool_name="AgentTool", arguments='{"subagent_type":"specialist-ops"}',
        result='{"status":"completed"}', status="ok", duration_ms=1200,
    )
    a2 = await store.add_audit(
        session_id=worker["id"], tool_name="host_restart_service", arguments='{"service":"nginx"}',
        result='{"status":"rejected"}', status="rejected", duration_ms=30,
    )
    a3 = await store.add_audit(
        session_id=reviewer["id"], tool_name="query_promql", arguments="{not json", result="bad args",
        status="error", duration_ms=0,
    )
    await store.add_audit(session_id=other["id"], tool_name="x", arguments="{}", result="", status="ok", duration_ms=1)
    assert len({a1, a2, a3}) == 3 and str(uuid.UUID(a1)) == a1

    own = await store.list_audit(coord["id"])
    assert [r["id"] for r in own] == [a1]
    row = own[0]
    assert row["session_id"] == coord["id"] and row["agent_id"] == "default"
    assert (row["tool_name"], row["status"], row["duration_ms"]) == ("AgentTool", "ok", 1200)
    assert row["arguments"] == '{"subagent_type":"specialist-ops"}' and row["created_at"].endswith("Z")

    everything = await store.list_audit(coord["id"], include_children=True)
    assert [r["id"] for r in everything] == [a1, a2, a3]
    assert [(r["session_id"], r["agent_id"]) for r in everything] == [
        (coord["id"], "default"), (worker["id"], "specialist-ops"), (reviewer["id"], "reviewer"),
    ]
    assert everything[2]["arguments"] == "{not json"  # as the model sent it
    assert [r["id"] for r in await store.list_audit(worker["id"], include_children=True)] == [a2, a3]
    assert await store.list_audit(str(uuid.uuid4()), include_children=True) == []


async def test_every_audit_status_is_accepted(store):
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    for status in AUDIT_STATUSES:
        await store.add_audit(session_id=coord["id"], tool_name="t", arguments="{}", result="r", status=status, duration_ms=1)
    assert sorted(r["status"] for r in await store.list_audit(coord["id"])) == sorted(AUDIT_STATUSES)


async def test_bad_audit_input(store):
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    base = dict(session_id=coord["id"], tool_name="t", arguments="{}", result="r", status="ok", duration_ms=1)
    with pytest.raises(ValueError, match="status"):
        await store.add_audit(**{**base, "status": "great"})
    with pytest.raises(ValueError, match="duration_ms"):
        await store.add_audit(**{**base, "duration_ms": -1})
    with pytest.raises(ValueError, match="duration_ms"):
        await store.add_audit(**{**base, "duration_ms": 1.5})
    with pytest.raises(ValueError, match="arguments"):
        await store.add_audit(**{**base, "arguments": {"a": 1}})
    with pytest.raises(NotFound):
        await store.add_audit(**{**base, "session_id": str(uuid.uuid4())})
    assert await store.list_audit(coord["id"]) == []


async def test_proposal_lifecycle(store):
    _coord, worker, reviewer = await _tree(store)
    pid = await store.create_proposal(
        session_id=worker["id"], action="restart nginx", target="web-1", reason="502s since 10:40",
        blast_radius="service", operator="alice",
    )
    p = await store.get_proposal(pid)
    assert (p["action"], p["target"], p["blast_radius"], p["operator"]) == ("restart nginx", "web-1", "service", "alice")
    assert p["decision"] is None and p["decided_at"] is None and p["created_at"].endswith("Z")

    await store.decide_proposal(pid, decision="approve", decision_reason="SOP 12 applies", reviewer_session_id=reviewer["id"])
    p = await store.get_proposal(pid)
    assert (p["decision"], p["decision_reason"], p["reviewer_session_id"]) == ("approve", "SOP 12 applies", reviewer["id"])
    assert p["decided_at"].endswith("Z")

    with pytest.raises(StoreError, match="already decided"):
        await store.decide_proposal(pid, decision="reject", decision_reason="late", reviewer_session_id=None)
    assert (await store.get_proposal(pid))["decision"] == "approve"
    with pytest.raises(NotFound):
        await store.decide_proposal(str(uuid.uuid4()), decision="reject", decision_reason="x", reviewer_session_id=None)
    assert await store.get_proposal(str(uuid.uuid4())) is None


async def test_bad_proposal_input(store):
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    base = dict(session_id=coord["id"], action="a", target="t", reason="r", blast_radius="cluster", operator="alice")
    with pytest.raises(ValueError, match="blast_radius"):
        await store.create_proposal(**{**base, "blast_radius": "galaxy"})
    with pytest.raises(ValueError, match="reason"):
        await store.create_proposal(**{**base, "reason": ""})
    with pytest.raises(NotFound):
        await store.create_proposal(**{**base, "session_id": str(uuid.uuid4())})
    pid = await store.create_proposal(**base)
    with pytest.raises(ValueError, match="decision"):
        await store.decide_proposal(pid, decision="maybe", decision_reason=None, reviewer_session_id=None)
