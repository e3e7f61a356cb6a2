"""A tool call carrying a piece of a held secret stops its whole turn's tool calls: the coordinator's
and every worker's, not only its own run's (a coordinator that dispatched one worker per guess
learned one yes/no per worker); the next turn runs calls again."""

from __future__ import annotations

import json

from rt_helpers import agent_call, open_daemon, tool_messages

from ongridd.secretset import REGISTRY
from ongridd.tools.runner import SECRET_PIECE_REFUSAL

HELD = "DAVEtoken0123456789wxyzQ"


async def test_a_workers_guess_stops_the_rest_of_its_turn_and_no_later_turn(tmp_path):
    script = {
        "default": [
            {"tool_calls": [agent_call("rt-worker", "echo the first guess")]},
            {"tool_calls": [agent_call("rt-worker", "echo the second guess")]},
            {"content": "done"},
            {"tool_calls": [agent_call("rt-other", "echo plain text")]},
            {"content": "done again"},
        ],
        "rt-worker": [
            {"tool_calls": [{"name": "rt_echo", "arguments": {"text": "+DAVEtoka%DAVEtoke%DAVEtok9"}}]},
            {"content": "guessed"},
        ],
        "rt-other": [
            {"tool_calls": [{"name": "rt_echo", "arguments": {"text": "hello"}}]},
            {"content": "echoed"},
        ],
    }
    with REGISTRY.hold([HELD]):
        async with open_daemon(tmp_path, script) as d, d.ws("taint") as c:
            final = await c.ask("guess")
            assert final["type"] == "final"
            (worker,) = d.workers()  # the second dispatch was refused: no worker started
            guess = d.requests("rt-worker")[1]
            assert SECRET_PIECE_REFUSAL in json.loads(tool_messages(guess)[-1]["content"])["error"]
            second = d.requests("default")[2]
            assert SECRET_PIECE_REFUSAL in json.loads(tool_messages(second)[-1]["content"])["error"]
            assert [(a["agent_id"], a["tool_name"], a["status"]) for a in d.audit()] == [
                ("rt-worker", "rt_echo", "error"), ("default", "AgentTool", "ok"), ("default", "AgentTool", "error")]

            final = await c.ask("echo something plain")  # another turn: its calls run
            assert final["type"] == "final"
            assert [w["status"] for w in d.workers()] == ["completed", "completed"]
            last = d.requests("rt-other")[1]
            assert json.loads(tool_messages(last)[-1]["content"]) == {"echo": "hello"}
