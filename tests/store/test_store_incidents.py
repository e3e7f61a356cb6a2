"""The plugin store: incidents (upsert by fingerprint) and change events."""

from __future__ import annotations

import inspect
import uuid

import pytest

from ongridd.plugins.api import PluginStore


def _alert(**over):
    base = dict(
        fingerprint="fp1",
        alertname="DiskFull",
        status="firing",
        severity="critical",
        labels={"instance": "web-1", "mount": "/var"},
        annotations={"summary": "disk 95% full"},
        starts_at="2026-03-01T10:40:00Z",
        ends_at=None,
    )
    base.update(over)
    return base


def test_plugin_store_has_exactly_the_protocol_methods():
    from ongridd.store import PluginStoreImpl

    wanted = {n for n in dir(PluginStore) if not n.startswith("_")}
    have = {n for n in dir(PluginStoreImpl) if not n.startswith("_")}
    assert have == wanted
    for name in wanted:
        assert inspect.signature(getattr(PluginStoreImpl, name)) == inspect.signature(getattr(PluginStore, name)), name
        assert inspect.iscoroutinefunction(getattr(PluginStoreImpl, name))


async def test_upsert_inserts_then_updates(store):
    ps = store.plugin_store
    first = await ps.upsert_incident(**_alert())
    assert str(uuid.UUID(first["id"])) == first["id"]
    assert first["status"] == "firing" and first["labels"] == {"instance": "web-1", "mount": "/var"}
    assert first["starts_at"] == "2026-03-01T10:40:00.000000Z" and first["ends_at"] is None
    assert {"id", "fingerprint", "alertname", "status", "severity", "labels", "annotations", "starts_at",
            "ends_at", "updated_at"} <= set(first)

    second = await ps.upsert_incident(**_alert(annotations={"summary": "disk 99% full"}, starts_at=None))
    assert second["id"] == first["id"]
    assert second["annotations"] == {"summary": "disk 99% full"}
    assert second["starts_at"] == first["starts_at"]  # kept when not given
    assert second["updated_at"] >= first["updated_at"]

    resolved = await ps.upsert_incident(**_alert(status="resolved", ends_at="2026-03-01T11:00:00+01:00"))
    assert resolved["status"] == "resolved" and resolved["ends_at"] == "2026-03-01T10:00:00.000000Z"
    assert await ps.get_incident(first["id"]) == resolved


async def test_acknowledged_survives_firing_and_yields_to_resolved(store):
    ps = store.plugin_store
    inc = await ps.upsert_incident(**_alert())
    acked = await ps.set_incident_status(inc["id"], "acknowledged")
    assert acked["status"] == "acknowledged"
    again = await ps.upsert_incident(**_alert())
    assert again["status"] == "acknowledged"
    done = await ps.upsert_incident(**_alert(status="resolved", ends_at="2026-03-01T12:00:00Z"))
    assert done["status"] == "resolved"
    refired = await ps.upsert_incident(**_alert(starts_at="2026-03-02T08:00:00Z"))
    assert refired["status"] == "firing" and refired["id"] == inc["id"]


async def test_set_status_resolved_sets_end_and_unknown_id(store):
    ps = store.plugin_store
    inc = await ps.upsert_incident(**_alert())
    res = await ps.set_incident_status(inc["id"], "resolved")
    assert res["status"] == "resolved" and res["ends_at"] is not None
    assert await ps.set_incident_status(str(uuid.uuid4()), "resolved") is None
    assert await ps.get_incident(str(uuid.uuid4())) is None
    with pytest.raises(ValueError, match="status"):
        await ps.set_incident_status(inc["id"], "closed")


async def test_list_incidents_filters(store):
    ps = store.plugin_store
    a = await ps.upsert_incident(**_alert(fingerprint="a", starts_at="2026-03-01T10:00:00Z"))
    b = await ps.upsert_incident(
        **_alert(fingerprint="b", alertname="HighLoad", severity="warning", starts_at="2026-03-02T10:00:00Z")
    )
    c = await ps.upsert_incident(
        **_alert(fingerprint="c", status="resolved", starts_at="2026-02-01T10:00:00Z", ends_at="2026-02-01T11:00:00Z")
    )
    ids = lambda rows: [r["id"] for r in rows]
    assert ids(await ps.list_incidents()) == [b["id"], a["id"], c["id"]]  # newest first
    assert ids(await ps.list_incidents(status="firing")) == [b["id"], a["id"]]
    assert ids(await ps.list_incidents(severity="warning")) == [b["id"]]
    assert ids(await ps.list_incidents(alertname="DiskFull")) == [a["id"], c["id"]]
    assert ids(await ps.list_incidents(limit=1)) == [b["id"]]
    assert ids(await ps.list_incidents(since="2100-01-01T00:00:00Z")) == []
    with pytest.raises(ValueError, match="limit"):
        await ps.list_incidents(limit=0)
    with pytest.raises(ValueError, match="since"):
        await ps.list_incidents(since="yesterday")
    with pytest.raises(ValueError, match="status"):
        await ps.list_incidents(status="open")


