"""``POST /api/alerts/alertmanager``: Alertmanager's webhook (version 4) → incidents.

Each alert is upserted as an incident by its fingerprint (firing or
resolved; the store keeps an acknowledged incident acknowledged while it
fires again).  A change event (kind ``incident``) is recorded when an
incident is new or its status changed — not for Alertmanager's repeats.

Answers: 200 ``{"status": "ok", "received": n, "incidents": [{id, fingerprint,
alertname, status}]}``; 400 ``{"error": {"code", "message"}}`` for a body that is not a
version 4 payload; 503 when the database is unavailable (Alertmanager retries
5xx answers).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ongrid_incidents.common import NAMES, IncidentNames
from ongrid_incidents.webhook import Notification, WebhookError, parse_notification
from ongridd.plugins.api import StoreError
from ongridd.plugins.api import get_logger
from ongridd.plugins.api import PluginRequest, PluginResponse, PluginStore

ROUTE_PATH = "/api/alerts/alertmanager"
log = get_logger(__name__)


async def _previous_statuses(store: PluginStore, notification: Notification) -> dict[str, str]:
    """fingerprint → status before this notification, for the alerts it carries."""
    wanted = {a.fingerprint for a in notification.alerts}
    out: dict[str, str] = {}
    for alertname in sorted({a.alertname for a in notification.alerts}):
        for incident in await store.list_incidents(alertname=alertname, limit=1000):
            if incident.get("fingerprint") in wanted:
                out[incident["fingerprint"]] = incident["status"]
    return out


def make_alertmanager_handler(store: PluginStore | None, names: IncidentNames = NAMES,
                              ) -> Callable[[PluginRequest], Awaitable[PluginResponse]]:
    """The route handler storing a notification's alerts in ``store``.

    Never raises for a bad body or a database failure: those are 400 and 503
    answers with ``{"error": {"code", "message"}}``.  Cancellation stops between alerts;
    the ones already stored stay (Alertmanager sends them all again).
    """

    async def handler(request: PluginRequest) -> PluginResponse:
        if store is None:
            return PluginResponse.error(503, "unavailable", "no incident store: the daemon has no database open")
        try:
            notification = parse_notification(request.json)
        except WebhookError as exc:
            log.warning("alertmanager_payload_rejected", error=str(exc), user=request.user)
            return PluginResponse.error(400, "bad_request", str(exc))
        stored = []
        try:
            previous = await _previous_statuses(store, notification)
            for alert in notification.alerts:
                incident = await store.upsert_incident(
                    fingerprint=alert.fingerprint, alertname=alert.alertname, status=alert.status,
                    severity=alert.severity, labels=alert.labels, annotations=alert.annotations,
                    starts_at=alert.starts_at, ends_at=alert.ends_at)
                names.remember(incident)
                before = previous.get(alert.fingerprint)
                if before != incident["status"]:
                    await store.record_change_event(
                        kind="incident", subject=incident["id"], actor=request.user or "alertmanager",
                        detail={"source": "alertmanager webhook", "receiver": notification.receiver,
                                "alertname": alert.alertname, "fingerprint": alert.fingerprint,
                                "severity": alert.severity, "previous_status": before,
                                "status": incident["status"]})
                stored.append({"id": incident["id"], "fingerprint": alert.fingerprint,
                               "alertname": alert.alertname, "status": incident["status"]})
        except (StoreError, ValueError) as exc:
            log.error("alertmanager_store_failed", error=str(exc), stored=len(stored))
            return PluginResponse.error(503, "unavailable", f"could not store the alerts: {exc}", stored=len(stored))
        log.info("alertmanager_notification", receiver=notification.receiver, alerts=len(stored),
                 status=notification.status)
        body: dict[str, Any] = {"status": "ok", "received": len(stored), "incidents": stored}
        if notification.truncated_alerts:
            body["truncated_alerts"] = notification.truncated_alerts
        return PluginResponse(status=200, body=body)

    return handler
