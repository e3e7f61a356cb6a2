"""The public plugin API: everything a plugin may import from Ongrid.

A plugin is a module (or object) with functions decorated by ``hookimpl``.
See docs/plugins.md for a guide with a minimal plugin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from ongridd.config import Config, HostConfig
from ongridd.errors import ToolError
from ongridd.plugins.hookspecs import hookimpl
from ongridd.tools.spec import Outcome, Proposal, Tool, ToolCallContext

__all__ = [
    "hookimpl",
    "Tool",
    "ToolCallContext",
    "Proposal",
    "Outcome",
    "ToolError",
    "PluginContext",
    "PluginRequest",
    "PluginResponse",
    "PluginStore",
]


class PluginStore(Protocol):
    """The narrow store API plugins get (incidents and change events only).

    All methods are async (they run the database call in a worker thread)
    and raise :class:`ongridd.errors.StoreError` when the database fails.
    Incident dicts have keys ``id, fingerprint, alertname, status, severity,
    labels, annotations, starts_at, ends_at, updated_at`` (times ISO 8601 UTC).
    """

    async def upsert_incident(self, *, fingerprint: str, alertname: str, status: str, severity: str | None,
                              labels: Mapping[str, Any], annotations: Mapping[str, Any],
                              starts_at: str | None, ends_at: str | None) -> dict: ...

    async def list_incidents(self, *, status: str | None = None, severity: str | None = None,
                             since: str | None = None, alertname: str | None = None,
                             limit: int = 50) -> list[dict]: ...

    async def get_incident(self, incident_id: str) -> dict | None: ...

    async def set_incident_status(self, incident_id: str, status: str) -> dict | None: ...

    async def record_change_event(self, *, kind: str, subject: str, actor: str,
                                  detail: Mapping[str, Any]) -> dict: ...

    async def list_change_events(self, *, kind: str | None = None, since: str | None = None,
                                 until: str | None = None, limit: int = 50) -> list[dict]: ...


@attrs.frozen(kw_only=True)
class PluginContext:
    """What a plugin may use.

    ``config``: the whole configuration (read-only).  ``settings``: this
    plugin's own mapping (``plugins.settings.<name>``).  ``hosts``: the host
    inventory (``local`` always first).  ``http``: a shared ``httpx2.AsyncClient``
    (Trio-compatible) or ``None`` before the daemon starts.  ``store``: a
    :class:`PluginStore` or ``None`` when no database is open (e.g. CLI
    listing).  ``plugin_name``: the plugin's registered name.
    """

    config: Config
    plugin_name: str
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    hosts: tuple[HostConfig, ...] = ()
    http: Any = None
    store: PluginStore | None = None

    def host(self, name: str | None) -> HostConfig:
        """The host called ``name`` (``None``/``"local"`` → the local host).

        Raises ToolError listing the known hosts.
        """
        name = name or "local"
        for h in self.hosts:
            if h.name == name:
                return h
        known = ", ".join(h.name for h in self.hosts)
        raise ToolError(f"unknown host {name!r}; known hosts: {known}")


@attrs.frozen(kw_only=True)
class PluginRequest:
    """An HTTP request to a plugin route. ``json``: the parsed body or None."""

    method: str
    path: str
    headers: Mapping[str, str]
    query: Mapping[str, str]
    json: Any
    user: str


@attrs.frozen(kw_only=True)
class PluginResponse:
    status: int = 200
    body: Any = None
