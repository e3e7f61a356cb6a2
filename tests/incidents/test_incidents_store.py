"""The Alertmanager route and the incident tools on a real Store (SQLite file)."""

from __future__ import annotations

import pytest
from ongrid_incidents.route import make_alertmanager_handler

from ongridd.config import HostConfig
from ongridd.errors import ToolError
from ongridd.plugins.api import PluginRequest, PluginResponse, ToolCallContext
from ongridd.tools.registry import validate_tool

CTX = ToolCallContext(session_id="11111111-2222-3333-4444-555555555555", agent="specialist-sre", user_id="alice")


def alert(name: str, fingerprint: str, *, status: str = "firing", severity: str | None = "critical",
          starts: str = "2024-05-01T10:00:00Z", ends: str = "0001-01-01T00:00:00Z", **labels: str) -> dict:
    all_labels = {"alertname": name, "instance": "web-1:9100", **labels}
    if severity is not None:
        all_labels["severity"] = severity
    return {"status": status, "labels": all_labels, "annotations": {"summary": f"{name} on web-1"},
            "startsAt": starts, "endsAt": ends, "generatorURL": "http://prom/graph", "fingerprint": fingerprint}


def payload(*alerts: dict) -> dict:
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    return {"version": "4", "status": status, "receiver": "ongrid", "groupKey": "{}:{}", "truncatedAlerts": 0,
            "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://am:9093",
            "alerts": list(alerts)}


def request(body: object) -> PluginRequest:
    return PluginRequest(method="POST", path="/api/alerts/alertmanager", headers={"content-type": "application/json"},
                         query={}, json=body, user="alertmanager")


async def post(plugin, body: object) -> PluginResponse:
    return await plugin.webhook(request(body))


async def test_every_tool_passes_the_registry_rules(plugin):
    assert sorted(plugin.tools) == ["ack_incident", "get_active_incidents", "get_incident_detail",
                                    "query_alert_rules", "query_change_events", "query_devices", "query_incidents"]
    for tool in plugin.tools.values():
        validate_tool(tool)
    assert plugin.tools["ack_incident"].tool_class == "write"
    assert plugin.tools["ack_incident"].parameters["required"] == ["incident_id", "reason"]
    assert all(t.tool_class == "read" for n, t in plugin.tools.items() if n != "ack_incident")


async def test_firing_then_resolved_alert_is_one_incident_with_change_events(plugin):
    response = await post(plugin, payload(alert("DiskFull", "fp-disk")))
    assert response.status == 200
    (stored,) = response.body["incidents"]
    assert stored["status"] == "firing"
    incident = await plugin.store.plugin_store.get_incident(stored["id"])
    assert incident["fingerprint"] == "fp-disk"
    assert incident["alertname"] == "DiskFull"
    assert incident["severity"] == "critical"
    assert incident["labels"]["instance"] == "web-1:9100"
    assert incident["starts_at"] == "2024-05-01T10:00:00.000000Z"
    assert incident["ends_at"] is None

    repeat = await post(plugin, payload(alert("DiskFull", "fp-disk")))  # Alertmanager's repeat
    assert repeat.body["incidents"][0]["id"] == stored["id"]

    resolved = await post(plugin, payload(alert("DiskFull", "fp-disk", status="resolved",
                                                ends="2024-05-01T10:20:00.000000001Z")))
    assert resolved.body["incidents"][0] == {"id": stored["id"], "fingerprint": "fp-disk", "alertname": "DiskFull",
                                             "status": "resolved"}
    incident = await plugin.store.plugin_store.get_incident(stored["id"])
    assert incident["status"] == "resolved"
    assert incident["ends_at"] == "2024-05-01T10:20:00.000000Z"

    events = await plugin.store.plugin_store.list_change_events(kind="incident")
    mine = [e for e in events if e["subject"] == stored["id"]]
    assert [(e["detail"]["previous_status"], e["detail"]["status"]) for e in reversed(mine)] == [
        (None, "firing"), ("firing", "resolved")]  # the repeat changed nothing and recorded nothing
    assert all(e["actor"] == "alertmanager" for e in mine)


