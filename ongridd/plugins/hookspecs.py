"""Hook specifications (docs/architecture.md §13).

Every hook hands the plugin a ``register`` callback so the core validates
what it receives.  pluggy calls hooks with keyword arguments only.
"""

from __future__ import annotations

import pluggy

PROJECT = "ongrid"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def ongrid_register_tools(register, context):
    """Register tools: ``register(tool: ongridd.plugins.api.Tool)``.

    ``context`` is a :class:`ongridd.plugins.api.PluginContext`.  Raising
    here makes the whole plugin be reported and skipped.
    """


@hookspec
def ongrid_register_redirect_stubs(register):
    """Register redirect stubs: ``register(tool=..., persona=..., reason=...)``."""


@hookspec
def ongrid_register_personas(register):
    """Register persona files or folders: ``register(path)`` (str or Path)."""


@hookspec
def ongrid_register_skills(register):
    """Register skill files or folders: ``register(path)`` (str or Path)."""


@hookspec
def ongrid_register_routes(register, context):
    """Register HTTP routes: ``register(method, path, handler, auth="token")``.

    ``handler(request: PluginRequest) -> PluginResponse | dict | list``
    (async).  Routes are mounted under the daemon's app with its auth.
    ``auth="none"``: a route that verifies the caller itself (a platform
    webhook with its own signature): no bearer token, no loopback Host
    check; the handler gets the raw body in ``request.body``.
    """


@hookspec
def ongrid_register_services(register, context):
    """Register long-running tasks: ``register(name, fn)``.

    ``fn()`` is async; the daemon starts it in its nursery once it serves
    and cancels it at shutdown.  A service that raises is logged and not
    restarted (a loop that must survive outages handles them itself).
    """
