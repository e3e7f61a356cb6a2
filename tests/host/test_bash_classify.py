"""host_bash's verdict is computed once and carried to its handler; the
handler runs a ``write`` verdict only with the gate's approval of that very
call; a hung mount while resolving paths refuses instead of stalling."""

from __future__ import annotations

import threading

import attrs
import pytest
import trio
from ongrid_host import bash_policy, realpath

from ongridd.errors import ToolError
from ongridd.plugins.api import Approval, ToolCallContext, call_key
from tests.host.conftest import APPROVE, make_tools, run_through_runner


async def test_the_verdict_is_computed_once_per_call(monkeypatch, tmp_path):
    calls = []
    real = bash_policy.analyze

    def counting(cmd, policy=None):
        calls.append(cmd)
        return real(cmd, policy)

    monkeypatch.setattr("ongrid_host.tools.analyze", counting)
    tools = make_tools()
    marker = tmp_path / "m"
    result, store = await run_through_runner(tools, "host_bash", {"cmd": f"touch {marker}", "reason": "test"},
                                             read_only=False, reviewer=APPROVE)
    assert result.status == "ok" and marker.exists() and calls == [f"touch {marker}"]
    assert [p["decision"] for p in store.proposals] == ["approve"]
    calls.clear()
    result, _ = await run_through_runner(tools, "host_bash", {"cmd": "uname -s"}, read_only=True)
    assert result.status == "ok" and calls == ["uname -s"]


async def test_a_write_needs_the_approval_of_that_very_call(tmp_path):
    tool = make_tools()["host_bash"]
    marker = tmp_path / "m"
    args = {"cmd": f"touch {marker}", "reason": "test"}
    other = {"cmd": "uname -a", "reason": "test"}
    base = ToolCallContext(session_id="s", agent="specialist-test")
    for ctx in (base, attrs.evolve(base, approval=Approval(proposal_id="p", call_key=call_key("host_bash", other)))):
        with pytest.raises(ToolError, match=r"runs only after the review gate approved this very call"):
            await tool.handler(args, ctx)
    assert not marker.exists()
    approved = attrs.evolve(base, approval=Approval(proposal_id="p", call_key=call_key("host_bash", args)))
    result = await tool.handler(args, approved)
    assert result["class"] == "write" and marker.exists()


async def test_a_hung_mount_refuses_the_call_and_the_loop_keeps_running(monkeypatch):
    release = threading.Event()
    real_lstat = realpath.os.lstat

    def lstat(path, *a, **kw):
        if str(path).startswith("/mnt/hung-nfs"):
            release.wait(30)
        return real_lstat(path, *a, **kw)

    monkeypatch.setattr(realpath.os, "lstat", lstat)
    tools = make_tools()
    tools["host_bash"] = attrs.evolve(tools["host_bash"], classify_timeout_s=0.3)
    ticks = []

    async def ticker():
        while True:
            ticks.append(1)
            await trio.sleep(0.05)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            with trio.fail_after(5):
                result, _ = await run_through_runner(tools, "host_bash", {"cmd": "cat /mnt/hung-nfs/app.log"},
                                                     read_only=True)
            nursery.cancel_scope.cancel()
    finally:
        release.set()
    assert result.status == "error" and "could not decide within 0.3 s" in result.content
    assert len(ticks) >= 4
