"""Alertmanager's webhook payload (version 4): validated and turned into alert records.

Alertmanager POSTs JSON like::

    {"version": "4", "status": "firing", "receiver": "ongrid", "groupKey": "...",
     "groupLabels": {...}, "commonLabels": {...}, "commonAnnotations": {...},
     "externalURL": "http://am:9093", "truncatedAlerts": 0,
     "alerts": [{"status": "firing", "labels": {"alertname": "DiskFull", "severity": "critical"},
                 "annotations": {...}, "startsAt": "2024-05-01T10:00:00.123456789Z",
                 "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "...", "fingerprint": "c4b7..."}]}

Validation uses a JSON schema (jsonschema); every problem is reported with
its place in the payload (``alerts[0].status: 'burning' is not one of ...``).
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import Any

import attrs
import jsonschema

MAX_ALERTS = 1000
MAX_ERRORS_SHOWN = 5
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}

ALERT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["status", "labels"],
    "properties": {
        "status": {"enum": ["firing", "resolved"]},
        "labels": _LABELS,
        "annotations": _LABELS,
        "startsAt": {"type": "string"},
        "endsAt": {"type": "string"},
        "generatorURL": {"type": "string"},
        "fingerprint": {"type": "string"},
    },
}

PAYLOAD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["version", "status", "alerts"],
    "properties": {
        "version": {"const": "4"},
        "status": {"enum": ["firing", "resolved"]},
        "receiver": {"type": "string"},
        "groupKey": {"type": "string"},
        "truncatedAlerts": {"type": "integer", "minimum": 0},
        "groupLabels": _LABELS,
        "commonLabels": _LABELS,
        "commonAnnotations": _LABELS,
        "externalURL": {"type": "string"},
        "alerts": {"type": "array", "items": ALERT_SCHEMA, "maxItems": MAX_ALERTS},
    },
}

_VALIDATOR = jsonschema.Draft202012Validator(PAYLOAD_SCHEMA)
_FRACTION_RE = re.compile(r"\.(\d+)")
#: Go's zero time, which Alertmanager sends as endsAt of a firing alert
_GO_ZERO_YEAR = 1


class WebhookError(ValueError):
    """The payload is not an Alertmanager webhook (version 4); the message says where."""


@attrs.frozen(kw_only=True)
class AlertRecord:
    """One alert of a notification, ready for ``PluginStore.upsert_incident``.

    Times are ISO 8601 UTC strings with a ``Z`` (``None`` for Go's zero time).
    ``severity``: ``labels.severity`` lower-cased, or ``None``.
    """

    fingerprint: str
    alertname: str
    status: str
    severity: str | None
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: str | None
    ends_at: str | None


@attrs.frozen(kw_only=True)
class Notification:
    """A validated webhook call: its ``receiver``, ``group_key`` and ``alerts``."""

    receiver: str
    group_key: str
    status: str
    alerts: tuple[AlertRecord, ...]
    truncated_alerts: int = 0


def _where(path: Any) -> str:
    out = "payload"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _time(value: str | None, where: str) -> str | None:
    if value is None or value == "":
        return None
    text = value.strip()
    iso = text[:-1] + "+00:00" if text[-1:] in "zZ" else text
    iso = _FRACTION_RE.sub(lambda m: "." + m.group(1)[:6], iso, count=1)  # Go writes nanoseconds
    try:
        parsed = datetime.fromisoformat(iso)
    except ValueError:
        raise WebhookError(f"{where}: not an RFC 3339 time: {value!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    parsed = parsed.astimezone(UTC)
    if parsed.year <= _GO_ZERO_YEAR:
        return None
    return parsed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def labels_fingerprint(labels: dict[str, str]) -> str:
    """A stable 16-hex fingerprint of a label set, for alerts sent without one."""
    text = "\xff".join(f"{k}\xfe{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def parse_notification(payload: Any) -> Notification:
    """Validate an Alertmanager webhook body and return its alerts.

    Raises WebhookError listing up to five problems, each with its place
    (``payload.alerts[2].labels.severity: 3 is not of type 'string'``).
    """
    if payload is None:
        raise WebhookError("the body is empty or not JSON; expected Alertmanager's webhook payload (version 4)")
    errors = sorted(_VALIDATOR.iter_errors(payload), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        shown = [f"{_where(e.absolute_path)}: {e.message}" for e in errors[:MAX_ERRORS_SHOWN]]
        more = f" (and {len(errors) - MAX_ERRORS_SHOWN} more)" if len(errors) > MAX_ERRORS_SHOWN else ""
        raise WebhookError("not an Alertmanager webhook payload (version 4): " + "; ".join(shown) + more)
    alerts = []
    for i, alert in enumerate(payload["alerts"]):
        labels = dict(alert["labels"])
        where = f"payload.alerts[{i}]"
        severity = (labels.get("severity") or "").strip().lower() or None
        alerts.append(AlertRecord(
            fingerprint=alert.get("fingerprint") or labels_fingerprint(labels),
            alertname=labels.get("alertname") or "unnamed",
            status=alert["status"],
            severity=severity,
            labels=labels,
            annotations=dict(alert.get("annotations") or {}),
            starts_at=_time(alert.get("startsAt"), f"{where}.startsAt"),
            ends_at=_time(alert.get("endsAt"), f"{where}.endsAt") if alert["status"] == "resolved" else None,
        ))
    return Notification(receiver=payload.get("receiver", ""), group_key=payload.get("groupKey", ""),
                        status=payload["status"], alerts=tuple(alerts),
                        truncated_alerts=payload.get("truncatedAlerts", 0))