async def test_bad_incident_input(store):
    ps = store.plugin_store
    with pytest.raises(ValueError, match="status"):
        await ps.upsert_incident(**_alert(status="burning"))
    with pytest.raises(ValueError, match="fingerprint"):
        await ps.upsert_incident(**_alert(fingerprint=""))
    with pytest.raises(ValueError, match="labels"):
        await ps.upsert_incident(**_alert(labels=["a"]))
    with pytest.raises(ValueError, match="annotations"):
        await ps.upsert_incident(**_alert(annotations={"x": object()}))
    with pytest.raises(ValueError, match="starts_at"):
        await ps.upsert_incident(**_alert(starts_at="10:40 today"))
    assert await ps.list_incidents() == []


async def test_change_events(store):
    ps = store.plugin_store
    e1 = await ps.record_change_event(kind="persona", subject="specialist-disk", actor="alice", detail={"op": "replace"})
    e2 = await ps.record_change_event(kind="plugin", subject="ongrid_demo", actor="bob", detail={"op": "install", "v": "1.0"})
    assert set(e1) == {"id", "kind", "subject", "actor", "detail", "created_at", "occurred_at", "recorded_by"}
    assert e1["detail"] == {"op": "replace"} and e1["created_at"].endswith("Z")
    assert e1["occurred_at"] == e1["created_at"] and e1["recorded_by"] is None
    assert [e["id"] for e in await ps.list_change_events()] == [e2["id"], e1["id"]]
    assert [e["id"] for e in await ps.list_change_events(kind="persona")] == [e1["id"]]
    assert [e["id"] for e in await ps.list_change_events(since=e2["created_at"])] == [e2["id"]]
    assert [e["id"] for e in await ps.list_change_events(until=e2["created_at"])] == [e1["id"]]
    assert [e["id"] for e in await ps.list_change_events(limit=1)] == [e2["id"]]
    # a change made outside Ongrid: its own time, who reported it; filtered by subject and occurred_at
    e3 = await ps.record_change_event(kind="deploy", subject="checkout", actor="ci", detail={"v": "1.4.2"},
                                      occurred_at="2020-01-02T03:04:05Z", recorded_by="ci-bot")
    assert e3["occurred_at"] == "2020-01-02T03:04:05.000000Z" and e3["recorded_by"] == "ci-bot"
    assert [e["id"] for e in await ps.list_change_events()] == [e2["id"], e1["id"], e3["id"]]
    assert [e["id"] for e in await ps.list_change_events(subject="checkout")] == [e3["id"]]
    assert [e["id"] for e in await ps.list_change_events(subject="checkout", since="2020-01-02T03:04:06Z")] == []
    assert [e["id"] for e in await ps.list_change_events(until="2021-01-01T00:00:00Z")] == [e3["id"]]
    with pytest.raises(ValueError, match="detail"):
        await ps.record_change_event(kind="x", subject="s", actor="a", detail="text")
    with pytest.raises(ValueError, match="kind"):
        await ps.record_change_event(kind="", subject="s", actor="a", detail={})


async def test_a_held_secret_is_redacted_in_change_events_and_incidents(store):
    """What a caller reports (a change's subject, actor and detail; an alert's labels and annotations)
    is stored like every text column: a secret the daemon holds is redacted, at any depth."""
    from ongridd.secretset import REDACTED, REGISTRY

    ps = store.plugin_store
    secret = "sk-held-change-secret-7781"
    with REGISTRY.hold([secret]):
        event = await ps.record_change_event(kind="deploy", subject=f"svc-{secret}", actor=f"ci {secret}",
                                             detail={"k": secret, "nested": [{"v": f'q"{secret}'}], secret: 1},
                                             recorded_by=f"bot-{secret}")
        incident = await ps.upsert_incident(**_alert(labels={"alertname": "X", "token": secret},
                                                     annotations={"summary": f"leaked {secret}"}))
    stored = [*await ps.list_change_events(), *await ps.list_incidents()]
    for got in (event, incident, *stored):
        assert secret not in repr(got), got
    assert event["subject"] == f"svc-{REDACTED}" and event["detail"]["nested"] == [{"v": f'q"{REDACTED}'}]
    assert event["detail"][REDACTED] == 1 and incident["labels"]["token"] == REDACTED


async def test_a_held_secret_in_a_thread_name_is_not_stored(store):
    from ongridd.secretset import REDACTED, REGISTRY

    secret = "sk-held-thread-secret-9902"
    with REGISTRY.hold([secret]):
        row, created = await store.get_or_create_coordinator("alice", f"thr-{secret}")
        again, created_again = await store.get_or_create_coordinator("alice", f"thr-{secret}")
    assert created and not created_again and again["id"] == row["id"]
    assert row["thread_id"] == f"thr-{REDACTED}"
    (listed,) = await store.list_threads("alice", limit=10)
    assert listed["thread"] == f"thr-{REDACTED}"
