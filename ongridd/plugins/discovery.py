"""Plugin discovery: where the plugins come from (docs/architecture.md §13).

Turns the three sources -- built-in module names, the environment's ``ongrid``
entry points, and marketplace plugin folders -- into :class:`PluginSource`
values for the collector in :mod:`ongridd.plugins.manager`, plus a failed
:class:`PluginReport` for a folder that holds no plugin.  Nothing is imported
here except to put folders on ``sys.path``; loading happens in ``load()``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata as md
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from ongridd.config import Config
from ongridd.plugins import hookspecs

BUILTIN_PLUGINS = ("ongrid_host", "ongrid_prometheus", "ongrid_incidents", "ongrid_knowledge", "ongrid_topology",
                   "ongrid_loki", "ongrid_tempo",
                   "ongrid_slack", "ongrid_telegram", "ongrid_feishu")
ENTRY_POINT_GROUP = hookspecs.PROJECT


@attrs.frozen(kw_only=True)
class PluginReport:
    """What happened to one plugin.

    ``source``: ``builtin``, ``entry point`` or ``path``.  ``location``: the
    module file, distribution or folder it came from.  ``ok``: loaded and
    every registration kept.  ``disabled``: named in ``plugins.disabled``
    (not loaded).  ``error``: why it failed.  ``registered``: what it
    registered, ``{"tools": [...], "redirect_stubs": [...], "personas": [...],
    "skills": [...], "routes": ["GET /path", ...]}`` (empty when it failed).  ``inactive``: why a
    plugin that loaded registered nothing (:meth:`PluginContext.inactive`), else None.
    ``unconfigured``: what its registrations still need before they work
    (:meth:`PluginContext.unconfigured`), else None.  ``warning``: what is weaker than it should
    be in its configuration (:meth:`PluginContext.warn`, each said once, joined by ``; ``), else None.
    """

    name: str
    source: str
    ok: bool
    error: str | None = None
    registered: dict[str, list[str]] = attrs.field(factory=dict)
    location: str = ""
    disabled: bool = False
    inactive: str | None = None
    unconfigured: str | None = None
    warning: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "source": self.source, "location": self.location, "ok": self.ok,
            "disabled": self.disabled, "error": self.error, "registered": self.registered,
            "inactive": self.inactive, "unconfigured": self.unconfigured, "warning": self.warning,
        }


@attrs.frozen(kw_only=True)
class PluginSource:
    """A plugin to load: ``name``, ``source`` kind, ``location``, and ``load()``
    returning the plugin object (a module or any object with hook functions)."""

    name: str
    source: str
    location: str
    load: Callable[[], Any] = attrs.field(repr=False)



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


def module_location(module: Any) -> str:
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
    return [PluginSource(name=n, source="builtin", location=n, load=functools.partial(importlib.import_module, n))
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