async def test_bad_payload_is_a_400_with_the_reason_and_stores_nothing(plugin):
    response = await post(plugin, {"version": "4", "status": "firing", "alerts": [{"status": "firing"}]})
    assert response.status == 400
    assert "payload.alerts[0]: 'labels' is a required property" in response.body["error"]["message"]
    assert await plugin.store.plugin_store.list_incidents() == []
    response = await post(plugin, None)
    assert response.status == 400 and "not JSON" in response.body["error"]["message"]


async def test_without_a_store_the_route_answers_503():
    handler = make_alertmanager_handler(None)
    response = await handler(request(payload(alert("DiskFull", "fp"))))
    assert response.status == 503 and "no database" in response.body["error"]["message"]


async def test_active_and_filtered_incidents(plugin):
    await post(plugin, payload(alert("DiskFull", "fp-1", starts="2024-05-01T10:00:00Z"),
                               alert("NginxHigh5xx", "fp-2", severity="warning", starts="2024-05-01T11:00:00Z"),
                               alert("InodesLow", "fp-3", severity="warning", starts="2024-05-01T12:00:00Z")))
    await post(plugin, payload(alert("InodesLow", "fp-3", status="resolved", severity="warning",
                                     starts="2024-05-01T12:00:00Z", ends="2024-05-01T12:30:00Z")))
    tools = plugin.tools

    active = await tools["get_active_incidents"].handler({}, CTX)
    assert [i["alertname"] for i in active["incidents"]] == ["NginxHigh5xx", "DiskFull"]
    assert active["incidents"][0]["summary"] == "NginxHigh5xx on web-1"
    assert active["truncated"] is False

    warning = await tools["get_active_incidents"].handler({"severity": "warning", "limit": None}, CTX)
    assert [i["alertname"] for i in warning["incidents"]] == ["NginxHigh5xx"]

    one = await tools["get_active_incidents"].handler({"limit": 1}, CTX)
    assert one["count"] == 1 and one["truncated"] is True

    # since_minutes is about the incident's start or last change: all three changed just now
    resolved = await tools["query_incidents"].handler({"status": "resolved", "since_minutes": 60}, CTX)
    assert [i["alertname"] for i in resolved["incidents"]] == ["InodesLow"]
    by_name = await tools["query_incidents"].handler({"alertname": "DiskFull", "status": None, "severity": None}, CTX)
    assert [i["fingerprint"] for i in by_name["incidents"]] == ["fp-1"]

    with pytest.raises(ToolError, match="'status' must be one of firing, resolved, acknowledged, got 'open'"):
        await tools["query_incidents"].handler({"status": "open"}, CTX)
    with pytest.raises(ToolError, match="'limit' must be a whole number from 1 to 500"):
        await tools["query_incidents"].handler({"limit": 0}, CTX)


async def test_incident_detail_and_unknown_id(plugin):
    response = await post(plugin, payload(alert("DiskFull", "fp-1")))
    iid = response.body["incidents"][0]["id"]
    detail = await plugin.tools["get_incident_detail"].handler({"incident_id": iid}, CTX)
    assert detail["incident"]["id"] == iid
    assert detail["incident"]["annotations"] == {"summary": "DiskFull on web-1"}
    assert [e["detail"]["status"] for e in detail["timeline"]] == ["firing"]
    with pytest.raises(ToolError, match="no incident with id 'no-such-id'"):
        await plugin.tools["get_incident_detail"].handler({"incident_id": "no-such-id"}, CTX)


