"""Ongrid plugin ``ongrid_incidents``: alerts from Alertmanager become incidents.

Routes: ``POST /api/alerts/alertmanager`` (Alertmanager webhook, version 4)
and ``POST /api/changes`` (changes made outside Ongrid: deploys, config
pushes, flags; see :mod:`ongrid_incidents.changes_route`).
Tools: ``get_active_incidents``, ``query_incidents``, ``get_incident_detail``,
``query_change_events``, ``ack_incident`` (class ``write``, through the review
gate), ``query_alert_rules`` (Prometheus's ``/api/v1/rules`` at
``prometheus.url``) and ``query_devices`` (the host inventory).

It uses ``context.store`` (the narrow PluginStore API) and, for the rules,
the Prometheus client of the first-party ``ongrid_prometheus`` package (the
same HTTP stack and error messages).  Alertmanager must authenticate like any
client of the daemon (``http_config.authorization`` in its webhook config).
"""

from __future__ import annotations

from typing import Any

from ongrid_prometheus.client import PrometheusClient

from ongrid_incidents.changes_route import ROUTE_PATH as CHANGES_PATH
from ongrid_incidents.changes_route import make_changes_handler, make_changes_list_handler
from ongrid_incidents.common import NAMES
from ongrid_incidents.incident_tools import make_incident_tools
from ongrid_incidents.inventory import make_query_alert_rules, make_query_devices
from ongrid_incidents.route import ROUTE_PATH, make_alertmanager_handler
from ongridd.plugins.api import PluginContext, hookimpl

__all__ = ["ongrid_register_tools", "ongrid_register_routes"]

PLUGIN_NAME = "ongrid_incidents"


def _timeout_s(context: PluginContext) -> float:
    value = (context.settings or {}).get("prometheus_timeout_s", 10.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"expected a positive number @ config.plugins.settings.{PLUGIN_NAME}.prometheus_timeout_s, "
                         f"got {value!r}")
    unknown = set(context.settings or {}) - {"prometheus_timeout_s"}
    if unknown:
        raise ValueError(f"unknown setting(s) {', '.join(sorted(unknown))} @ config.plugins.settings.{PLUGIN_NAME} "
                         "(known: prometheus_timeout_s)")
    return float(value)


@hookimpl
def ongrid_register_tools(register: Any, context: PluginContext) -> None:
    """Register the incident, change-event, alert-rule and device tools."""
    for tool in make_incident_tools(context.store, NAMES):
        register(tool)
    if not context.config.prometheus.url:
        context.unconfigured("prometheus.url (or ONGRID_PROMETHEUS_URL) is not set: query_alert_rules answers "
                             "with that until it is (the incident, change and device tools work)")
    client = PrometheusClient(base_url=context.config.prometheus.url, http=context.http,
                              timeout_s=_timeout_s(context))
    register(make_query_alert_rules(client))
    register(make_query_devices(context.hosts or context.config.hosts))


@hookimpl
def ongrid_register_routes(register: Any, context: PluginContext) -> None:
    """Register ``POST /api/alerts/alertmanager``, ``POST /api/changes`` and ``GET /api/changes``."""
    register("POST", ROUTE_PATH, make_alertmanager_handler(context.store, NAMES))
    register("POST", CHANGES_PATH, make_changes_handler(context.store))
    register("GET", CHANGES_PATH, make_changes_list_handler(context.store))
