"""The persisting sink: a mutating tool's audit row is committed at once, others wait for group commit."""

from __future__ import annotations

import sqlite3

import trio

from ongridd.kernel import events as ev
from ongridd.runtime.sink import PersistSink
from ongridd.store import open_store
from ongridd.store.writer import running_writer
from ongridd.tools.spec import ToolResult


def _audited(db: str) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return sorted(r[0] for r in con.execute("SELECT tool_name FROM audit_logs"))
    finally:
        con.close()


async def test_a_mutating_tools_audit_row_is_not_held_for_group_commit(tmp_path):
    db = tmp_path / "ongrid.db"
    async with open_store(f"sqlite:///{db}") as store:
        coord, _ = await store.get_or_create_coordinator("alice", "main")
        async with running_writer(store, linger_s=60.0) as writer:  # nothing else ends the hold
            sink = PersistSink(writer, coord["id"], known_tools={"restart_unit", "disk_usage"},
                               mutating_tools={"restart_unit"})
            for name in ("disk_usage", "restart_unit"):
                await sink(ev.ToolEndEvent(call_id=f"call-{name}", name=name, arguments="{}",
                                           result=ToolResult(call_id=f"call-{name}", name=name, content="done")))
            with trio.fail_after(10):
                while "restart_unit" not in _audited(str(db)):
                    await trio.sleep(0.02)
            # the read-only call's row was queued first, so it rides along in the same commit
            assert _audited(str(db)) == ["disk_usage", "restart_unit"]
            writes_before = writer.committed
            await sink(ev.ToolEndEvent(call_id="call-3", name="disk_usage", arguments="{}",
                                       result=ToolResult(call_id="call-3", name="disk_usage", content="again")))
            await trio.sleep(0.3)
            assert writer.committed == writes_before  # held: nobody waits and the linger is long
        assert _audited(str(db)) == ["disk_usage", "disk_usage", "restart_unit"]  # the drain at close
