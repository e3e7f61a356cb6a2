"""No lost rows, seen from a turn: a write that finally fails ends the turn
with an ``error`` frame (``internal``) and an ERROR log line, the turn's
other rows are all stored, and what a turn wrote is readable as soon as its
last frame arrives."""

from __future__ import annotations

import logging
import sqlite3

from rt_helpers import agent_call, open_daemon


def _echo_script() -> dict:
    return {
        "default": [{"tool_calls": [agent_call("rt-worker", "echo twice")]}, {"content": "all done"}],
        "rt-worker": [{"tool_calls": [{"name": "rt_echo", "arguments": {"text": "one"}},
                                      {"name": "rt_echo", "arguments": {"text": "refuse me"}}]},
                      {"content": "echoed"}],
    }


async def test_a_write_that_cannot_be_stored_ends_the_turn_with_an_error(tmp_path, caplog):
    """The database refuses one audit row for good (a trigger): that row is
    logged as an ERROR naming it and its session, every other row of the
    turn is stored, and the client gets ``error``/``internal``, not a
    silent ``final``."""
    caplog.set_level(logging.WARNING, logger="ongridd")
    async with open_daemon(tmp_path, _echo_script()) as d:
        conn = sqlite3.connect(d.db)
        conn.execute("CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_logs "
                     "WHEN NEW.arguments LIKE '%refuse me%' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
        conn.commit()
        conn.close()
        async with d.ws("refused") as c:
            end = await c.ask("go")
            assert end["type"] == "error" and end["code"] == "internal", end
            assert "audit of session" in end["message"] and "refused by the test" in end["message"]
            (worker,) = d.workers("rt-worker")
            assert worker["status"] == "completed" and worker["closed_at"]
            audit = d.audit()
            assert sorted((a["agent_id"], a["tool_name"]) for a in audit) == [("default", "AgentTool"),
                                                                              ("rt-worker", "rt_echo")]
            roles = [r["role"] for r in d.rows("SELECT role FROM chat_messages WHERE session_id = ? ORDER BY seq",
                                               (worker["id"],))]
            assert roles == ["user", "assistant", "tool", "tool", "assistant"]
            coord = [r["role"] for r in d.rows("SELECT role FROM chat_messages WHERE session_id = ? ORDER BY seq",
                                               (c.session_id,))]
            assert coord == ["user", "assistant", "tool", "assistant"]
    failed = [r for r in caplog.records if r.msg == "store_write_failed"]
    assert len(failed) == 1 and failed[0].levelname == "ERROR"
    assert failed[0].ongrid_fields["what"] == "audit" and failed[0].ongrid_fields["session_id"] == worker["id"]
    assert failed[0].ongrid_fields["owner"] == c.session_id


async def test_a_turns_rows_are_readable_when_its_final_arrives(tmp_path):
    """The final frame is sent only once the transcript, audit rows and the
    closed worker row are committed; the next turn's history has them."""
    script = _echo_script()
    script["default"].append({"content": "second answer"})
    async with open_daemon(tmp_path, script) as d, d.ws("consistent") as c:
        end = await c.ask("go")
        assert (end["type"], end["text"]) == ("final", "all done")
        assert len(d.audit()) == 3
        (worker,) = d.workers()
        assert worker["closed_at"] and worker["status"] == "completed"
        assert len(d.rows("SELECT * FROM chat_messages WHERE session_id = ?", (c.session_id,))) == 4
        second = await c.ask("again")
        assert second["text"] == "second answer"
        history = d.requests("default")[-1].body["messages"]
        assert [m["role"] for m in history if m["role"] != "system"][:4] == ["user", "assistant", "tool",
                                                                             "assistant"]
