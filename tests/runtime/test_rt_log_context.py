"""Context fields bound once per turn and per worker: lines logged while a
worker runs carry its ``session_id``, ``agent`` and ``user`` without the call
site passing them."""

from __future__ import annotations

import io
import json
import logging

from rt_helpers import agent_call, open_daemon

from ongridd import logs


async def test_lines_logged_inside_a_worker_carry_its_context(tmp_path) -> None:
    script = {
        "default": [{"tool_calls": [agent_call("rt-worker", "echo")]}, {"content": "all done"}],
        "rt-worker": [{"tool_calls": [{"name": "rt_echo", "arguments": {"text": "one"}}]}, {"content": "echoed"}],
    }
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.formatter(json_lines=True))
    probe = logging.getLogger("ongridd.tools")  # tool handlers and the runner log here
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    # an earlier test in this process may have run logs.configure(), which holds these at WARNING
    quiet = {name: logging.getLogger(name).level for name in logs._QUIET_LIBRARIES}
    for name in quiet:
        logging.getLogger(name).setLevel(logging.NOTSET)
    try:
        async with open_daemon(tmp_path, script) as d:
            async with d.ws("ctx") as c:
                end = await c.ask("go")
                assert end["type"] == "final", end
            (worker,) = d.workers("rt-worker")
            probe.info("outside_any_turn")
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        for name, level in quiet.items():
            logging.getLogger(name).setLevel(level)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    inside = [line for line in lines if line.get("session_id") == worker["id"] and line.get("agent") == "rt-worker"]
    # e.g. the model provider's own debug line (model_call_answered): bound by the runtime, not passed by the caller
    assert inside, [line["event"] for line in lines]
    assert all(line.get("user") for line in inside)
    [outside] = [line for line in lines if line["event"] == "outside_any_turn"]
    assert "agent" not in outside
