"""Ongrid plugin ``ongrid_loki``: the ``query_logql`` tool (Loki HTTP API).

Configuration: ``loki.url`` (or ``ONGRID_LOKI_URL``); settings
``plugins.settings.ongrid_loki`` (:class:`ongrid_loki.logql.LokiSettings`).
Without a URL the tool is still registered and answers how to configure it.
"""

from __future__ import annotations

from typing import Any

from ongrid_loki.logql import LokiSettings, make_query_logql
from ongridd.plugins.api import PluginContext, hookimpl

__all__ = ["ongrid_register_tools"]

PLUGIN_NAME = "ongrid_loki"


@hookimpl
def ongrid_register_tools(register: Any, context: PluginContext) -> None:
    """Register ``query_logql``."""
    settings = LokiSettings.from_mapping(context.settings, where=f"config.plugins.settings.{PLUGIN_NAME}")
    if not context.config.loki.url:
        context.unconfigured("loki.url (or ONGRID_LOKI_URL) is not set: query_logql answers with that until it is")
    register(make_query_logql(context.config.loki.url, context.http, settings))
