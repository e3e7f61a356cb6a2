"""Build the registries a turn runs on (tools, stubs, personas, skills,
routes) from the plugins and the persona/skill folders — off to the side,
so the caller can swap them in at once (docs/architecture.md §6, §13, §14)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from ongridd.config import Config
from ongridd.logs import get_logger
from ongridd.personas.registry import AgentRegistry, LoadReport, builtin_agents_dir
from ongridd.personas.skills import SkillRegistry
from ongridd.plugins.api import PluginContext
from ongridd.plugins.manager import Contributions, collect, default_context_factory, plugin_search_paths
from ongridd.runtime.registries import Registries
from ongridd.tools.bag import worker_bag
from ongridd.tools.spec import CONTROL_TOOL_NAMES

log = get_logger(__name__)


@attrs.frozen
class BuildResult:
    registries: Registries
    contributions: Contributions
    agents_report: LoadReport
    skills_report: LoadReport
    warnings: tuple[str, ...]


class RegistryBuilder:
    """``config``: Config; ``store``: the Store (plugins get its narrow
    ``plugin_store``); ``http``: the shared HTTP client for plugins;
    ``chat``: the :class:`~ongridd.plugins.chat.ChatAPI` handed to plugins."""

    def __init__(self, *, config: Config, store: Any = None, http: Any = None, chat: Any = None):
        self.config = config
        self.store = store
        self.http = http
        self.chat = chat

    def context_factory(self, plugin_name: str) -> PluginContext:
        base = default_context_factory(self.config)(plugin_name)
        return attrs.evolve(base, http=self.http, chat=self.chat,
                            store=getattr(self.store, "plugin_store", None) if self.store is not None else None)

    def agent_roots(self) -> list[Path]:
        return list(self.config.agent_user_roots)

    def build_sync(self, *, extra_paths: Sequence[Path] | None = None, blocked: Sequence[str] = ()) -> BuildResult:
        """Load plugins, personas and skills into new registries (no swap).

        ``extra_paths``: marketplace plugin folders (default: every folder in
        ``<state_dir>/plugins``).  ``blocked``: plugin names to leave out.
        """
        paths = plugin_search_paths(self.config) if extra_paths is None else list(extra_paths)
        config = self.config
        if blocked:
            config = attrs.evolve(config, plugins=attrs.evolve(
                config.plugins, disabled=tuple(config.plugins.disabled) + tuple(blocked)))
        contributions = collect(config, self.context_factory, extra_paths=paths)
        skills = SkillRegistry()
        skills_report = skills.load(list(contributions.skill_paths) + [Path(d) for d in config.skills.user_dirs])
        agents = AgentRegistry(builtin_agents_dir(), extra_paths=contributions.persona_paths)
        known = set(contributions.tools) | set(CONTROL_TOOL_NAMES)
        agents_report = agents.load(self.agent_roots(), known_tools=known, known_skills=set(skills.names()))
        snapshot = agents.snapshot()
        stubs, warnings = [], []
        for stub in contributions.stubs:
            if stub.persona not in snapshot:
                warnings.append(f"redirect stub {stub.tool!r} ({stub.plugin}) points at unknown persona "
                                f"{stub.persona!r}; left out")
                continue
            if stub.tool not in worker_bag(snapshot[stub.persona], contributions.tools).tools:
                warnings.append(f"redirect stub {stub.tool!r} ({stub.plugin}) points at persona {stub.persona!r}, "
                                "which does not carry that tool; left out")
                continue
            stubs.append(stub)
        routes = {(r.method, r.path): r for r in contributions.routes}
        for line in (*agents_report.warnings, *skills_report.warnings, *warnings):
            log.warning("registry_warning", message=line)
        for rep in contributions.failed:
            log.warning("plugin_failed", plugin=rep.name, source=rep.source, error=rep.error)
        registries = Registries(tools=contributions.tools, stubs=tuple(stubs), agents=agents, skills=skills,
                                routes=routes, services=contributions.services,
                                plugins=tuple(contributions.report))
        return BuildResult(registries, contributions, agents_report, skills_report, tuple(warnings))

    async def build(self, *, abandon_on_cancel: bool = False, **kwargs: Any) -> Registries:
        """:meth:`build_sync` in a worker thread (imports and file reads).
        Cancellation waits for the thread, or with ``abandon_on_cancel``
        (the daemon's start-up: a hung plugin import must not block a stop)
        returns at once and leaves the thread to finish unused."""
        result = await trio.to_thread.run_sync(lambda: self.build_sync(**kwargs), abandon_on_cancel=abandon_on_cancel)
        return result.registries

    async def build_full(self, **kwargs: Any) -> BuildResult:
        return await trio.to_thread.run_sync(lambda: self.build_sync(**kwargs))
