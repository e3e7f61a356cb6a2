"""The plugin manager (docs/architecture.md §13): load plugins, call their hooks with a
validating ``register`` callback, and build the contributions off to the side.

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

import importlib
import importlib.metadata as md
import inspect
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import attrs
import pluggy

from ongridd.config import Config, HostConfig
from ongridd.errors import PluginError, ToolRegistrationError
from ongridd.logs import get_logger
from ongridd.plugins import hookspecs
from ongridd.plugins.api import PluginContext
from ongridd.tools.registry import ToolRegistry, validate_tool
from ongridd.tools.spec import CONTROL_TOOL_NAMES, TOOL_NAME_RE, RedirectStub, Tool
from ongridd.tools.stubs import DEFAULT_STUBS

log = get_logger(__name__)

BUILTIN_PLUGINS = ("ongrid_host", "ongrid_prometheus", "ongrid_incidents", "ongrid_knowledge", "ongrid_topology",
                   "ongrid_loki", "ongrid_tempo",
                   "ongrid_slack", "ongrid_telegram", "ongrid_feishu")
ENTRY_POINT_GROUP = hookspecs.PROJECT
HOOK_NAMES = (
    "ongrid_register_tools",
    "ongrid_register_redirect_stubs",
    "ongrid_register_personas",
    "ongrid_register_skills",
    "ongrid_register_routes",
    "ongrid_register_services",
)
ROUTE_AUTH = ("token", "none")
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

ContextFactory = Callable[[str], PluginContext]


class PluginRoute(NamedTuple):
    """An HTTP route a plugin registered: ``handler(PluginRequest)`` is async.
    ``auth``: ``token`` (the daemon's auth) or ``none`` (the handler verifies
    the caller; raw body, no loopback Host check)."""

    plugin: str
    method: str
    path: str
    handler: Any
    auth: str = "token"


class PluginService(NamedTuple):
    """A long-running task a plugin registered: ``fn()`` is async."""

    plugin: str
    name: str
    fn: Any


@attrs.frozen(kw_only=True)
class PluginReport:
    """What happened to one plugin.

    ``source``: ``builtin``, ``entry point`` or ``path``.  ``location``: the
    module file, distribution or folder it came from.  ``ok``: loaded and
    every registration kept.  ``disabled``: named in ``plugins.disabled``
    (not loaded).  ``error``: why it failed.  ``registered``: what it
    registered, ``{"tools": [...], "redirect_stubs": [...], "personas": [...],
    "skills": [...], "routes": ["GET /path", ...]}`` (empty when it failed).
    """

    name: str
    source: str
    ok: bool
    error: str | None = None
    registered: dict[str, list[str]] = attrs.field(factory=dict)
    location: str = ""
    disabled: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "source": self.source, "location": self.location, "ok": self.ok,
            "disabled": self.disabled, "error": self.error, "registered": self.registered,
        }


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


@attrs.frozen(kw_only=True)
class PluginSource:
    """A plugin to load: ``name``, ``source`` kind, ``location``, and ``load()``
    returning the plugin object (a module or any object with hook functions)."""

    name: str
    source: str
    location: str
    load: Callable[[], Any] = attrs.field(repr=False)


# ---- where plugins come from -------------------------------------------------


def source_plugins_dir() -> Path | None:
    """``<checkout>/plugins`` when running from a source tree (not installed), else None."""
    candidate = Path(__file__).resolve().parents[2] / "plugins"
    if candidate.is_dir() and any(candidate.glob("ongrid_*/__init__.py")):
        return candidate
    return None


def plugin_search_paths(config: Config) -> list[Path]:
    """The marketplace plugin folders: every directory ``<state_dir>/plugins/<name>``."""
    root = config.state_path / "plugins"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def add_to_sys_path(path: Path) -> None:
    """Put ``path`` on ``sys.path`` (once) so its packages import."""
    text = str(Path(path).resolve())
    if text not in sys.path:
        sys.path.append(text)


def _module_location(module: Any) -> str:
    file = getattr(module, "__file__", None)
    if file:
        return str(file)
    paths = list(getattr(module, "__path__", None) or ())  # a namespace package
    return str(paths[0]) if paths else str(getattr(module, "__name__", ""))


def builtin_sources(names: Iterable[str] = BUILTIN_PLUGINS) -> list[PluginSource]:
    """Built-in plugins, imported by module name (their location is filled at load)."""
    extra = source_plugins_dir()
    if extra is not None:
        add_to_sys_path(extra)
    return [PluginSource(name=n, source="builtin", location=n, load=lambda n=n: importlib.import_module(n))
            for n in names]


def _ep_dist_name(ep: md.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return ""
    try:
        return f"{dist.metadata['Name']} {dist.version}"
    except Exception:  # noqa: BLE001 - broken metadata of a foreign distribution
        return ""


def entry_point_sources(exclude_paths: Sequence[Path] = ()) -> list[PluginSource]:
    """Entry points of group ``ongrid`` in the environment, except those of
    distributions under ``exclude_paths`` (reported as ``path`` plugins)."""
    excluded = [Path(p).resolve() for p in exclude_paths]
    out = []
    for ep in md.entry_points(group=ENTRY_POINT_GROUP):
        base = _dist_base(ep)
        if base is not None and any(base == p or p in base.parents for p in excluded):
            continue
        out.append(PluginSource(name=ep.name, source="entry point", location=_ep_dist_name(ep) or ep.value,
                                load=ep.load))
    return out


def _dist_base(ep: md.EntryPoint) -> Path | None:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return None
    try:
        return Path(str(dist.locate_file(""))).resolve()
    except Exception:  # noqa: BLE001 - broken metadata of a foreign distribution
        return None


def path_sources(paths: Sequence[Path]) -> tuple[list[PluginSource], list[PluginReport]]:
    """Entry points of group ``ongrid`` in each folder (added to ``sys.path``).

    A folder without such an entry point gives a failed report for the folder name.
    """
    sources: list[PluginSource] = []
    reports: list[PluginReport] = []
    for path in paths:
        path = Path(path)
        found = False
        if path.is_dir():
            add_to_sys_path(path)
            for dist in md.distributions(path=[str(path)]):
                for ep in dist.entry_points:
                    if ep.group == ENTRY_POINT_GROUP:
                        found = True
                        sources.append(PluginSource(name=ep.name, source="path", location=str(path), load=ep.load))
        if not found:
            reports.append(PluginReport(name=path.name, source="path", location=str(path), ok=False,
                                        error=f"no '{ENTRY_POINT_GROUP}' entry point found in {path}"))
    return sources, reports


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


# ---- registration ------------------------------------------------------------


class _Staging:
    """What one plugin registered, kept only if the whole plugin succeeds."""

    def __init__(self, name: str, base_dir: Path | None, taken_tools: dict[str, str],
                 taken_stubs: dict[str, str], taken_routes: dict[tuple[str, str], str]):
        self.name = name
        self.base_dir = base_dir
        self.tools: list[Tool] = []
        self.stubs: list[RedirectStub] = []
        self.personas: list[Path] = []
        self.skills: list[Path] = []
        self.routes: list[PluginRoute] = []
        self.services: list[PluginService] = []
        self.errors: list[str] = []
        self._taken_tools = taken_tools
        self._taken_stubs = taken_stubs
        self._taken_routes = taken_routes

    def _fail(self, message: str) -> ToolRegistrationError:
        self.errors.append(message)
        return ToolRegistrationError(message)

    def register_tool(self, tool: Any = None, *extra: Any) -> None:
        if extra or not isinstance(tool, Tool):
            raise self._fail(f"register(tool) expects one ongridd Tool, got {type(tool).__name__}")
        tool = attrs.evolve(tool, plugin=self.name)
        if tool.name in CONTROL_TOOL_NAMES:
            raise self._fail(f"tool name {tool.name!r} is reserved for the runtime")
        try:
            validate_tool(tool)
        except ToolRegistrationError as exc:
            raise self._fail(str(exc)) from None
        mine = {t.name for t in self.tools}
        owner = self._taken_tools.get(tool.name) or (self.name if tool.name in mine else None)
        if owner is not None:
            raise self._fail(f"duplicate tool name {tool.name!r}: registered by plugin {owner} and by plugin {self.name}")
        self.tools.append(tool)

    def register_stub(self, tool: Any = None, persona: Any = None, reason: Any = None) -> None:
        for key, value in (("tool", tool), ("persona", persona), ("reason", reason)):
            if not isinstance(value, str) or not value.strip():
                raise self._fail(f"redirect stub: {key} must be a non-empty string, got {value!r}")
        if not TOOL_NAME_RE.match(tool):
            raise self._fail(f"redirect stub: invalid tool name {tool!r}")
        owner = self._taken_stubs.get(tool) or (self.name if any(s.tool == tool for s in self.stubs) else None)
        if owner is not None:
            raise self._fail(f"duplicate redirect stub {tool!r}: registered by {owner} and by plugin {self.name}")
        self.stubs.append(RedirectStub(tool=tool, persona=persona.strip(), reason=reason.strip(), plugin=self.name))

    def _path(self, what: str, path: Any) -> Path:
        if not isinstance(path, (str, Path)) or not str(path):
            raise self._fail(f"{what}: register(path) expects a path, got {type(path).__name__}")
        p = Path(path)
        if not p.is_absolute() and self.base_dir is not None:
            p = self.base_dir / p
        if not p.exists():
            raise self._fail(f"{what}: {p} does not exist")
        return p.resolve()

    def register_persona(self, path: Any = None) -> None:
        self.personas.append(self._path("persona", path))

    def register_skill(self, path: Any = None) -> None:
        self.skills.append(self._path("skill", path))

    def register_service(self, name: Any = None, fn: Any = None) -> None:
        if not isinstance(name, str) or not name.strip() or len(name) > 100:
            raise self._fail(f"service: name must be a non-empty string of at most 100 characters, got {name!r}")
        if not callable(fn):
            raise self._fail(f"service {name}: fn must be an async callable")
        if any(s.name == name for s in self.services):
            raise self._fail(f"duplicate service {name!r} in plugin {self.name}")
        self.services.append(PluginService(self.name, name, fn))

    def register_route(self, method: Any = None, path: Any = None, handler: Any = None, *,
                       auth: Any = "token") -> None:
        if auth not in ROUTE_AUTH:
            raise self._fail(f"route: auth must be one of {', '.join(ROUTE_AUTH)}, got {auth!r}")
        if not isinstance(method, str) or method.upper() not in HTTP_METHODS:
            raise self._fail(f"route: method must be one of {', '.join(HTTP_METHODS)}, got {method!r}")
        if not isinstance(path, str) or not path.startswith("/") or " " in path:
            raise self._fail(f"route: path must be a string starting with '/', got {path!r}")
        if not callable(handler):
            raise self._fail(f"route {method.upper()} {path}: handler must be an async callable")
        key = (method.upper(), path)
        owner = self._taken_routes.get(key) or (self.name if any((r.method, r.path) == key for r in self.routes) else None)
        if owner is not None:
            raise self._fail(f"duplicate route {key[0]} {path}: registered by {owner} and by plugin {self.name}")
        self.routes.append(PluginRoute(self.name, key[0], path, handler, auth))

    def registered(self) -> dict[str, list[str]]:
        out = {
            "tools": sorted(t.name for t in self.tools),
            "redirect_stubs": sorted(s.tool for s in self.stubs),
            "personas": [str(p) for p in self.personas],
            "skills": [str(p) for p in self.skills],
            "routes": [f"{r.method} {r.path}" + (" (auth=none)" if r.auth == "none" else "") for r in self.routes],
            "services": [s.name for s in self.services],
        }
        return {k: v for k, v in out.items() if v}


def _plugin_dir(plugin: Any) -> Path | None:
    file = getattr(plugin, "__file__", None)
    if file is None:
        module = sys.modules.get(getattr(plugin, "__module__", "") or "")
        file = getattr(module, "__file__", None)
    return Path(file).resolve().parent if file else None


def _own_hookimpls(pm: pluggy.PluginManager, plugin: Any) -> dict[str, Any]:
    """``{hook name: HookImpl}`` for one plugin."""
    out = {}
    for caller in pm.get_hookcallers(plugin) or ():
        for impl in caller.get_hookimpls():
            if impl.plugin is plugin:
                out[caller.name] = impl
    return out


def _call_hooks(pm: pluggy.PluginManager, plugin: Any, staging: _Staging,
                context: Callable[[], PluginContext]) -> None:
    impls = _own_hookimpls(pm, plugin)
    registers = {
        "ongrid_register_tools": staging.register_tool,
        "ongrid_register_redirect_stubs": staging.register_stub,
        "ongrid_register_personas": staging.register_persona,
        "ongrid_register_skills": staging.register_skill,
        "ongrid_register_routes": staging.register_route,
        "ongrid_register_services": staging.register_service,
    }
    for hook in HOOK_NAMES:
        impl = impls.get(hook)
        if impl is None:
            continue
        if impl.hookwrapper or impl.wrapper:
            raise PluginError(f"{hook}: hook wrappers are not supported")
        caller = getattr(pm.hook, hook)
        kwargs: dict[str, Any] = {"register": registers[hook]}
        if caller.spec is not None and "context" in caller.spec.argnames:
            # built only for a plugin that asks for it (a listing never needs one)
            kwargs["context"] = context() if "context" in impl.argnames else None
        # through pluggy (tracing, hook monitoring), restricted to this one plugin
        others = [p for p in pm.get_plugins() if p is not plugin]
        for result in pm.subset_hook_caller(hook, remove_plugins=others)(**kwargs):
            if inspect.isawaitable(result):
                close = getattr(result, "close", None)
                if close:
                    close()
                raise PluginError(f"{hook} must be a plain function, not async")
        if staging.errors:
            raise PluginError(staging.errors[0])


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
        self.accepted: list[_Staging] = []
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
            location = _module_location(plugin)
        if self.pm.is_registered(plugin):
            self._failed(src, location, "the same plugin object is already registered under another name")
            return
        try:
            self.pm.register(plugin, name=src.name)
        except Exception as exc:  # noqa: BLE001 - PluginValidationError and friends: bad hook signature
            self._failed(src, location, f"invalid hook implementation: {exc}")
            return
        staging = _Staging(src.name, _plugin_dir(plugin), self.tools, self.stubs, self.routes)
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

            _call_hooks(self.pm, plugin, staging, context)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a failing hook skips the plugin
            self.pm.unregister(plugin)
            msg = str(exc) if isinstance(exc, (PluginError, ToolRegistrationError)) else f"{type(exc).__name__}: {exc}"
            self._failed(src, location, msg)
            return
        for tool in staging.tools:
            self.tools[tool.name] = src.name
        for stub in staging.stubs:
            self.stubs[stub.tool] = f"plugin {src.name}"
        for route in staging.routes:
            self.routes[(route.method, route.path)] = src.name
        self.accepted.append(staging)
        self.report.append(PluginReport(name=src.name, source=src.source, location=location, ok=True,
                                        registered=staging.registered()))
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
