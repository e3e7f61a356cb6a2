"""Parsing and validating Alertmanager's webhook payload (version 4)."""

from __future__ import annotations

import copy

import pytest
from ongrid_incidents.webhook import WebhookError, labels_fingerprint, parse_notification

PAYLOAD = {
    "receiver": "ongrid",
    "status": "firing",
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "NodeFilesystemAlmostOutOfSpace", "instance": "web-1:9100",
                       "mountpoint": "/var", "severity": "Critical"},
            "annotations": {"summary": "Filesystem /var on web-1 has less than 5% space left"},
            "startsAt": "2024-05-01T10:00:00.123456789Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph?g0.expr=...",
            "fingerprint": "1a2b3c4d5e6f7a8b",
        },
        {
            "status": "resolved",
            "labels": {"alertname": "NginxHigh5xxRate", "instance": "web-2"},
            "annotations": {},
            "startsAt": "2024-05-01T09:00:00+02:00",
            "endsAt": "2024-05-01T10:30:00.5Z",
            "generatorURL": "",
        },
    ],
    "groupLabels": {"alertname": "NodeFilesystemAlmostOutOfSpace"},
    "commonLabels": {},
    "commonAnnotations": {},
    "externalURL": "http://alertmanager:9093",
    "version": "4",
    "groupKey": "{}:{alertname=\"NodeFilesystemAlmostOutOfSpace\"}",
    "truncatedAlerts": 0,
}


def test_a_real_payload_becomes_alert_records():
    note = parse_notification(PAYLOAD)
    assert note.receiver == "ongrid" and note.status == "firing"
    first, second = note.alerts
    assert first.fingerprint == "1a2b3c4d5e6f7a8b"
    assert first.alertname == "NodeFilesystemAlmostOutOfSpace"
    assert first.status == "firing"
    assert first.severity == "critical"
    assert first.starts_at == "2024-05-01T10:00:00.123456Z"
    assert first.ends_at is None  # Go's zero time
    assert first.annotations["summary"].startswith("Filesystem /var")
    assert second.status == "resolved"
    assert second.severity is None
    assert second.starts_at == "2024-05-01T07:00:00.000000Z"
    assert second.ends_at == "2024-05-01T10:30:00.500000Z"
    assert second.fingerprint == labels_fingerprint(PAYLOAD["alerts"][1]["labels"])
    assert len(second.fingerprint) == 16


def test_fingerprint_of_labels_is_stable_and_order_free():
    assert labels_fingerprint({"a": "1", "b": "2"}) == labels_fingerprint({"b": "2", "a": "1"})
    assert labels_fingerprint({"a": "1"}) != labels_fingerprint({"a": "2"})


def _broken(change) -> dict:
    payload = copy.deepcopy(PAYLOAD)
    change(payload)
    return payload


@pytest.mark.parametrize(("change", "expected"), [
    (lambda p: p.update(version="3"), "payload.version: '4' was expected"),
    (lambda p: p.pop("alerts"), "payload: 'alerts' is a required property"),
    (lambda p: p["alerts"][0].update(status="burning"), "payload.alerts[0].status: 'burning' is not one of"),
    (lambda p: p["alerts"][1]["labels"].update(severity=3),
     "payload.alerts[1].labels.severity: 3 is not of type 'string'"),
    (lambda p: p["alerts"][0].pop("labels"), "payload.alerts[0]: 'labels' is a required property"),
    (lambda p: p.update(alerts={"not": "a list"}), "payload.alerts: {'not': 'a list'} is not of type 'array'"),
    (lambda p: p["alerts"][0].update(startsAt="yesterday"),
     "payload.alerts[0].startsAt: not an RFC 3339 time: 'yesterday'"),
])
def test_bad_payloads_name_the_place_of_the_problem(change, expected):
    with pytest.raises(WebhookError) as info:
        parse_notification(_broken(change))
    assert expected in str(info.value)


def test_not_an_object_and_empty_body():
    with pytest.raises(WebhookError, match="payload: \\[1, 2\\] is not of type 'object'"):
        parse_notification([1, 2])
    with pytest.raises(WebhookError, match="the body is empty or not JSON"):
        parse_notification(None)


def test_many_problems_are_listed_up_to_five():
    payload = _broken(lambda p: p.update(alerts=[{"status": "x", "labels": {}} for _ in range(7)]))
    with pytest.raises(WebhookError, match=r"\(and 2 more\)"):
        parse_notification(payload)
