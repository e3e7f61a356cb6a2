"""Change events of folders from the kernel (inotify, through ``inotify_simple``), read on the
Trio event loop: nothing wakes between changes — no thread, no timer.

:func:`folder_changes` yields one batch per burst of changes.  A subfolder created under a
recursively watched folder is watched from then on; the kernel's queue overflowing counts as a
change (the caller reloads everything anyway).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import trio

#: what counts as a change: an entry created, deleted, moved in or out, written, its metadata
#: changed, the watched folder itself deleted or moved
_CHANGES = ("CREATE", "DELETE", "MODIFY", "CLOSE_WRITE", "MOVED_FROM", "MOVED_TO", "ATTRIB", "DELETE_SELF",
            "MOVE_SELF")
#: the most folders one call watches (a recursive root with more is refused: OSError)
MAX_FOLDERS = 10_000


def _mask() -> int:
    from inotify_simple import flags

    mask = 0
    for name in _CHANGES:
        mask |= getattr(flags, name)
    return mask


def _folders(path: Path, recursive: bool) -> Iterable[str]:
    yield str(path)
    if recursive:
        for top, dirs, _files in os.walk(path):
            dirs.sort()
            for name in dirs:
                yield os.path.join(top, name)


async def folder_changes(*paths: Path, debounce_ms: int, recursive: bool,
                         ready: trio.Event | None = None) -> AsyncIterator[int]:
    """For each burst of changes in the folders ``paths`` (and every folder below them when
    ``recursive``), the number of events it held: the first event, then whatever follows within
    ``debounce_ms`` milliseconds, make one batch.

    Raises OSError when inotify cannot be used (none on this system, the limit of watches or
    instances reached, a folder that may not be read or is gone) or a recursive root holds more
    than :data:`MAX_FOLDERS` folders.  Setting the watches up lists the folders in a worker
    thread (a hung network mount stalls only this watch; a cancel abandons it there);
    ``ready`` is set once they are all in place (a change from then on is seen).
    Cancellation ends it at once and closes the inotify descriptor."""
    from inotify_simple import INotify, flags

    mask = _mask()
    inotify = INotify(nonblocking=True)
    fd = inotify.fileno()
    watched: dict[int, str] = {}  # watch descriptor → its folder
    try:
        def watch_all() -> None:
            for path in paths:
                for folder in _folders(path, recursive):
                    if len(watched) >= MAX_FOLDERS:
                        raise OSError(f"more than {MAX_FOLDERS} folders under {path} to watch")
                    watched[inotify.add_watch(folder, mask)] = folder

        await trio.to_thread.run_sync(watch_all, abandon_on_cancel=True)
        if ready is not None:
            ready.set()
        while True:
            await trio.lowlevel.wait_readable(fd)
            events = inotify.read(timeout=0)
            if not events:
                continue
            await trio.sleep(debounce_ms / 1000)
            events += inotify.read(timeout=0)
            if recursive:
                created = [e for e in events if e.mask & flags.ISDIR and e.mask & (flags.CREATE | flags.MOVED_TO)]
                if created:
                    await trio.to_thread.run_sync(_watch_created, inotify, mask, created, watched,
                                                  abandon_on_cancel=True)
            yield len(events)
    finally:
        trio.lowlevel.notify_closing(fd)
        inotify.close()


def _watch_created(inotify: Any, mask: int, created: list[Any], watched: dict[int, str]) -> None:
    """Watch the folders (and their subfolders) that were ``created`` (or moved in) under the
    folders ``watched``; a folder gone again meanwhile is skipped, and none past
    :data:`MAX_FOLDERS`."""
    for event in created:
        parent = watched.get(event.wd)
        if parent is None:
            continue
        for folder in _folders(Path(parent) / event.name, True):
            if len(watched) >= MAX_FOLDERS:
                return
            try:
                watched[inotify.add_watch(folder, mask)] = folder
            except OSError:
                continue
