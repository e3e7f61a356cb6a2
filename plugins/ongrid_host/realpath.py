"""Resolve a path the way the kernel will, and notice process-specific links.

``os.path.realpath`` follows ``/proc/self/cwd``, ``/proc/self/root``,
``/proc/<pid>/fd/N`` and ``/dev/fd/N`` *as the daemon sees them*; the
command that later opens the path sees its own cwd, root and descriptors.
A symlink planted in ``/tmp`` pointing at ``/proc/self/cwd`` would look
like ``<daemon cwd>/etc/shadow`` here and be ``/etc/shadow`` for ``cat``.
:func:`resolve` therefore walks the path component by component and
reports the first symlink under ``/proc`` whose target leaves ``/proc``
(such a link means something else in another process); the caller refuses
the path.  ``/proc/self`` itself (a link to ``<pid>``, inside ``/proc``) is
fine: it stays process-relative inside ``/proc`` and is judged there.

Errors: ``OSError`` (``ELOOP`` after too many links; ``EACCES`` when a
link cannot be read — the caller fails closed).  Blocking (``lstat``,
``readlink``: a hung mount blocks): call it off the event loop.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections import deque

import attrs

MAX_LINKS = 40


@attrs.frozen
class Resolved:
    """``real``: the resolved absolute path (components that do not exist
    are kept as written).  ``process_link``: the first link under ``/proc``
    whose target leaves ``/proc`` (e.g. ``/proc/self/cwd``), or None."""

    real: str
    process_link: str | None = None


def _under_proc(path: str) -> bool:
    return path == "/proc" or path.startswith("/proc/")


def resolve(path: str) -> Resolved:
    """Resolve the absolute ``path`` (see the module docstring)."""
    if not path.startswith("/"):
        raise ValueError(f"not an absolute path: {path!r}")
    parts = deque(path.split("/"))
    cur = "/"
    links = 0
    process_link: str | None = None
    missing = False
    while parts:
        name = parts.popleft()
        if name in ("", "."):
            continue
        if name == "..":
            cur = posixpath.dirname(cur) or "/"
            continue
        nxt = posixpath.join(cur, name)
        if missing:
            cur = nxt
            continue
        try:
            st = os.lstat(nxt)
        except (FileNotFoundError, NotADirectoryError):
            missing = True  # the rest is kept as written
            cur = nxt
            continue
        if not stat.S_ISLNK(st.st_mode):
            cur = nxt
            continue
        links += 1
        if links > MAX_LINKS:
            raise OSError(errno.ELOOP, "too many levels of symbolic links", path)
        target = os.readlink(nxt)
        if _under_proc(nxt) and process_link is None:
            lands = posixpath.normpath(target if target.startswith("/") else posixpath.join(cur, target))
            if not _under_proc(lands):
                process_link = nxt
        if target.startswith("/"):
            cur = "/"
        parts.extendleft(reversed(target.split("/")))
    return Resolved(cur, process_link)