async def test_ack_incident_changes_the_stored_status_and_records_who_and_why(plugin):
    response = await post(plugin, payload(alert("NginxHigh5xx", "fp-nginx")))
    iid = response.body["incidents"][0]["id"]
    ack = plugin.tools["ack_incident"]

    proposal = ack.describe({"incident_id": iid, "reason": "restarting the upstream per SOP"})
    assert proposal.action == "acknowledge incident"
    assert proposal.target == f"incident {iid} (NginxHigh5xx)"
    assert proposal.blast_radius == "single_host"

    result = await ack.handler({"incident_id": iid, "reason": "restarting the upstream per SOP"}, CTX)
    assert result["status"] == "acknowledged"
    stored = await plugin.store.plugin_store.get_incident(iid)
    assert stored["status"] == "acknowledged"
    events = await plugin.tools["query_change_events"].handler({"kind": "incident"}, CTX)
    latest = events["events"][0]
    assert latest["subject"] == iid and latest["actor"] == "alice"
    assert latest["detail"]["reason"] == "restarting the upstream per SOP"
    assert latest["detail"]["previous_status"] == "firing"
    assert latest["detail"]["session_id"] == CTX.session_id
    assert latest["id"] == result["change_event_id"]

    again = await ack.handler({"incident_id": iid, "reason": "again"}, CTX)
    assert again["status"] == "unchanged"

    # Alertmanager repeats the firing alert: the acknowledgement stays
    await post(plugin, payload(alert("NginxHigh5xx", "fp-nginx")))
    assert (await plugin.store.plugin_store.get_incident(iid))["status"] == "acknowledged"
    active = await plugin.tools["get_active_incidents"].handler({}, CTX)
    assert [(i["id"], i["status"]) for i in active["incidents"]] == [(iid, "acknowledged")]

    # it resolves: acknowledging it now is refused and changes nothing
    await post(plugin, payload(alert("NginxHigh5xx", "fp-nginx", status="resolved", ends="2024-05-01T11:00:00Z")))
    with pytest.raises(ToolError, match="already resolved"):
        await ack.handler({"incident_id": iid, "reason": "late"}, CTX)
    assert (await plugin.store.plugin_store.get_incident(iid))["status"] == "resolved"


async def test_ack_of_an_unknown_incident_is_an_error(plugin):
    ack = plugin.tools["ack_incident"]
    assert ack.describe({"incident_id": "nope", "reason": "x"}).target == \
        "incident nope (alertname not known to Ongrid yet)"
    with pytest.raises(ToolError, match="no incident with id 'nope'; nothing was changed"):
        await ack.handler({"incident_id": "nope", "reason": "x"}, CTX)
    with pytest.raises(ToolError, match="'incident_id' and 'reason' are both required"):
        await ack.handler({"incident_id": "nope", "reason": None}, CTX)


async def test_query_change_events_filters_by_kind(plugin):
    await plugin.store.plugin_store.record_change_event(kind="persona", subject="specialist-disk", actor="bob",
                                                        detail={"action": "replace"})
    await post(plugin, payload(alert("DiskFull", "fp-1")))
    personas = await plugin.tools["query_change_events"].handler({"kind": "persona"}, CTX)
    assert [(e["subject"], e["actor"]) for e in personas["events"]] == [("specialist-disk", "bob")]
    everything = await plugin.tools["query_change_events"].handler({"since_minutes": 5}, CTX)
    assert {e["kind"] for e in everything["events"]} == {"persona", "incident"}


async def test_query_devices_lists_hosts_with_labels(store, make_plugin):
    hosts = (HostConfig(name="web-1", address="10.0.0.11", ssh_user="ops", labels={"role": "web", "env": "prod"}),
             HostConfig(name="db-1", address="10.0.0.21", labels={"role": "db", "env": "prod"}))
    tools, _ = make_plugin(store.plugin_store, hosts=hosts)
    devices = tools["query_devices"]
    everything = await devices.handler({}, CTX)
    assert [d["name"] for d in everything["devices"]] == ["local", "web-1", "db-1"]
    assert everything["devices"][0]["local"] is True
    assert everything["devices"][1] == {"name": "web-1", "address": "10.0.0.11", "local": False, "ssh_user": "ops",
                                        "labels": {"role": "web", "env": "prod"}}
    assert [d["name"] for d in (await devices.handler({"label": "role=db"}, CTX))["devices"]] == ["db-1"]
    assert [d["name"] for d in (await devices.handler({"label": "env"}, CTX))["devices"]] == ["web-1", "db-1"]
    assert (await devices.handler({"label": "role=cache"}, CTX))["devices"] == []
    assert [d["name"] for d in (await devices.handler({"label": None}, CTX))["devices"]] == ["local", "web-1", "db-1"]
    with pytest.raises(ToolError, match="'label' must be key=value or key"):
        await devices.handler({"label": "=web"}, CTX)


async def test_tools_without_a_store_say_so(make_plugin):
    tools, _ = make_plugin(None)
    with pytest.raises(ToolError, match="the incident store is not available"):
        await tools["get_active_incidents"].handler({}, CTX)
    # devices and alert rules do not need the database
    assert (await tools["query_devices"].handler({}, CTX))["count"] == 1
    with pytest.raises(ToolError, match="set prometheus.url"):
        await tools["query_alert_rules"].handler({}, CTX)
