"""``query_alert_rules`` (Prometheus's rules API) and ``query_devices`` (the host inventory)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ongrid_prometheus.client import PrometheusClient

from ongrid_incidents.common import clean_args, str_arg
from ongridd.plugins.api import HostConfig
from ongridd.plugins.api import ToolError
from ongridd.plugins.api import Tool, ToolCallContext

RULE_STATES = ("firing", "pending", "inactive")
MAX_RULES = 200
MAX_ALERTS_PER_RULE = 10


def _rule(group: dict[str, Any], rule: dict[str, Any]) -> dict[str, Any]:
    alerts = rule.get("alerts") or []
    out: dict[str, Any] = {
        "name": rule.get("name"),
        "state": rule.get("state"),
        "group": group.get("name"),
        "file": group.get("file"),
        "query": rule.get("query"),
        "for_s": rule.get("duration", 0),
        "labels": rule.get("labels") or {},
        "annotations": rule.get("annotations") or {},
        "health": rule.get("health"),
        "active_alerts": len(alerts),
        "alerts": [{"labels": a.get("labels") or {}, "state": a.get("state"), "active_at": a.get("activeAt"),
                    "value": a.get("value")} for a in alerts[:MAX_ALERTS_PER_RULE]],
    }
    if rule.get("lastError"):
        out["last_error"] = rule["lastError"]
    return out


def make_query_alert_rules(client: PrometheusClient) -> Tool:
    """``query_alert_rules(state?)``: the alerting rules Prometheus evaluates.

    Returns ``{rules: [{name, state, group, file, query, for_s, labels,
    annotations, health, active_alerts, alerts: [...]}], count, notes?}``.
    Raises ToolError like ``query_promql`` for an unconfigured, unreachable or
    failing Prometheus.
    """

    async def handler(args: dict[str, Any], ctx: ToolCallContext | None = None) -> dict[str, Any]:
        args = clean_args(args)
        state = str_arg(args, "state", "query_alert_rules", choices=RULE_STATES)
        answer = await client.call("rules", {"type": "alert"})
        groups = answer.data.get("groups") if isinstance(answer.data, dict) else None
        groups = groups if isinstance(groups, list) else []
        rules = [_rule(g, r) for g in groups for r in (g.get("rules") or [])
                 if r.get("type") == "alerting" and (state is None or r.get("state") == state)]
        out: dict[str, Any] = {"rules": rules[:MAX_RULES], "count": len(rules)}
        notes = []
        if len(rules) > MAX_RULES:
            notes.append(f"showing {MAX_RULES} of {len(rules)} rules; filter by state")
        if answer.warnings:
            notes.extend(answer.warnings)
        if notes:
            out["notes"] = notes
        return out

    return Tool(name="query_alert_rules",
                description="List the alerting rules Prometheus evaluates, with their state (firing, pending, "
                            "inactive), PromQL expression, labels, annotations and active alerts.",
                parameters={"type": "object", "additionalProperties": False,
                            "properties": {"state": {"type": "string", "enum": list(RULE_STATES),
                                                     "description": "only rules in this state"}}},
                handler=handler, timeout_s=client.timeout_s + 5)


def inventory(hosts: Sequence[HostConfig]) -> list[HostConfig]:
    """The hosts with ``local`` first (added when the configuration lacks it)."""
    local = [h for h in hosts if h.name == "local"] or [HostConfig(name="local")]
    return local[:1] + [h for h in hosts if h.name != "local"]


def _matches(host: HostConfig, selector: str) -> bool:
    key, sep, value = selector.partition("=")
    key, value = key.strip(), value.strip()
    if key not in host.labels:
        return False
    return not sep or host.labels[key] == value


def make_query_devices(hosts: Sequence[HostConfig]) -> Tool:
    """``query_devices(label?)``: the configured hosts and their labels.

    ``label`` is ``key=value`` (exact match) or ``key`` (has the label).
    Returns ``{devices: [{name, address, local, ssh_user, labels}], count}``.
    """
    known = inventory(hosts)

    async def handler(args: dict[str, Any], ctx: ToolCallContext | None = None) -> dict[str, Any]:
        args = clean_args(args)
        selector = str_arg(args, "label", "query_devices")
        if selector is not None and not selector.partition("=")[0].strip():
            raise ToolError(f"query_devices: 'label' must be key=value or key, got {selector!r}")
        chosen = [h for h in known if selector is None or _matches(h, selector)]
        devices = [{"name": h.name, "address": h.address or ("localhost" if h.name == "local" else ""),
                    "local": h.name == "local", "ssh_user": h.ssh_user, "labels": dict(h.labels)}
                   for h in chosen]
        return {"devices": devices, "count": len(devices)}

    return Tool(name="query_devices",
                description="List the hosts Ongrid knows (the local host and the configured ones) with their "
                            "labels; host tools take one of these names as 'host'.",
                parameters={"type": "object", "additionalProperties": False,
                            "properties": {"label": {"type": "string",
                                                     "description": "filter: key=value, or key to list hosts "
                                                                    "that have the label"}}},
                handler=handler, timeout_s=5.0)
