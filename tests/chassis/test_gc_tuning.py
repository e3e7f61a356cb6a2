"""The collector around start-up: ``ongridd serve`` freezes its imports
without collecting; once start-up is done ``tune_gc`` unfreezes, collects
(garbage frozen with the imports is freed), freezes again and leaves the
collector on with the daemon's thresholds."""

from __future__ import annotations

import gc
import weakref

from ongridd.daemon import GC_THRESHOLDS, tune_gc


class _Node:
    def __init__(self) -> None:
        self.peer: _Node | None = None


def test_tune_gc_frees_garbage_frozen_before_start_up_and_leaves_the_collector_on() -> None:
    thresholds, enabled = gc.get_threshold(), gc.isenabled()
    gc.disable()
    try:
        a, b = _Node(), _Node()
        a.peer, b.peer = b, a  # a cycle: only the collector frees it
        alive = weakref.ref(a)
        del a, b
        gc.freeze()  # what serve does after its imports
        gc.enable()
        gc.collect()
        assert alive() is not None, "a frozen cycle is not collected"
        tune_gc()
        assert alive() is None
        assert gc.isenabled()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        (gc.enable if enabled else gc.disable)()
