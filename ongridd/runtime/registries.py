"""The registries a turn runs on, swapped as one value.

A turn takes ``holder.current`` once when it starts and keeps it for its
dispatches and its catalog, so an install, an uninstall or a reload never
shows it a half-built set (docs/architecture.md §6, §14).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ongridd.personas.registry import AgentRegistry
from ongridd.personas.skills import SkillRegistry
from ongridd.tools.spec import RedirectStub, Tool


@attrs.frozen(kw_only=True)
class Registries:
    """``tools``: name → Tool (every registered tool).  ``stubs``: the
    redirect stubs.  ``agents``: the AgentRegistry (its ``snapshot()`` is
    taken per turn).  ``skills``: the SkillRegistry.  ``routes``: plugin HTTP
    routes ``{(METHOD, path): PluginRoute}``.  ``services``: the plugins'
    long-running tasks (``PluginService``; the daemon starts those of its
    first build).  ``plugins``: the plugin load report.
    ``generation``: increases with every swap."""

    tools: Mapping[str, Tool]
    stubs: tuple[RedirectStub, ...]
    agents: AgentRegistry
    skills: SkillRegistry | None
    routes: Mapping[tuple[str, str], Any] = attrs.field(factory=dict)
    services: tuple[Any, ...] = ()
    plugins: tuple[Any, ...] = ()
    generation: int = 0


class RegistryHolder:
    """Holds the current :class:`Registries`; ``swap`` is one assignment."""

    def __init__(self, initial: Registries):
        self._current = initial

    @property
    def current(self) -> Registries:
        return self._current

    def swap(self, new: Registries) -> Registries:
        """Install ``new`` (its generation is set to old + 1); returns the old one."""
        old = self._current
        self._current = attrs.evolve(new, generation=old.generation + 1)
        return old
