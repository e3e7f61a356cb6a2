"""Ongrid plugin ``ongrid_prometheus``: the ``query_promql`` tool (docs/architecture.md §21).

Configuration: ``prometheus.url`` (or ``ONGRID_PROMETHEUS_URL``) names the
server; ``plugins.settings.ongrid_prometheus`` may set ``timeout_s``,
``max_series``, ``max_points``, ``max_total_points`` and ``auto_points``
(see :class:`ongrid_prometheus.promql.PromqlSettings`).  Without a URL the
tool is still registered and answers with an error saying how to configure it.
"""

from __future__ import annotations

from typing import Any

from ongrid_prometheus.client import PrometheusClient
from ongrid_prometheus.promql import PromqlSettings, make_query_promql
from ongridd.plugins.api import PluginContext, hookimpl

__all__ = ["client_for", "settings_for", "ongrid_register_tools"]

PLUGIN_NAME = "ongrid_prometheus"


def settings_for(context: PluginContext) -> PromqlSettings:
    """This plugin's settings from the context; ValueError names a bad key."""
    return PromqlSettings.from_mapping(context.settings or {}, where=f"config.plugins.settings.{PLUGIN_NAME}")


def client_for(context: PluginContext, timeout_s: float) -> PrometheusClient:
    """A :class:`PrometheusClient` for ``context.config.prometheus.url``."""
    return PrometheusClient(base_url=context.config.prometheus.url, http=context.http, timeout_s=timeout_s)


@hookimpl
def ongrid_register_tools(register: Any, context: PluginContext) -> None:
    """Register ``query_promql``."""
    settings = settings_for(context)
    if not context.config.prometheus.url:
        context.unconfigured("prometheus.url (or ONGRID_PROMETHEUS_URL) is not set: query_promql answers "
                             "with that until it is")
    register(make_query_promql(client_for(context, settings.timeout_s), settings))
