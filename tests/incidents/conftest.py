"""The incidents plugin wired to a real Store on a temporary SQLite file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import attrs
import ongrid_incidents
import pytest

from ongridd.config import Config, HostConfig, PrometheusConfig
from ongridd.plugins.api import PluginContext, Tool
from ongridd.store import Store, open_store


@attrs.define
class Plugin:
    """What ``ongrid_incidents`` registered: ``tools`` by name and ``routes`` by (method, path)."""

    store: Store
    tools: dict[str, Tool]
    routes: dict[tuple[str, str], Any]

    @property
    def webhook(self) -> Any:
        return self.routes[("POST", "/api/alerts/alertmanager")]


def register_plugin(store: Any, *, prometheus_url: str | None = None,
                    hosts: tuple[HostConfig, ...] = ()) -> tuple[dict[str, Tool], dict[tuple[str, str], Any]]:
    """Call the plugin's hooks as the daemon does; returns (tools, routes)."""
    config = Config(prometheus=PrometheusConfig(url=prometheus_url), hosts=hosts)
    context = PluginContext(config=config, plugin_name="ongrid_incidents", store=store,
                            hosts=(HostConfig(name="local", address="localhost"), *hosts))
    tools: dict[str, Tool] = {}
    routes: dict[tuple[str, str], Any] = {}

    def register_tool(tool: Tool) -> None:
        assert tool.name not in tools
        tools[tool.name] = tool

    def register_route(method: str, path: str, handler: Any) -> None:
        routes[(method, path)] = handler

    ongrid_incidents.ongrid_register_tools(register=register_tool, context=context)
    ongrid_incidents.ongrid_register_routes(register=register_route, context=context)
    return tools, routes


@pytest.fixture
async def store(tmp_path) -> AsyncIterator[Store]:
    async with open_store(f"sqlite:///{tmp_path / 'ongrid.db'}") as opened:
        yield opened


@pytest.fixture
def make_plugin() -> Any:
    """:func:`register_plugin`, for tests that need other hosts or no store."""
    return register_plugin


@pytest.fixture
async def plugin(store: Store) -> Plugin:
    tools, routes = register_plugin(store.plugin_store)
    return Plugin(store=store, tools=tools, routes=routes)
