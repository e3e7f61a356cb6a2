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
#: longest part of a validation message echoed back (jsonschema quotes the
#: whole offending value: 1001 alerts, a 3 MB label)
MAX_MESSAGE_CHARS = 200
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
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
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
        raise WebhookError(f"{where}: not an RFC 3339 time: {_short(repr(value), 80)}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        parsed = parsed.astimezone(UTC)
    except OverflowError:
        raise WebhookError(f"{where}: time {_short(repr(value), 80)} is out of range in UTC "
                           "(years 1 to 9999)") from None
    if parsed.year <= _GO_ZERO_YEAR:
        return None
    return parsed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _short(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more characters)"


def _check_text(value: Any, where: str, depth: int = 0) -> None:
    """Refuse lone UTF-16 surrogates (``"\\ud800"`` decodes to one; it cannot
    be stored or encoded as UTF-8) anywhere in the decoded body."""
    if depth > 64:
        raise WebhookError(f"{where}: nested more than 64 levels deep")
    if isinstance(value, str):
        bad = _SURROGATE_RE.search(value)
        if bad:
            raise WebhookError(f"{where}: lone UTF-16 surrogate U+{ord(bad.group()):04X} at character "
                               f"{bad.start()}; the text is not valid Unicode")
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_text(k, f"{where} (a key)", depth + 1)
            _check_text(v, f"{where}.{_short(str(k), 40)}", depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_text(v, f"{where}[{i}]", depth + 1)


def _no_nul(mapping: dict[str, str]) -> dict[str, str]:
    """Keys and values with NUL replaced by U+FFFD (PostgreSQL text and jsonb cannot hold NUL)."""
    return {k.replace("\x00", "\ufffd"): v.replace("\x00", "\ufffd") for k, v in mapping.items()}


def labels_fingerprint(labels: dict[str, str]) -> str:
    """A stable 16-hex fingerprint of a label set, for alerts sent without one."""
    text = "\xff".join(f"{k}\xfe{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def parse_notification(payload: Any) -> Notification:
    """Validate an Alertmanager webhook body and return its alerts.

    Raises WebhookError listing up to five problems, each with its place
    (``payload.alerts[2].labels.severity: 3 is not of type 'string'``),
    each cut to ``MAX_MESSAGE_CHARS``; also for lone surrogates, bodies
    nested too deep and times out of range.  NUL characters in labels and
    annotations become U+FFFD.
    """
    if payload is None:
        raise WebhookError("the body is empty or not JSON; expected Alertmanager's webhook payload (version 4)")
    try:
        errors = sorted(_VALIDATOR.iter_errors(payload), key=lambda e: list(map(str, e.absolute_path)))
    except RecursionError:
        raise WebhookError("payload: nested too deep to be an Alertmanager webhook payload") from None
    if errors:
        shown = [f"{_where(e.absolute_path)}: {_short(e.message)}" for e in errors[:MAX_ERRORS_SHOWN]]
        more = f" (and {len(errors) - MAX_ERRORS_SHOWN} more)" if len(errors) > MAX_ERRORS_SHOWN else ""
        raise WebhookError("not an Alertmanager webhook payload (version 4): " + "; ".join(shown) + more)
    _check_text({k: payload[k] for k in PAYLOAD_SCHEMA["properties"] if k in payload}, "payload")
    alerts = []
    for i, alert in enumerate(payload["alerts"]):
        labels = _no_nul(alert["labels"])
        where = f"payload.alerts[{i}]"
        severity = (labels.get("severity") or "").strip().lower() or None
        alerts.append(AlertRecord(
            fingerprint=(alert.get("fingerprint") or labels_fingerprint(labels)).replace("\x00", "\ufffd"),
            alertname=labels.get("alertname") or "unnamed",
            status=alert["status"],
            severity=severity,
            labels=labels,
            annotations=_no_nul(alert.get("annotations") or {}),
            starts_at=_time(alert.get("startsAt"), f"{where}.startsAt"),
            ends_at=_time(alert.get("endsAt"), f"{where}.endsAt") if alert["status"] == "resolved" else None,
        ))
    return Notification(receiver=payload.get("receiver", "").replace("\x00", "\ufffd"),
                        group_key=payload.get("groupKey", "").replace("\x00", "\ufffd"),
                        status=payload["status"], alerts=tuple(alerts),
                        truncated_alerts=payload.get("truncatedAlerts", 0))
