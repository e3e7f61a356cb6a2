"""A small bounded LRU memo for per-message work of model requests.

A long thread sends the same history messages on every model call; what is
derived from a message alone (its redacted form, its JSON wire text) is kept
here so each call only works on the messages it has not seen yet.  The memo
is bounded by an entry count and by a total weight (the characters of the
keys' text), the least recently used entries going first.  Not thread-safe:
callers that share one across threads hold their own lock.
"""

from __future__ import annotations

import collections
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class BoundedMemo(Generic[V]):
    """``key → value`` (values never None) with at most ``max_entries``
    entries whose weights sum to at most ``max_weight`` (an entry heavier
    than that is not kept).

    Keys must be hashable; :meth:`get` and :meth:`put` raise ``TypeError``
    for an unhashable key (callers fall back to computing the value).
    """

    def __init__(self, max_entries: int, max_weight: int):
        self.max_entries = max(0, int(max_entries))
        self.max_weight = max(0, int(max_weight))
        self._data: collections.OrderedDict[Hashable, tuple[V, int]] = collections.OrderedDict()
        self._weight = 0

    def __len__(self) -> int:
        return len(self._data)

    @property
    def weight(self) -> int:
        """The summed weight of the entries kept."""
        return self._weight

    def get(self, key: Hashable) -> V | None:
        """The value kept for ``key`` (made the most recently used), else None
        (so values themselves are never None)."""
        hit = self._data.get(key)
        if hit is None:
            return None
        self._data.move_to_end(key)
        return hit[0]

    def put(self, key: Hashable, value: V, weight: int) -> None:
        """Keep ``value`` for ``key`` (replacing an earlier one), then drop the
        least recently used entries until both bounds hold."""
        if weight > self.max_weight or self.max_entries == 0:
            return
        old = self._data.pop(key, None)
        if old is not None:
            self._weight -= old[1]
        self._data[key] = (value, weight)
        self._weight += weight
        while len(self._data) > self.max_entries or self._weight > self.max_weight:
            _, (_, dropped) = self._data.popitem(last=False)
            self._weight -= dropped

    def clear(self) -> None:
        """Drop every entry."""
        self._data.clear()
        self._weight = 0


__all__ = ["BoundedMemo"]
