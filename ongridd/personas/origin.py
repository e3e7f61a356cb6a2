"""Where a loaded persona came from, and the load warnings about its file.

:func:`persona_origin` answers ``builtin`` (the built-in agents folder),
``plugin:<name>`` (a file or folder a plugin registered) or ``user`` (an
agents folder of the operator).  :func:`persona_warnings` picks the warnings
of the last load that name the persona's file (every load warning starts with
its path).  Pure functions on paths; no file is read.
"""

from __future__ import annotations

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


__all__ = ["persona_origin", "persona_warnings"]
