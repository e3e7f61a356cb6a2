"""Fixtures of the runtime tests: after every test, every database a daemon
used is checked for the row invariants (docs/architecture.md §4)."""

from __future__ import annotations

import sys

import pytest
from rt_helpers import OPENED_DBS, PLUGIN_NAME, check_invariants, rtt


@pytest.fixture(autouse=True)
def _row_invariants():
    OPENED_DBS.clear()
    rtt.reset()
    before = list(sys.path)
    yield
    # the plugin manager puts each daemon's plugin folder on sys.path; a later
    # daemon in this process must not find the old folder as an entry point
    sys.path[:] = [p for p in sys.path if p in before or f"plugins/{PLUGIN_NAME}" not in p]
    dbs = list(OPENED_DBS)
    OPENED_DBS.clear()
    for db in dbs:
        check_invariants(db, stopped=True)
