"""Plugin staging: the validating ``register`` callbacks (docs/architecture.md §13).

One :class:`Staging` per plugin being loaded holds what that plugin registered
(tools, redirect stubs, persona/skill paths, routes, services), checking each
registration against the rules and against names other plugins already took.
:func:`call_hooks` calls one plugin's hooks through pluggy with those
callbacks.  The collector keeps a staging only if the whole plugin succeeded.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import attrs
import pluggy

from ongridd.errors import PluginError, ToolRegistrationError
from ongridd.plugins import DAEMON_FOLDERS, DAEMON_PATHS, daemon_path  # noqa: F401 - re-exported
from ongridd.plugins.api import PluginContext
from ongridd.tools.registry import validate_tool
from ongridd.tools.spec import CONTROL_TOOL_NAMES, TOOL_NAME_RE, RedirectStub, Tool

HOOK_NAMES = (
    "ongrid_register_tools",
    "ongrid_register_redirect_stubs",
    "ongrid_register_personas",
    "ongrid_register_skills",
    "ongrid_register_routes",
    "ongrid_register_services",
)
ROUTE_AUTH = ("token", "none")
#: a route's path: ``/``-separated segments of ASCII letters, digits and ``. _ ~ -`` (no empty,
#: ``.`` or ``..`` segment, no percent-escape, no other character: none can pass for another path,
#: as ``//healthz`` or ``/healthz`` with a zero-width space after it did), at most 200 characters
ROUTE_PATH_RE = re.compile(r"(?:/[A-Za-z0-9._~-]+)+\Z")
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
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


class Staging:
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
        if daemon_path(path):
            raise self._fail(f"route {method.upper()} {path}: the daemon serves that path itself "
                             f"({', '.join(DAEMON_PATHS)}, and {', '.join(DAEMON_FOLDERS)} with every path below "
                             "them); choose another, e.g. under /api/plugins/<your plugin>/")
        if len(path) > 200 or not ROUTE_PATH_RE.match(path) or any(seg in (".", "..") for seg in path.split("/")):
            raise self._fail(f"route: path must be '/'-separated segments of ASCII letters, digits and '. _ ~ -' "
                             f"(no empty, '.' or '..' segment, at most 200 characters), got {path!r}")
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


def plugin_dir(plugin: Any) -> Path | None:
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


def call_hooks(pm: pluggy.PluginManager, plugin: Any, staging: Staging,
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
