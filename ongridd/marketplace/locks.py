"""One lock per :class:`~ongridd.runtime.registries.RegistryHolder` for every
writer of the live registries (marketplace install/uninstall, user-agent
edits, hot reload), so a swap built off to the side never drops an edit
made while it was being built."""

from __future__ import annotations

import weakref
from typing import Any

import trio

_LOCKS: weakref.WeakKeyDictionary[Any, trio.Lock] = weakref.WeakKeyDictionary()


def registry_lock(holder: Any) -> trio.Lock:
    """The writers' lock of ``holder`` (created on first use)."""
    lock = _LOCKS.get(holder)
    if lock is None:
        lock = _LOCKS[holder] = trio.Lock()
    return lock
