"""Tools over the stored incidents and change events, and ``ack_incident``."""

from __future__ import annotations

import time
from typing import Any

from ongrid_incidents.common import (
    INCIDENT_STATUSES,
    IncidentNames,
    clean_args,
    int_arg,
    require_store,
    since_iso,
    store_call,
    str_arg,
)
from ongridd.plugins.api import ToolError
from ongridd.plugins.api import PluginStore, Proposal, Tool, ToolCallContext, iso_utc, parse_time

MAX_LIMIT = 500
MAX_SINCE_MINUTES = 525_600  # one year
TIMELINE_MAX = 50

_SEVERITY = {"type": "string", "description": "labels.severity of the alert, e.g. critical, warning, info"}


def _limit_schema(default: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": default,
            "description": f"most rows returned (1..{MAX_LIMIT}, default {default})"}


_SINCE = {"type": "integer", "minimum": 1, "maximum": MAX_SINCE_MINUTES, "default": 1440,
          "description": "only what started or changed in the last N minutes (default 1440 = 24 h)"}


def _when(incident: dict[str, Any]) -> str:
    return incident.get("starts_at") or incident.get("updated_at") or ""


def _shown(incident: dict[str, Any]) -> dict[str, Any]:
    """An incident as the model sees it: the stored fields plus a one-line summary."""
    annotations = incident.get("annotations") or {}
    out = {k: incident.get(k) for k in ("id", "alertname", "status", "severity", "starts_at", "ends_at",
                                         "updated_at", "fingerprint", "labels", "annotations")}
    summary = annotations.get("summary") or annotations.get("description")
    if summary:
        out["summary"] = str(summary)[:300]
    return out


_ACTIVE_PARAMS = {"type": "object", "additionalProperties": False,
                  "properties": {"severity": _SEVERITY, "limit": _limit_schema(20)}}
_QUERY_PARAMS = {"type": "object", "additionalProperties": False,
                 "properties": {"status": {"type": "string", "enum": list(INCIDENT_STATUSES)},
                                "severity": _SEVERITY,
                                "since_minutes": _SINCE,
                                "alertname": {"type": "string", "description": "exact alert name"},
                                "limit": _limit_schema(50)}}
_DETAIL_PARAMS = {"type": "object", "additionalProperties": False, "required": ["incident_id"],
                  "properties": {"incident_id": {"type": "string", "minLength": 1,
                                                 "description": "the incident id (a UUID)"}}}
_CHANGES_PARAMS = {"type": "object", "additionalProperties": False,
                   "properties": {"kind": {"type": "string",
                                           "description": "deploy, config, flag, rollback, ..., or "
                                                          "tool, persona, plugin, incident"},
                                  "subject": {"type": "string", "minLength": 1,
                                              "description": "exact subject, e.g. a service name"},
                                  "since": {"type": ["string", "number"],
                                            "description": "changes at or after: unix seconds, RFC 3339 "
                                                           "or relative 'now-6h' (instead of since_minutes)"},
                                  "until": {"type": ["string", "number"],
                                            "description": "changes before this time (same forms)"},
                                  "since_minutes": _SINCE, "limit": _limit_schema(50)}}
_ACK_PARAMS = {"type": "object", "additionalProperties": False, "required": ["incident_id", "reason"],
               "properties": {"incident_id": {"type": "string", "minLength": 1},
                              "reason": {"type": "string", "minLength": 1,
                                         "description": "why it is acknowledged and who handles it"}}}


