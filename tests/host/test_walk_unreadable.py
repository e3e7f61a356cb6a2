"""Honest partial results: a walk that could not read some paths says so (``partial``,
``partial_reason``, a bounded ``unreadable_paths`` and the full ``unreadable_count``)."""

from __future__ import annotations

import time

from ongrid_host.remote import _find_error_path
from ongrid_host.walk import MAX_SAMPLES, WalkState


def test_summary_of_a_walk_with_unreadable_paths_is_partial_and_bounded():
    state = WalkState(deadline=time.monotonic() + 60)
    assert state.summary()["partial"] is False and state.summary()["unreadable_paths"] == []
    for i in range(MAX_SAMPLES + 5):
        state.error(f"/srv/p{i}", PermissionError(13, "Permission denied"))
    out = state.summary()
    assert out["partial"] is True and out["unreadable_count"] == MAX_SAMPLES + 5
    assert out["unreadable_paths"] == [f"/srv/p{i}" for i in range(MAX_SAMPLES)]
    assert out["partial_reason"] == (f"{MAX_SAMPLES + 5} path(s) could not be read by the daemon's user; "
                                     "their contents are not counted")
    state.deadline = 0
    assert state.should_stop()
    assert state.summary()["partial_reason"].startswith("time limit reached; ")


def test_find_error_lines_give_the_path():
    assert _find_error_path("find: '/var/lib/x y': Permission denied") == "/var/lib/x y"
    assert _find_error_path("find: \u2018/root/.cache\u2019: Permission denied") == "/root/.cache"
    assert _find_error_path("find: something else") == "find: something else"
    assert len(_find_error_path("x" * 10_000)) == 1000
