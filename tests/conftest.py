"""Shared test helpers.

Tests that need a real server (PostgreSQL, Prometheus, Alertmanager, sshd)
call :func:`need` — on a developer machine without the server they skip
with the reason; in CI (``CI=true``) a missing server is a failure.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Make the first-party plugin packages importable when running from a checkout.
for p in (str(ROOT), str(ROOT / "plugins")):
    if p not in sys.path:
        sys.path.insert(0, p)


def ipv6_loopback() -> bool:
    """Whether this machine can bind ``::1`` (IPv6 tests skip without it)."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def need(condition: bool, reason: str) -> None:
    """Skip (developer machine) or fail (CI) when ``condition`` is false."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


# ---- tests that need the machine to themselves ---------------------------------------------
#
# The suite runs on every core (pytest-xdist).  A few tests drive a daemon at full load (the
# row-count load, the kill -9 loop, the 5,000-file persona fuzz, the persona bombs) and would
# fail for want of CPU when another worker runs beside them.  Marked ``exclusive``, such a test
# takes an exclusive lock that every other test takes shared: it waits for the tests running
# now to end, and the other workers wait at their next test until it is done.  The lock is
# taken outside pytest-timeout's timer (an outer hook wrapper), so waiting never counts
# against a test's time limit.


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "exclusive: runs with no other test beside it (heavy load)")


def _lock_paths() -> tuple[Path, Path] | None:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # the same in every worker of one run
    if not run:  # not under xdist: nothing runs beside anything
        return None
    import tempfile

    base = Path(tempfile.gettempdir()) / f"ongrid-tests-{run}"
    return base.with_suffix(".gate"), base.with_suffix(".lock")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    paths = _lock_paths()
    if paths is None:
        yield
        return
    import fcntl

    # A writer-preferring lock from two flock(2) files: an exclusive test holds the gate, so
    # no new test starts, then waits on the main lock for the running ones to end.  Other tests
    # pass the gate (shared, for a moment) and hold the main lock shared while they run.
    exclusive = item.get_closest_marker("exclusive") is not None
    with open(paths[0], "a+") as gate, open(paths[1], "a+") as main:
        if exclusive:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(main, fcntl.LOCK_EX)
        else:
            fcntl.flock(gate, fcntl.LOCK_SH)
            fcntl.flock(main, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(main, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _throttles_start_fresh() -> None:
    """Every log-line throttle (``ongridd.logs.Throttle``) starts the test with no line written: a
    line an earlier test made in this process must not hold back the one this test looks for."""
    from ongridd import logs

    for throttle in list(logs._THROTTLES):
        throttle.reset()
