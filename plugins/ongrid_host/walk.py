"""Filesystem walking with bounds: one filesystem, no symlinks followed,
never /proc, /sys or /dev, a deadline and a stop flag.

The walk is synchronous and meant to run in a worker thread
(:func:`run_walk`); a cancelled Trio call sets the stop flag so the thread
ends promptly instead of running on unseen.
"""

from __future__ import annotations

import os
import stat as statmod
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TypeVar

import attrs
import trio

from ongrid_host.units import is_pseudo_path

T = TypeVar("T")

#: at most this many skipped paths and error samples are kept for the result
MAX_SAMPLES = 10
_CHECK_EVERY = 256


class Entry(NamedTuple):
    """One filesystem entry as both local and remote walks report it.

    ``rel``: path parts below the walk root (``()`` for the root itself);
    ``kind``: ``d`` directory, ``f`` regular file, ``l`` symlink, ``o`` other;
    ``size``: apparent bytes (st_size); ``allocated``: bytes of allocated
    blocks (st_blocks * 512); ``inode``: ``(dev, ino)`` or None;
    ``mtime``: POSIX seconds; ``uid``: the owner's uid (local walks) or
    user name (remote walks report names).
    """

    rel: tuple[str, ...]
    kind: str
    size: int
    allocated: int
    inode: tuple[Any, int] | None
    nlink: int
    mtime: float
    uid: int | str


@attrs.define
class WalkState:
    """Shared between a walk (in a thread) and its caller.

    ``deadline``: a ``time.monotonic()`` value; ``stop``: set when the
    caller is cancelled.  The walk records what it covered and why it
    stopped early (``partial_reason``).
    """

    deadline: float
    stop: threading.Event = attrs.field(factory=threading.Event)
    entries: int = 0
    errors: int = 0
    error_samples: list[dict] = attrs.field(factory=list)
    skipped: list[dict] = attrs.field(factory=list)
    skipped_count: int = 0
    unfinished_dirs: int = 0
    partial_reason: str | None = None

    def should_stop(self) -> bool:
        """True (and ``partial_reason`` set) when the walk must end now."""
        if self.partial_reason is not None:
            return True
        if self.stop.is_set():
            self.partial_reason = "cancelled"
        elif time.monotonic() >= self.deadline:
            self.partial_reason = "time limit reached"
        return self.partial_reason is not None

    def error(self, path: str, exc: OSError) -> None:
        self.errors += 1
        if len(self.error_samples) < MAX_SAMPLES:
            self.error_samples.append({"path": display(path), "error": exc.strerror or str(exc)})

    def skip(self, path: str, reason: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < MAX_SAMPLES:
            self.skipped.append({"path": display(path), "reason": reason})

    def summary(self) -> dict:
        """The keys every walking tool reports.

        ``partial`` is true when the walk stopped early *or* hit paths it
        could not read (permission errors, entries vanishing mid-walk): the
        totals then leave something out.  ``partial_reason`` says which
        (the stop reason first); ``unreadable_paths`` lists at most
        :data:`MAX_SAMPLES` of the paths not read and ``unreadable_count``
        counts them all.
        """
        reasons = [self.partial_reason] if self.partial_reason is not None else []
        if self.errors:
            reasons.append(f"{self.errors} path(s) could not be read by the daemon's user; "
                           "their contents are not counted")
        return {
            "partial": bool(reasons),
            "partial_reason": "; ".join(reasons) or None,
            "unreadable_count": self.errors,
            "unreadable_paths": [s["path"] for s in self.error_samples],
            "unfinished_dirs": self.unfinished_dirs,
            "entries_scanned": self.entries,
            "permission_errors": self.errors,
            "error_samples": self.error_samples,
            "skipped": self.skipped,
            "skipped_count": self.skipped_count,
        }


def display(path: str) -> str:
    """A path safe to put in JSON (undecodable bytes shown as U+FFFD)."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _kind(mode: int) -> str:
    if statmod.S_ISDIR(mode):
        return "d"
    if statmod.S_ISREG(mode):
        return "f"
    if statmod.S_ISLNK(mode):
        return "l"
    return "o"


def entry_from_stat(rel: tuple[str, ...], st: os.stat_result) -> Entry:
    return Entry(rel, _kind(st.st_mode), st.st_size, st.st_blocks * 512, (st.st_dev, st.st_ino),
                 st.st_nlink, st.st_mtime, st.st_uid)


def walk(root: str, state: WalkState) -> Iterator[Entry]:
    """Yield the root and everything below it (depth first, unordered).

    Stays on the root's filesystem, never follows symlinks, skips /proc,
    /sys and /dev (recorded in ``state.skipped``), counts unreadable
    directories and entries in ``state.errors``.  Stops early (setting
    ``state.partial_reason``) at the deadline or when ``state.stop`` is set.
    Raises OSError only for the root itself (missing, unreadable).
    """
    st = os.lstat(root)
    state.entries += 1
    yield entry_from_stat((), st)
    if not statmod.S_ISDIR(st.st_mode):
        return
    root_dev = st.st_dev
    stack: list[tuple[str, tuple[str, ...]]] = [(root, ())]
    while stack:
        if state.should_stop():
            state.unfinished_dirs += len(stack)
            return
        path, rel = stack.pop()
        try:
            it = os.scandir(path)
        except OSError as exc:
            state.error(path, exc)
            continue
        with it:
            for n, item in enumerate(it):
                if n % _CHECK_EVERY == _CHECK_EVERY - 1 and state.should_stop():
                    state.unfinished_dirs += len(stack) + 1
                    return
                child = os.path.join(path, item.name)
                try:
                    est = item.stat(follow_symlinks=False)
                except OSError as exc:
                    state.error(child, exc)
                    continue
                if statmod.S_ISDIR(est.st_mode):
                    if is_pseudo_path(child):
                        state.skip(child, "pseudo filesystem (never walked)")
                        continue
                    if est.st_dev != root_dev:
                        state.skip(child, "another filesystem (mount point)")
                        continue
                    stack.append((child, rel + (item.name,)))
                state.entries += 1
                yield entry_from_stat(rel + (item.name,), est)


async def run_walk(fn: Callable[[WalkState], T], *, time_limit_s: float) -> tuple[T, WalkState]:
    """Run ``fn(state)`` in a worker thread with a fresh :class:`WalkState`
    whose deadline is ``time_limit_s`` from now.

    Returns ``(fn's result, state)``.  Cancellation: the call returns at once
    (the thread is abandoned) and the stop flag is set, so the walk ends at
    its next check instead of running on.
    """
    state = WalkState(deadline=time.monotonic() + time_limit_s)
    try:
        result = await trio.to_thread.run_sync(fn, state, abandon_on_cancel=True)
    finally:
        state.stop.set()
    return result, state
