"""Small value helpers shared by the host tools: sizes, times, paths."""

from __future__ import annotations

import datetime as _dt
import os
import re

from ongridd.plugins.api import ToolError

#: Pseudo filesystems that are never walked (and refused as walk roots).
PSEUDO_ROOTS = ("/proc", "/sys", "/dev")

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:I?B)?\s*$", re.IGNORECASE)


def human_bytes(n: float) -> str:
    """``1536`` → ``"1.5 KiB"`` (binary units, one decimal)."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover - unreachable


def parse_size(value: int | str, *, field: str = "min_size") -> int:
    """Bytes from an int or a string like ``"10M"``, ``"1.5G"``, ``"512k"``,
    ``"2MiB"`` (binary units: K = 1024).  Raises ToolError naming ``field``."""
    if isinstance(value, bool):
        raise ToolError(f"{field}: expected bytes (int) or a size like '10M', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ToolError(f"{field}: must be >= 0, got {value}")
        return value
    if isinstance(value, str):
        m = _SIZE_RE.match(value)
        if m:
            return int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    raise ToolError(f"{field}: expected bytes (int) or a size like '10M', '1G', '512K', got {value!r}")


def iso_utc(ts: float | None) -> str | None:
    """POSIX seconds → ISO 8601 UTC (``2024-05-01T12:00:00+00:00``); None stays None."""
    if ts is None:
        return None
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).isoformat(timespec="seconds")


def is_pseudo_path(path: str) -> bool:
    """True when ``path`` (absolute, normalised) is /proc, /sys, /dev or below."""
    return any(path == root or path.startswith(root + "/") for root in PSEUDO_ROOTS)


def check_walk_root(path: str, *, field: str = "paths", local: bool = True) -> str:
    """Normalise a walk root given by the model and refuse what may not be walked.

    Returns the absolute, normalised path.  With ``local`` the resolved
    path is checked too, so a symlink to /proc is caught (remote walks prune
    the pseudo filesystems on the remote side).  Raises ToolError for a relative path, /proc, /sys,
    /dev (or below), or a path containing NUL.
    """
    if not isinstance(path, str) or not path or "\0" in path:
        raise ToolError(f"{field}: {path!r} is not a usable path")
    if not path.startswith("/"):
        raise ToolError(f"{field}: {path!r} is not absolute; give an absolute path such as /var/log")
    norm = os.path.normpath(path)
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    candidates = (norm, os.path.realpath(norm)) if local else (norm,)
    for candidate in candidates:
        if is_pseudo_path(candidate):
            raise ToolError(f"{field}: {path!r} is under /proc, /sys or /dev, which are never walked "
                            f"(pseudo filesystems: their sizes are not disk usage)")
    return norm