class _IncidentHandlers:
    """The handlers of the incident tools, over one store and one id → alertname memory.

    Each handler returns a dict and raises ToolError for unusable arguments,
    an unknown incident id, a missing store or a failing database.
    """

    def __init__(self, store: PluginStore | None, names: IncidentNames) -> None:
        self.store = store
        self.names = names

    async def get_active_incidents(self, args: dict[str, Any], ctx: ToolCallContext | None = None) -> dict[str, Any]:
        name = "get_active_incidents"
        args = clean_args(args)
        st = require_store(self.store, name)
        severity = str_arg(args, "severity", name)
        limit = int_arg(args, "limit", 20, 1, MAX_LIMIT, name)
        rows: list[dict[str, Any]] = []
        full = False
        for status in ("firing", "acknowledged"):
            got = await store_call(name, st.list_incidents(status=status, severity=severity, limit=limit))
            full = full or len(got) >= limit
            rows.extend(got)
        rows.sort(key=_when, reverse=True)
        for row in rows:
            self.names.remember(row)
        shown = [_shown(r) for r in rows[:limit]]
        return {"incidents": shown, "count": len(shown), "truncated": full or len(rows) > limit}

    async def query_incidents(self, args: dict[str, Any], ctx: ToolCallContext | None = None) -> dict[str, Any]:
        name = "query_incidents"
        args = clean_args(args)
        st = require_store(self.store, name)
        status = str_arg(args, "status", name, choices=INCIDENT_STATUSES)
        severity = str_arg(args, "severity", name)
        alertname = str_arg(args, "alertname", name)
        since_minutes = int_arg(args, "since_minutes", 1440, 1, MAX_SINCE_MINUTES, name)
        limit = int_arg(args, "limit", 50, 1, MAX_LIMIT, name)
        rows = await store_call(name, st.list_incidents(status=status, severity=severity, alertname=alertname,
                                                        since=since_iso(since_minutes), limit=limit))
        for row in rows:
            self.names.remember(row)
        return {"incidents": [_shown(r) for r in rows], "count": len(rows), "truncated": len(rows) >= limit,
                "since": since_iso(since_minutes)}

    async def get_incident_detail(self, args: dict[str, Any], ctx: ToolCallContext | None = None) -> dict[str, Any]:
        name = "get_incident_detail"
        args = clean_args(args)
        st = require_store(self.store, name)
        incident_id = str_arg(args, "incident_id", name)
        if incident_id is None:
            raise ToolError(f"{name}: 'incident_id' is required")
        incident = await store_call(name, st.get_incident(incident_id))
        if incident is None:
            raise ToolError(f"{name}: no incident with id {incident_id!r}; "
                            "use get_active_incidents or query_incidents to find incident ids")
        self.names.remember(incident)
        events = await store_call(name, st.list_change_events(kind="incident", limit=1000))
        timeline = [e for e in events if e.get("subject") == incident_id][:TIMELINE_MAX]
        timeline.reverse()  # oldest first reads like a timeline
        return {"incident": _shown(incident), "timeline": timeline}

    async def query_change_events(self, args: dict[str, Any], ctx: ToolCallContext | None = None) -> dict[str, Any]:
        name = "query_change_events"
        args = clean_args(args)
        st = require_store(self.store, name)
        kind = str_arg(args, "kind", name)
        subject = str_arg(args, "subject", name)
        if "since" in args and "since_minutes" in args:
            raise ToolError(f"{name}: give either 'since' or 'since_minutes', not both")
        now = time.time()
        if "since" in args:
            since = iso_utc(parse_time(args["since"], now=now, field="since"))
        else:
            since = since_iso(int_arg(args, "since_minutes", 1440, 1, MAX_SINCE_MINUTES, name))
        until = iso_utc(parse_time(args["until"], now=now, field="until")) if "until" in args else None
        limit = int_arg(args, "limit", 50, 1, MAX_LIMIT, name)
        rows = await store_call(name, st.list_change_events(kind=kind, subject=subject, since=since, until=until,
                                                            limit=limit))
        events = [{**row, "origin": "external" if row.get("recorded_by") else "ongrid"} for row in rows]
        out = {"events": events, "count": len(rows), "truncated": len(rows) >= limit, "since": since}
        if until:
            out["until"] = until
        return out

    async def ack_incident(self, args: dict[str, Any], ctx: ToolCallContext | None = None) -> dict[str, Any]:
        name = "ack_incident"
        args = clean_args(args)
        st = require_store(self.store, name)
        incident_id = str_arg(args, "incident_id", name)
        reason = str_arg(args, "reason", name)
        if incident_id is None or reason is None:
            raise ToolError(f"{name}: 'incident_id' and 'reason' are both required")
        incident = await store_call(name, st.get_incident(incident_id))
        if incident is None:
            raise ToolError(f"{name}: no incident with id {incident_id!r}; nothing was changed")
        self.names.remember(incident)
        if incident["status"] == "resolved":
            raise ToolError(f"{name}: incident {incident_id} ({incident['alertname']}) is already resolved; "
                            "nothing to acknowledge")
        if incident["status"] == "acknowledged":
            return {"status": "unchanged", "note": "the incident was already acknowledged",
                    "incident": _shown(incident)}
        updated = await store_call(name, st.set_incident_status(incident_id, "acknowledged"))
        if updated is None:
            raise ToolError(f"{name}: incident {incident_id} disappeared while it was being acknowledged")
        actor = ctx.user_id if ctx is not None else "local"
        detail = {"action": "acknowledge", "reason": reason, "alertname": incident["alertname"],
                  "fingerprint": incident.get("fingerprint"), "previous_status": incident["status"],
                  "status": updated["status"]}
        if ctx is not None:
            detail.update(agent=ctx.agent, session_id=ctx.session_id)
        event = await store_call(name, st.record_change_event(kind="incident", subject=incident_id, actor=actor,
                                                              detail=detail))
        return {"status": "acknowledged", "incident": _shown(updated), "change_event_id": event.get("id")}

    def describe_ack(self, args: dict[str, Any]) -> Proposal:
        incident_id = str(args.get("incident_id", "")).strip()
        alertname = self.names.get(incident_id)
        target = f"incident {incident_id} ({alertname})" if alertname else \
            f"incident {incident_id} (alertname not known to Ongrid yet)"
        return Proposal(action="acknowledge incident", target=target, blast_radius="single_host")


