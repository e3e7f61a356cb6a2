"""The plugin manager (docs/architecture.md §13): load plugins, call their hooks with a
validating ``register`` callback, and build the contributions off to the side.

This module is the collection step (:func:`collect`, :class:`Contributions`);
where plugins come from is :mod:`ongridd.plugins.discovery`, the validating
``register`` callbacks are :mod:`ongridd.plugins.staging`.

Sources, in load order (a name seen twice keeps the first, the second is
reported as failed):

1. ``builtin``: the modules of :data:`BUILTIN_PLUGINS`, imported by name;
2. ``entry point``: entry points of group ``ongrid`` in the daemon's environment;
3. ``path``: entry points of group ``ongrid`` found in extra plugin folders
   (marketplace installs, ``<state_dir>/plugins/<name>``), which are put on
   ``sys.path``.

All three go through the same code path.  A plugin that fails to import,
implements a hook that does not exist (``check_pending``), raises in a hook,
or registers something invalid is reported and skipped entirely: none of
its registrations is kept.  ``plugins.disabled`` names plugins that are not
loaded at all (``set_blocked``).  :func:`collect` changes no global state
except ``sys.path`` and the module cache; the caller swaps the result in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType

import attrs
import pluggy

from ongridd.config import Config, HostConfig
from ongridd.errors import ConfigError, PluginError, ToolRegistrationError
from ongridd.logs import get_logger
from ongridd.plugins import hookspecs
from ongridd.plugins.api import PluginContext

# discovery and staging live in their own modules; their public names stay importable from here
from ongridd.plugins.discovery import (
    BUILTIN_PLUGINS,
    ENTRY_POINT_GROUP,
    PluginReport,
    PluginSource,
    add_to_sys_path,
    builtin_sources,
    entry_point_sources,
    module_location,
    path_sources,
    plugin_search_paths,
    source_plugins_dir,
)
from ongridd.plugins.staging import (
    HOOK_NAMES,
    HTTP_METHODS,
    ROUTE_AUTH,
    PluginRoute,
    PluginService,
    Staging,
    call_hooks,
    plugin_dir,
)
from ongridd.tools.registry import ToolRegistry
from ongridd.tools.spec import CONTROL_TOOL_NAMES, RedirectStub
from ongridd.tools.stubs import DEFAULT_STUBS

__all__ = [
    "BUILTIN_PLUGINS", "ENTRY_POINT_GROUP", "HOOK_NAMES", "HTTP_METHODS", "ROUTE_AUTH",
    "ContextFactory", "Contributions", "PluginReport", "PluginRoute", "PluginService", "PluginSource",
    "add_to_sys_path", "builtin_sources", "collect", "default_context_factory", "entry_point_sources",
    "known_tool_names", "path_sources", "plugin_search_paths", "source_plugins_dir",
]

log = get_logger(__name__)

ContextFactory = Callable[[str], PluginContext]


@attrs.frozen(kw_only=True)
class Contributions:
    """Everything the plugins gave, ready to swap in.

    ``tools``: the registry of plugin tools.  ``stubs``: :data:`DEFAULT_STUBS`
    then the plugins' redirect stubs.  ``persona_paths`` / ``skill_paths``:
    files or folders (absolute).  ``routes``: :class:`PluginRoute` tuples.
    ``report``: one :class:`PluginReport` per plugin seen, in load order.
    """

    tools: ToolRegistry
    stubs: tuple[RedirectStub, ...]
    persona_paths: tuple[Path, ...]
    skill_paths: tuple[Path, ...]
    routes: tuple[PluginRoute, ...]
    report: list[PluginReport]
    services: tuple[PluginService, ...] = ()

    @property
    def failed(self) -> list[PluginReport]:
        return [r for r in self.report if not r.ok and not r.disabled]


def default_context_factory(config: Config) -> ContextFactory:
    """Contexts for listing and validation: config, settings and hosts; no HTTP client, no store."""
    hosts = (HostConfig(name="local", address="localhost"),) + tuple(h for h in config.hosts if h.name != "local")
    local = [h for h in config.hosts if h.name == "local"]
    if local:
        hosts = (local[0],) + hosts[1:]

    def factory(name: str) -> PluginContext:
        settings = config.plugins.settings.get(name) or {}
        return PluginContext(config=config, plugin_name=name, settings=settings, hosts=hosts)

    return factory


class _Collector:
    def __init__(self, config: Config, context_factory: ContextFactory):
        self.config = config
        self.context_factory = context_factory
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.disabled = set(config.plugins.disabled)
        for name in self.disabled:
            self.pm.set_blocked(name)
        self.tools: dict[str, str] = {}
        self.stubs: dict[str, str] = {s.tool: "ongridd (default stubs)" for s in DEFAULT_STUBS}
        self.routes: dict[tuple[str, str], str] = {}
        self.accepted: list[Staging] = []
        self.report: list[PluginReport] = []
        self.seen: dict[str, str] = {}

    def load(self, src: PluginSource) -> None:
        if src.name in self.seen:
            self.report.append(PluginReport(
                name=src.name, source=src.source, location=src.location, ok=False,
                error=f"a plugin named {src.name!r} was already loaded from {self.seen[src.name]}; this one is skipped"))
            return
        self.seen[src.name] = f"{src.source} {src.location}".strip()
        if src.name in self.disabled or self.pm.is_blocked(src.name):
            self.report.append(PluginReport(name=src.name, source=src.source, location=src.location, ok=False,
                                            disabled=True, error="disabled by configuration (plugins.disabled)"))
            return
        location = src.location
        try:
            plugin = src.load()
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - any plugin fault is reported, never raised
            self._failed(src, location, f"failed to import: {type(exc).__name__}: {exc}")
            return
        if src.source == "builtin" and isinstance(plugin, ModuleType):
            location = module_location(plugin)
        if self.pm.is_registered(plugin):
            self._failed(src, location, "the same plugin object is already registered under another name")
            return
        try:
            self.pm.register(plugin, name=src.name)
        except Exception as exc:  # noqa: BLE001 - PluginValidationError and friends: bad hook signature
            self._failed(src, location, f"invalid hook implementation: {exc}")
            return
        staging = Staging(src.name, plugin_dir(plugin), self.tools, self.stubs, self.routes)
        try:
            try:
                self.pm.check_pending()
            except pluggy.PluginValidationError as exc:
                raise PluginError(f"unknown hook (misspelled?): {exc}") from None
            contexts: list[PluginContext] = []

            def context() -> PluginContext:
                if not contexts:
                    contexts.append(self.context_factory(src.name))
                return contexts[0]

            call_hooks(self.pm, plugin, staging, context)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a failing hook skips the plugin
            self.pm.unregister(plugin)
            msg = str(exc) if isinstance(exc, (PluginError, ToolRegistrationError, ConfigError)) else f"{type(exc).__name__}: {exc}"
            self._failed(src, location, msg)
            return
        for tool in staging.tools:
            self.tools[tool.name] = src.name
        for stub in staging.stubs:
            self.stubs[stub.tool] = f"plugin {src.name}"
        for route in staging.routes:
            self.routes[(route.method, route.path)] = src.name
        self.accepted.append(staging)
        said = contexts[0].inactive_reasons if contexts else []
        needs = contexts[0].unconfigured_reasons if contexts else []
        warnings = list(dict.fromkeys(contexts[0].warnings)) if contexts else []
        self.report.append(PluginReport(name=src.name, source=src.source, location=location, ok=True,
                                        registered=staging.registered(), inactive=said[-1] if said else None,
                                        unconfigured=needs[-1] if needs else None,
                                        warning="; ".join(warnings) or None))
        log.info("plugin_loaded", plugin=src.name, source=src.source, **{k: len(v) for k, v in staging.registered().items()})

    def _failed(self, src: PluginSource, location: str, error: str) -> None:
        log.warning("plugin_failed", plugin=src.name, source=src.source, location=location, error=error)
        self.report.append(PluginReport(name=src.name, source=src.source, location=location, ok=False, error=error))

    def result(self) -> Contributions:
        tools = ToolRegistry(t for s in self.accepted for t in s.tools)
        return Contributions(
            tools=tools,
            stubs=DEFAULT_STUBS + tuple(st for s in self.accepted for st in s.stubs),
            persona_paths=tuple(p for s in self.accepted for p in s.personas),
            skill_paths=tuple(p for s in self.accepted for p in s.skills),
            routes=tuple(r for s in self.accepted for r in s.routes),
            services=tuple(sv for s in self.accepted for sv in s.services),
            report=self.report,
        )


def collect(
    config: Config,
    context_factory: ContextFactory | None = None,
    *,
    builtins: Iterable[str] = BUILTIN_PLUGINS,
    entry_points: bool = True,
    extra_paths: Sequence[Path] | None = None,
) -> Contributions:
    """Load every plugin and return what they registered (a new value each call).

    ``context_factory(plugin_name) -> PluginContext`` builds the ``context``
    argument of ``ongrid_register_tools`` / ``ongrid_register_routes``
    (default: :func:`default_context_factory`).  ``builtins``: module names
    of the built-in plugins.  ``entry_points``: also load the environment's
    ``ongrid`` entry points.  ``extra_paths``: plugin folders (default:
    :func:`plugin_search_paths`).  Never raises for a plugin's fault; every
    failure is in ``report``.
    """
    factory = context_factory or default_context_factory(config)
    paths = plugin_search_paths(config) if extra_paths is None else [Path(p) for p in extra_paths]
    collector = _Collector(config, factory)
    sources = builtin_sources(builtins)
    path_srcs, path_reports = path_sources(paths)
    if entry_points:
        # marketplace folders are never environment plugins, even when an earlier
        # collect put them on sys.path (an uninstall must not bring them back)
        sources += entry_point_sources(exclude_paths=[*paths, config.state_path / "plugins"])
    sources += path_srcs
    for src in sources:
        collector.load(src)
    collector.report.extend(path_reports)
    return collector.result()


def known_tool_names(config: Config, context_factory: ContextFactory | None = None) -> set[str]:
    """Names of every tool a persona may list: the plugins' tools and the control tools."""
    contributions = collect(config, context_factory)
    return set(contributions.tools) | set(CONTROL_TOOL_NAMES)
