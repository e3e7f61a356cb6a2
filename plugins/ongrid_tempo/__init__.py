"""Ongrid plugin ``ongrid_tempo``: the ``query_traceql`` tool (Tempo HTTP API).

Configuration: ``tempo.url`` (or ``ONGRID_TEMPO_URL``); settings
``plugins.settings.ongrid_tempo`` (:class:`ongrid_tempo.traceql.TempoSettings`).
Without a URL the tool is still registered and answers how to configure it.
"""

from __future__ import annotations

from typing import Any

from ongrid_tempo.traceql import TempoSettings, make_query_traceql
from ongridd.plugins.api import PluginContext, hookimpl

__all__ = ["ongrid_register_tools"]

PLUGIN_NAME = "ongrid_tempo"


@hookimpl
def ongrid_register_tools(register: Any, context: PluginContext) -> None:
    """Register ``query_traceql``."""
    settings = TempoSettings.from_mapping(context.settings, where=f"config.plugins.settings.{PLUGIN_NAME}")
    if not context.config.tempo.url:
        context.unconfigured("tempo.url (or ONGRID_TEMPO_URL) is not set: query_traceql answers with that "
                             "until it is")
    register(make_query_traceql(context.config.tempo.url, context.http, settings))
