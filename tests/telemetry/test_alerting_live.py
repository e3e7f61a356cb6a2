"""query_alert_rules against a real Prometheus, and a real Alertmanager
delivering to the incidents plugin's webhook route (real Store, SQLite)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx2
import pytest
import trio

from ongridd.errors import ToolError
from ongridd.plugins.api import ToolCallContext

pytestmark = pytest.mark.prometheus  # needs Debian's prometheus, node exporter and alertmanager

CTX = ToolCallContext(session_id="00000000-0000-0000-0000-000000000003", agent="incident-investigator",
                      user_id="alice")
DEADLINE_S = 60.0

ALWAYS_FIRING = """\
groups:
  - name: ongrid-e2e
    interval: 1s
    rules:
      - alert: OngridE2EFiresAtOnce
        expr: vector(1) > 0
        for: 0s
        labels: {severity: critical, service: checkout}
        annotations: {summary: "fires at once, for the end-to-end test"}
"""


async def test_query_alert_rules_reads_the_rules_file(prometheus, make_incidents_plugin):
    tools, _ = make_incidents_plugin(None, prometheus.url)
    rules_tool = tools["query_alert_rules"]
    with trio.fail_after(DEADLINE_S):
        while True:
            result = await rules_tool.handler({"state": "firing"}, CTX)
            if result["rules"]:
                break
            await trio.sleep(0.25)  # rules are evaluated every second
    (firing,) = result["rules"]
    assert firing["name"] == "OngridTestAlwaysFiring"
    assert firing["query"] == "vector(1) > 0"
    assert firing["labels"] == {"severity": "warning", "team": "ops"}
    assert firing["annotations"] == {"summary": "always firing, for tests"}
    assert firing["group"] == "ongrid-test" and firing["file"].endswith("rules.yml")
    assert firing["active_alerts"] == 1 and firing["alerts"][0]["state"] == "firing"
    assert firing["health"] == "ok"

    inactive = await rules_tool.handler({"state": "inactive"}, CTX)
    assert [(r["name"], r["for_s"]) for r in inactive["rules"]] == [("OngridTestNeverFires", 300)]

    everything = await rules_tool.handler({"state": None}, CTX)
    assert sorted(r["name"] for r in everything["rules"]) == ["OngridTestAlwaysFiring", "OngridTestNeverFires"]
    assert everything["count"] == 2  # the recording rule is not an alerting rule

    with pytest.raises(ToolError, match="'state' must be one of firing, pending, inactive"):
        await rules_tool.handler({"state": "on"}, CTX)


async def test_query_alert_rules_unreachable_prometheus(make_incidents_plugin):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tools, _ = make_incidents_plugin(None, f"http://127.0.0.1:{port}")
    with pytest.raises(ToolError, match=f"cannot reach Prometheus at http://127.0.0.1:{port}"):
        await tools["query_alert_rules"].handler({}, CTX)


async def _incident(sink, alertname: str) -> dict | None:
    rows = await sink.store.plugin_store.list_incidents(alertname=alertname)
    return rows[0] if rows else None


async def test_a_prometheus_rule_firing_at_once_reaches_the_webhook_as_an_incident(
        alert_sink, start_alertmanager, start_prometheus):
    alertmanager = await trio.to_thread.run_sync(start_alertmanager, alert_sink.webhook_url)
    prometheus = await trio.to_thread.run_sync(
        lambda: start_prometheus(rules=ALWAYS_FIRING, alertmanagers=[f"127.0.0.1:{alertmanager.port}"]))
    try:
        async def stored() -> bool:
            return await _incident(alert_sink, "OngridE2EFiresAtOnce") is not None

        with trio.fail_after(DEADLINE_S):
            await alert_sink.wait_until(stored)
    finally:
        await trio.to_thread.run_sync(prometheus.stop)

    incident = await _incident(alert_sink, "OngridE2EFiresAtOnce")
    assert incident["status"] == "firing"
    assert incident["severity"] == "critical"
    assert incident["labels"]["service"] == "checkout"
    assert incident["annotations"]["summary"] == "fires at once, for the end-to-end test"
    assert len(incident["fingerprint"]) == 16  # Alertmanager's own fingerprint
    body, response = alert_sink.deliveries[0]
    assert body["version"] == "4" and body["receiver"] == "ongrid"
    assert response.status == 200
    active = await alert_sink.tools["get_active_incidents"].handler({"severity": "critical"}, CTX)
    assert [i["alertname"] for i in active["incidents"]] == ["OngridE2EFiresAtOnce"]
    events = await alert_sink.store.plugin_store.list_change_events(kind="incident")
    assert [e["subject"] for e in events] == [incident["id"]]


def _rfc3339(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def test_alertmanager_firing_then_resolved_with_an_ack_in_between(alert_sink, start_alertmanager):
    alertmanager = await trio.to_thread.run_sync(start_alertmanager, alert_sink.webhook_url)
    labels = {"alertname": "OngridApiDiskFull", "severity": "warning", "instance": "web-1:9100",
              "mountpoint": "/var"}
    started = datetime.now(UTC) - timedelta(seconds=5)
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.post(f"{alertmanager.url}/api/v2/alerts", json=[
            {"labels": labels, "annotations": {"summary": "/var is 97% full"}, "startsAt": _rfc3339(started)}])
        assert response.status_code == 200, response.text

        async def firing() -> bool:
            found = await _incident(alert_sink, "OngridApiDiskFull")
            return found is not None and found["status"] == "firing"

        with trio.fail_after(DEADLINE_S):
            await alert_sink.wait_until(firing)
        incident = await _incident(alert_sink, "OngridApiDiskFull")
        assert incident["starts_at"] == _rfc3339(started)

        ack = await alert_sink.tools["ack_incident"].handler(
            {"incident_id": incident["id"], "reason": "disk runbook: rotating logs on web-1"}, CTX)
        assert ack["status"] == "acknowledged"
        assert (await alert_sink.store.plugin_store.get_incident(incident["id"]))["status"] == "acknowledged"

        ended = datetime.now(UTC)
        response = await http.post(f"{alertmanager.url}/api/v2/alerts", json=[
            {"labels": labels, "annotations": {"summary": "/var is 97% full"}, "startsAt": _rfc3339(started),
             "endsAt": _rfc3339(ended)}])
        assert response.status_code == 200, response.text

    async def resolved() -> bool:
        found = await alert_sink.store.plugin_store.get_incident(incident["id"])
        return found["status"] == "resolved"

    with trio.fail_after(DEADLINE_S):
        await alert_sink.wait_until(resolved)
    final = await alert_sink.store.plugin_store.get_incident(incident["id"])
    assert final["ends_at"] is not None
    assert final["fingerprint"] == incident["fingerprint"]
    history = await alert_sink.tools["get_incident_detail"].handler({"incident_id": incident["id"]}, CTX)
    assert [(e["actor"], e["detail"]["status"]) for e in history["timeline"]] == [
        ("alertmanager", "firing"), ("alice", "acknowledged"), ("alertmanager", "resolved")]
    assert all(r.status == 200 for _, r in alert_sink.deliveries)
    await trio.to_thread.run_sync(alertmanager.stop)
