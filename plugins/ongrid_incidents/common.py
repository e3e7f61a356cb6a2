"""Helpers shared by the incident routes and tools: store access and names."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from ongridd.plugins.api import StoreError, ToolError

T = TypeVar("T")
INCIDENT_STATUSES = ("firing", "resolved", "acknowledged")


class IncidentNames:
    """A bounded memory of incident id → alertname.

    ``ack_incident``'s ``describe`` runs synchronously (the review gate builds
    the proposal before the handler runs), so it cannot ask the database; it
    names the alert from what the webhook stored and the tools returned.
    """

    def __init__(self, max_entries: int = 5000):
        self._names: OrderedDict[str, str] = OrderedDict()
        self._max = max_entries

    def remember(self, incident: Mapping[str, Any]) -> None:
        """Note ``incident['id']`` → ``incident['alertname']``."""
        iid, name = incident.get("id"), incident.get("alertname")
        if isinstance(iid, str) and isinstance(name, str):
            self._names[iid] = name
            self._names.move_to_end(iid)
            while len(self._names) > self._max:
                self._names.popitem(last=False)

    def get(self, incident_id: str) -> str | None:
        """The alertname last seen for ``incident_id``, or None."""
        return self._names.get(incident_id)


#: one memory for the process: routes and tools are registered by separate hooks
NAMES = IncidentNames()


def require_store(store: Any, tool: str) -> Any:
    """``store`` itself, or ToolError when the daemon has no database open."""
    if store is None:
        raise ToolError(f"{tool}: the incident store is not available (the daemon has no database open)")
    return store


async def store_call(tool: str, call: Awaitable[T]) -> T:
    """Await a PluginStore call; its ValueError/StoreError become a ToolError naming ``tool``."""
    try:
        return await call
    except ValueError as exc:
        raise ToolError(f"{tool}: {exc}") from None
    except StoreError as exc:
        raise ToolError(f"{tool}: the incident database failed: {exc}") from None


def since_iso(minutes: float, now: datetime | None = None) -> str:
    """The ISO 8601 UTC time ``minutes`` before ``now``."""
    now = now or datetime.now(UTC)
    return (now - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def clean_args(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """The arguments without ``null`` values (a null optional parameter counts as absent)."""
    return {k: v for k, v in (args or {}).items() if v is not None}


def int_arg(args: Mapping[str, Any], name: str, default: int, low: int, high: int, tool: str) -> int:
    """An integer argument within ``low..high``; ToolError otherwise."""
    value = args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ToolError(f"{tool}: '{name}' must be a whole number from {low} to {high}, got {value!r}")
    return value


def str_arg(args: Mapping[str, Any], name: str, tool: str, *, choices: tuple[str, ...] | None = None) -> str | None:
    """An optional non-empty string argument (one of ``choices`` when given); ToolError otherwise."""
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{tool}: '{name}' must be a non-empty string, got {value!r}")
    value = value.strip()
    if choices is not None and value not in choices:
        raise ToolError(f"{tool}: '{name}' must be one of {', '.join(choices)}, got {value!r}")
    return value
