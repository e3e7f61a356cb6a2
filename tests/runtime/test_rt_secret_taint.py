"""A tool call that carries or prints a piece of a held secret stops its whole turn: no model of it
is called again (the coordinator's and every worker's), every result of the step it ran in is the
same refusal, and the turn ends ``stopped`` saying why; the next turn runs calls again."""

from __future__ import annotations

import json

from rt_helpers import agent_call, open_daemon, tool_messages

from ongridd.runtime.frames import SECRET_STOPPED
from ongridd.secretset import REGISTRY
from ongridd.tools.runner import SECRET_PIECE_REFUSAL

HELD = "DAVEtoken0123456789wxyzQ"


async def test_a_workers_guess_stops_its_turn_and_no_later_turn(tmp_path):
    script = {
        "default": [
            {"tool_calls": [agent_call("rt-worker", "echo the guesses"), agent_call("rt-other", "echo plain text")]},
            {"tool_calls": [agent_call("rt-other", "echo plain text")]},  # the next turn (this one never asks again)
            {"content": "done again"},
        ],
        "rt-worker": [
            {"tool_calls": [{"name": "rt_echo", "arguments": {"text": "+DAVEtoka%DAVEtoke%DAVEtok9"}}]},
            {"content": "guessed"},
        ],
        "rt-other": [
            {"delay_s": 0.5, "tool_calls": [{"name": "rt_echo", "arguments": {"text": "hello"}}]},
            {"content": "echoed"},
        ],
    }
    with REGISTRY.hold([HELD]):
        async with open_daemon(tmp_path, script) as d, d.ws("taint") as c:
            end = await c.ask("guess")
            assert end["type"] == "error" and end["code"] == "stopped" and end["message"] == SECRET_STOPPED, end
            # no model asked again (the other worker may not have asked at all before the stop)
            assert len(d.requests("rt-worker")) == 1 and len(d.requests("rt-other")) <= 1
            assert len(d.requests("default")) == 1
            assert {w["agent_id"]: w["status"] for w in d.workers()} == {"rt-worker": "killed", "rt-other": "killed"}
            audit = {(a["agent_id"], a["tool_name"]): a for a in d.audit()}
            assert SECRET_PIECE_REFUSAL in audit[("rt-worker", "rt_echo")]["result"]

            final = await c.ask("echo something plain")  # another turn: its calls run
            assert final["type"] == "final"
            last = d.requests("rt-other")[-1]
            assert json.loads(tool_messages(last)[-1]["content"]) == {"echo": "hello"}