def make_incident_tools(store: PluginStore | None, names: IncidentNames) -> list[Tool]:
    """``get_active_incidents``, ``query_incidents``, ``get_incident_detail``,
    ``query_change_events`` and ``ack_incident`` over ``store``.

    Each handler returns a dict and raises ToolError for unusable arguments,
    an unknown incident id, a missing store or a failing database.
    """
    h = _IncidentHandlers(store, names)
    return [
        Tool(name="get_active_incidents",
             description="List incidents that are still active (firing or acknowledged), newest first.",
             parameters=_ACTIVE_PARAMS,
             handler=h.get_active_incidents),
        Tool(name="query_incidents",
             description="Search incidents (alerts received from Alertmanager) by status, severity, alert "
                         "name and age, newest first.",
             parameters=_QUERY_PARAMS,
             handler=h.query_incidents),
        Tool(name="get_incident_detail",
             description="One incident with all its labels and annotations and its timeline of changes.",
             parameters=_DETAIL_PARAMS,
             handler=h.get_incident_detail),
        Tool(name="query_change_events",
             description="Recent changes, newest first: those recorded from outside (deploys, config pushes, "
                         "feature flags; origin 'external', with who recorded them) beside Ongrid's own "
                         "(host and other changes the review gate approved, kind 'tool', with how they ended; personas, "
                         "plugins, incidents: alerts received, acknowledgements; origin 'ongrid'). "
                         "Filter by kind, subject (e.g. a service name) and time.",
             parameters=_CHANGES_PARAMS,
             handler=h.query_change_events),
        Tool(name="ack_incident",
             description="Acknowledge an incident: someone is working on it. Goes through the review gate; "
                         "give the reason.",
             parameters=_ACK_PARAMS,
             handler=h.ack_incident, tool_class="write", describe=h.describe_ack),
    ]
