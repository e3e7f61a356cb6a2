"""Host commands leave nothing behind: a timeout kills the whole process
group (also children that would outlive their parent), a child left running
after its parent exited is killed, and a remote command is bounded on the
remote side by ``timeout -s KILL``."""

from __future__ import annotations

import time

import trio
from ongrid_host.runner import run_bounded
from ongrid_host.ssh import REMOTE_GRACE_S, remote_bounded


def _alive(pid: int) -> bool:
    """True when ``pid`` runs (a zombie waiting for its reaper counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


async def _gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        await trio.sleep(0.05)
    return False


async def test_timeout_kills_the_whole_process_group():
    result = await run_bounded(["sh", "-c", "sleep 300 & echo $!; wait"], timeout_s=1)
    assert result.timed_out and result.exit_code is None
    child = int(result.text().split()[0])
    assert await _gone(child), "the child outlived the timeout"


async def test_a_child_holding_the_output_open_is_killed_at_the_timeout():
    # the parent exits at once; the child keeps stdout open, so the read waits until the time limit
    result = await run_bounded(["sh", "-c", "sleep 300 & echo $!"], timeout_s=1)
    child = int(result.text().split()[0])
    assert result.timed_out
    assert await _gone(child)


async def test_a_child_left_running_after_its_parent_exited_is_killed():
    result = await run_bounded(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], timeout_s=10)
    assert not result.timed_out and result.exit_code == 0
    child = int(result.text().split()[0])
    assert await _gone(child), "a background child of a finished command kept running"


async def test_cancellation_kills_the_group_too(tmp_path):
    pidfile = tmp_path / "child.pid"
    with trio.move_on_after(1) as scope:
        await run_bounded(["sh", "-c", f"sleep 300 & echo $! > {pidfile}; wait"], timeout_s=30)
    assert scope.cancelled_caught
    assert await _gone(int(pidfile.read_text()))


def test_remote_commands_are_bounded_on_the_remote_side():
    assert remote_bounded(["cat", "--", "a b"], 15) == f"'timeout' '-s' 'KILL' '{15 + REMOTE_GRACE_S}' 'cat' '--' 'a b'"
    assert remote_bounded("echo 1; echo 2", 0.2) == f"'timeout' '-s' 'KILL' '{1 + REMOTE_GRACE_S}' 'sh' '-c' 'echo 1; echo 2'"
    # every word is quoted: the remote shell sees literal words
    assert remote_bounded(["grep", "-e", "$(reboot)", "--", "/x"], 5).endswith("'grep' '-e' '$(reboot)' '--' '/x'")
