"""Where a loaded persona came from, and the load warnings about its file.

:func:`persona_origin` answers ``builtin`` (the built-in agents folder),
``plugin:<name>`` (a file or folder a plugin registered) or ``user`` (an
agents folder of the operator).  :func:`persona_warnings` picks the warnings
of the last load that name the persona's file (every load warning starts with
its path); :func:`files_without_persona` the files those warnings are about
that gave no persona at all.  Pure functions on paths; no file is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: at most this many warnings are reported for one persona
MAX_WARNINGS = 50


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def persona_origin(source: str, builtin_root: Path | None, plugins: Iterable[Any] = ()) -> str:
    """``builtin``, ``plugin:<name>`` or ``user`` for a persona file ``source``.

    ``plugins``: plugin reports with ``name`` and ``registered["personas"]``
    (the files or folders each registered)."""
    path = Path(source)
    for report in plugins:
        registered = getattr(report, "registered", None) or {}
        for entry in registered.get("personas", ()):
            if _within(path, Path(entry)):
                return f"plugin:{report.name}"
    if builtin_root is not None and _within(path, Path(builtin_root)):
        return "builtin"
    return "user"


def persona_warnings(source: str, warnings: Iterable[str]) -> list[str]:
    """The warnings that start with ``source`` (the persona's file), at most MAX_WARNINGS."""
    prefix = str(source)
    out = [w for w in warnings if w.startswith(prefix) and w[len(prefix):len(prefix) + 1] in (":", " ", "")]
    return out[:MAX_WARNINGS]


def warning_path(warning: str) -> str:
    """The file (or folder) a load warning is about: the text before its ``:line:`` or
    ``: `` (a warning starts with the path it is about)."""
    match = _PATH_OF.match(warning)
    return match.group(1) if match else warning.partition(": ")[0]


def files_without_persona(warnings: Iterable[str], sources: Iterable[str]) -> list[dict[str, Any]]:
    """``[{path, warnings}]``: the files (and folders) the load ``warnings`` are about that
    produced no persona in ``sources`` — a file skipped as unusable, a duplicate name, an
    unreadable folder — sorted by path, at most MAX_WARNINGS warnings each."""
    used = {str(s) for s in sources}
    by_path: dict[str, list[str]] = {}
    for warning in warnings:
        path = warning_path(warning)
        if path not in used:
            by_path.setdefault(path, []).append(warning)
    return [{"path": path, "warnings": found[:MAX_WARNINGS]} for path, found in sorted(by_path.items())]


#: a warning's path: up to a ``.md`` file's name followed by ``:``
_PATH_OF = re.compile(r"(.+?\.md)(?=:)")

__all__ = ["files_without_persona", "persona_origin", "persona_warnings", "warning_path"]
