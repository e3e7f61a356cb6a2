"""Hostile webhook bodies get a 400 with a clear message, never a 500, and
never an echo of the whole payload (breaker findings)."""

from __future__ import annotations

import json

from ongrid_incidents.webhook import MAX_MESSAGE_CHARS, WebhookError, parse_notification

from tests.incidents.test_incidents_store import payload, post


def alert(**kw) -> dict:
    a = {"status": "firing", "labels": {"alertname": "X", "severity": "critical"}, "startsAt": "2024-05-01T10:00:00Z"}
    a.update(kw)
    return a


async def test_lone_surrogate_is_a_400_naming_the_place(plugin):
    body = json.loads('{"version":"4","status":"firing","alerts":[{"status":"firing","labels":{"alertname":"\\ud800"}}]}')
    resp = await post(plugin, body)
    assert resp.status == 400
    assert "payload.alerts[0].labels.alertname: lone UTF-16 surrogate U+D800" in resp.body["error"]["message"]
    json.dumps(resp.body).encode("utf-8")  # the answer itself is valid UTF-8


async def test_time_overflowing_utc_is_a_400(plugin):
    for when in ("9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+01:00"):
        resp = await post(plugin, payload(alert(startsAt=when)))
        assert resp.status == 400, when
        assert "payload.alerts[0].startsAt: time" in resp.body["error"]["message"] and "out of range" in resp.body["error"]["message"]


async def test_nul_in_labels_and_annotations_is_stored_as_replacement_char(plugin):
    resp = await post(plugin, payload(alert(labels={"alertname": "a\x00b", "k\x00": "v"},
                                            annotations={"summary": "x\x00y"})))
    assert resp.status == 200, resp.body
    assert resp.body["incidents"][0]["alertname"] == "a\ufffdb"
    note = parse_notification(payload(alert(labels={"alertname": "a\x00b"}, annotations={"s": "\x00"})))
    record = note.alerts[0]
    assert "\x00" not in json.dumps(record.labels, ensure_ascii=False) + json.dumps(record.annotations)
    assert record.labels == {"alertname": "a\ufffdb"} and record.annotations == {"s": "\ufffd"}


async def test_too_many_alerts_error_does_not_echo_the_payload(plugin):
    resp = await post(plugin, payload(*[alert()] * 1001))
    assert resp.status == 400
    message = resp.body["error"]["message"]
    assert "payload.alerts:" in message and "more characters" in message
    assert len(message) < MAX_MESSAGE_CHARS + 200


async def test_huge_label_of_the_wrong_type_is_not_echoed(plugin):
    resp = await post(plugin, payload(alert(labels={"alertname": ["y" * 1_000_000]})))
    assert resp.status == 400 and len(resp.body["error"]["message"]) < MAX_MESSAGE_CHARS + 200


def test_deeply_nested_known_field_is_a_clear_error():
    deep: object = "x"
    for _ in range(5000):
        deep = [deep]
    try:
        parse_notification({"version": "4", "status": "firing", "alerts": [], "groupLabels": deep})
    except WebhookError as exc:
        assert "payload.groupLabels" in str(exc) or "nested too deep" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("accepted a nested list as groupLabels")
