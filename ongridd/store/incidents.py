"""The plugin store (``PluginStore`` in ongridd/plugins/api.py): incidents and change events.

Incidents are keyed by the alert ``fingerprint`` (upsert).  Status rule: an
``acknowledged`` incident stays acknowledged when the same alert fires again,
and becomes ``resolved`` when it resolves; otherwise the incoming status wins.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ongridd.store.engine import Database, is_unique_violation, read_tx, write_tx
from ongridd.store.rows import (
    INCIDENT_STATUSES,
    check_choice,
    check_text,
    clean_text,
    new_id,
    parse_time,
    row_dict,
    utcnow,
)
from ongridd.store.schema import change_events, incidents

INCIDENT_TIME_KEYS = ("starts_at", "ends_at", "created_at", "updated_at")
MAX_LIST_LIMIT = 1000


def _json_mapping(value: Any, field: str) -> dict[str, Any]:
    """``value`` as a JSON object to store: string keys, every held secret
    redacted (in keys and values, at any depth: :func:`clean_text` of its JSON
    text); ValueError naming ``field`` when it is not a JSON-serialisable
    mapping."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{field}: expected a mapping, got {type(value).__name__}")
    out = {str(k): v for k, v in value.items()}
    try:
        text = json.dumps(out, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{field}: not JSON-serialisable: {exc}") from None
    cleaned = clean_text(text)
    if cleaned == text:
        return out
    try:  # a redaction replaces text inside string literals with plain text: still the same JSON shape
        redacted = json.loads(cleaned)
    except ValueError:
        redacted = None
    if not isinstance(redacted, dict):  # a secret that spans JSON syntax: refuse rather than store it
        raise ValueError(f"{field}: holds a secret the daemon keeps, in a form that cannot be redacted")
    return redacted


def _text(value: Any, field: str, *, optional: bool = False) -> str | None:
    """:func:`check_text`, then stored with every held secret redacted (:func:`clean_text`)."""
    return clean_text(check_text(value, field, optional=optional))


def _limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit: expected a positive integer, got {limit!r}")
    return min(limit, MAX_LIST_LIMIT)


def merged_status(current: str | None, incoming: str) -> str:
    """The status an upsert leaves: acknowledged survives a repeated ``firing``."""
    if current == "acknowledged" and incoming == "firing":
        return "acknowledged"
    return incoming


def _upsert(engine: Engine, values: dict[str, Any]) -> dict[str, Any]:
    fp = values["fingerprint"]
    for _attempt in range(3):
        try:
            with write_tx(engine) as conn:
                row = conn.execute(
                    sa.select(incidents).where(incidents.c.fingerprint == fp).with_for_update()
                ).first()
                now = utcnow()
                if row is None:
                    iid = new_id()
                    conn.execute(sa.insert(incidents).values(id=iid, created_at=now, updated_at=now, **values))
                else:
                    iid = row.id
                    update = dict(values)
                    update["status"] = merged_status(row.status, values["status"])
                    if update["starts_at"] is None:
                        update["starts_at"] = row.starts_at
                    conn.execute(sa.update(incidents).where(incidents.c.id == iid).values(updated_at=now, **update))
                got = conn.execute(sa.select(incidents).where(incidents.c.id == iid)).first()
                return row_dict(got, INCIDENT_TIME_KEYS)
        except sa.exc.IntegrityError as exc:
            if not is_unique_violation(exc):
                raise
    raise sa.exc.InvalidRequestError(f"incident with fingerprint {fp!r} kept changing under the upsert")


def _list_incidents(engine: Engine, filters: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    when = sa.func.coalesce(incidents.c.starts_at, incidents.c.updated_at)
    q = sa.select(incidents)
    if filters["status"] is not None:
        q = q.where(incidents.c.status == filters["status"])
    if filters["severity"] is not None:
        q = q.where(incidents.c.severity == filters["severity"])
    if filters["alertname"] is not None:
        q = q.where(incidents.c.alertname == filters["alertname"])
    if filters["since"] is not None:
        q = q.where(sa.or_(when >= filters["since"], incidents.c.updated_at >= filters["since"]))
    q = q.order_by(when.desc(), incidents.c.id).limit(limit)
    with read_tx(engine) as conn:
        return [row_dict(r, INCIDENT_TIME_KEYS) for r in conn.execute(q).all()]


def _get_incident(engine: Engine, incident_id: str) -> dict[str, Any] | None:
    with read_tx(engine) as conn:
        row = conn.execute(sa.select(incidents).where(incidents.c.id == incident_id)).first()
    return row_dict(row, INCIDENT_TIME_KEYS) if row is not None else None


def _set_status(engine: Engine, incident_id: str, status: str) -> dict[str, Any] | None:
    with write_tx(engine) as conn:
        row = conn.execute(sa.select(incidents).where(incidents.c.id == incident_id).with_for_update()).first()
        if row is None:
            return None
        now = utcnow()
        values: dict[str, Any] = {"status": status, "updated_at": now}
        if status == "resolved" and row.ends_at is None:
            values["ends_at"] = now
        conn.execute(sa.update(incidents).where(incidents.c.id == incident_id).values(**values))
        got = conn.execute(sa.select(incidents).where(incidents.c.id == incident_id)).first()
        return row_dict(got, INCIDENT_TIME_KEYS)


CHANGE_TIME_KEYS = ("created_at", "occurred_at")


def _record_change(engine: Engine, values: dict[str, Any]) -> dict[str, Any]:
    now = utcnow()
    values = {"id": new_id(), "created_at": now, **values}
    values["occurred_at"] = values.get("occurred_at") or now
    with write_tx(engine) as conn:
        conn.execute(sa.insert(change_events).values(**values))
        got = conn.execute(sa.select(change_events).where(change_events.c.id == values["id"])).first()
    return row_dict(got, CHANGE_TIME_KEYS)


def _list_changes(
    engine: Engine, kind: str | None, since: datetime | None, until: datetime | None, limit: int,
    subject: str | None = None,
) -> list[dict[str, Any]]:
    q = sa.select(change_events)
    if kind is not None:
        q = q.where(change_events.c.kind == kind)
    if subject is not None:
        q = q.where(change_events.c.subject == subject)
    if since is not None:
        q = q.where(change_events.c.occurred_at >= since)
    if until is not None:
        q = q.where(change_events.c.occurred_at < until)
    q = q.order_by(change_events.c.occurred_at.desc(), change_events.c.id).limit(limit)
    with read_tx(engine) as conn:
        return [row_dict(r, CHANGE_TIME_KEYS) for r in conn.execute(q).all()]


class PluginStoreImpl:
    """The narrow store plugins get: exactly the ``PluginStore`` protocol methods.

    Every method is async (the database call runs in a worker thread; see
    :class:`ongridd.store.engine.Database` for cancellation), raises
    ValueError naming the argument for bad input and
    :class:`ongridd.errors.StoreError` when the database fails.  Times in and
    out are ISO 8601 strings (out: UTC with ``Z``).
    """

    __slots__ = ("_db",)

    def __init__(self, db: Database):
        self._db = db

    async def upsert_incident(
        self,
        *,
        fingerprint: str,
        alertname: str,
        status: str,
        severity: str | None,
        labels: Mapping[str, Any],
        annotations: Mapping[str, Any],
        starts_at: str | None,
        ends_at: str | None,
    ) -> dict[str, Any]:
        """Insert or update the incident with this ``fingerprint``; returns the incident dict."""
        values = {
            "fingerprint": _text(fingerprint, "fingerprint"),
            "alertname": _text(alertname, "alertname"),
            "status": check_choice(status, INCIDENT_STATUSES, "status"),
            "severity": _text(severity, "severity", optional=True),
            "labels": _json_mapping(labels, "labels"),
            "annotations": _json_mapping(annotations, "annotations"),
            "starts_at": parse_time(starts_at, "starts_at"),
            "ends_at": parse_time(ends_at, "ends_at"),
        }
        return await self._db.run("upsert incident", _upsert, values)

    async def list_incidents(
        self,
        *,
        status: str | None = None,
        severity: str | None = None,
        since: str | None = None,
        alertname: str | None = None,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        """Incidents newest first (by ``starts_at``, else ``updated_at``).

        ``since``: only incidents that started, or changed, at or after this time.
        ``limit``: 1..1000 (larger values are capped at 1000).
        """
        filters = {
            "status": check_choice(status, INCIDENT_STATUSES, "status") if status is not None else None,
            "severity": severity,
            "alertname": alertname,
            "since": parse_time(since, "since"),
        }
        return await self._db.run_read("list incidents", _list_incidents, filters, _limit(limit))

    async def get_incident(self, incident_id: str) -> dict[str, Any] | None:
        """The incident dict, or None when there is no such id."""
        return await self._db.run_read("get incident", _get_incident, incident_id)

    async def set_incident_status(self, incident_id: str, status: str) -> dict[str, Any] | None:
        """Set the status (``resolved`` also sets ``ends_at`` if unset); None when no such id."""
        check_choice(status, INCIDENT_STATUSES, "status")
        return await self._db.run("set incident status", _set_status, incident_id, status)

    async def record_change_event(self, *, kind: str, subject: str, actor: str, detail: Mapping[str, Any],
                                  occurred_at: str | None = None, recorded_by: str | None = None) -> dict[str, Any]:
        """Record a change; returns ``{id, kind, subject, actor, detail,
        created_at, occurred_at, recorded_by}``.  ``occurred_at``: ISO 8601
        (default now); ``recorded_by``: the caller who reported a change made
        outside Ongrid (None for Ongrid's own)."""
        values: dict[str, Any] = {
            "kind": _text(kind, "kind"),
            "subject": _text(subject, "subject"),
            "actor": _text(actor, "actor"),
            "detail": _json_mapping(detail, "detail"),
            "occurred_at": parse_time(occurred_at, "occurred_at"),
            "recorded_by": _text(recorded_by, "recorded_by", optional=True),
        }
        if len(values["kind"]) > 64:
            raise ValueError(f"kind: at most 64 characters, got {len(values['kind'])}")
        return await self._db.run("record change event", _record_change, values)

    async def list_change_events(
        self, *, kind: str | None = None, since: str | None = None, until: str | None = None, limit: int = 50,
        subject: str | None = None,
    ) -> list[dict[str, Any]]:
        """Change events newest first by ``occurred_at``; ``since`` inclusive,
        ``until`` exclusive; ``subject`` exact; ``limit`` 1..1000."""
        return await self._db.run_read(
            "list change events",
            _list_changes,
            kind,
            parse_time(since, "since"),
            parse_time(until, "until"),
            _limit(limit),
            check_text(subject, "subject", optional=True),
        )
