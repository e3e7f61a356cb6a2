"""Loopback mode stays auditable: one ``connection`` event per client and a
``turn_start``/``turn_end`` pair per turn, with user, thread and outcome."""

from __future__ import annotations

import io
import json
import logging

import trio
from rt_helpers import open_daemon

from ongridd import logs


def _events(stream: io.StringIO, *names: str) -> list[dict]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]
    return [e for e in lines if e["event"] in names]


async def test_connections_and_turns_are_logged_with_user_thread_and_outcome(tmp_path):
    script = {"default": [
        {"tool_calls": [{"name": "no_such_tool", "arguments": {}}]},  # counted: the model made the call
        {"content": "done"},
        {"tool_calls": [{"name": "query_knowledge", "arguments": {"query": "disk full"}}]},  # then stopped
        {"content": "slow", "delay_s": 30},
    ]}
    stream = io.StringIO()
    logs.configure("INFO", stream=stream)
    try:
        async with open_daemon(tmp_path, script) as d:
            async with d.ws("ops") as c:
                assert (await c.ask("first"))["text"] == "done"
                await c.send({"type": "user_message", "text": "second"})
                assert (await c.until_type("tool"))["name"] == "query_knowledge"
                with trio.fail_after(10):
                    while not _events(stream, "turn_start")[1:]:
                        await trio.sleep(0.05)
                    while len(d.fake.requests) < 4:  # the step after the tool call is under way
                        await trio.sleep(0.05)
                await c.send({"type": "stop"})
                assert (await c.until_type("error"))["code"] == "stopped"
                session_id = c.session["session_id"]
    finally:
        logs.configure("INFO")
    (conn,) = _events(stream, "connection")
    assert conn["user"] == "local" and conn["thread"] == "ops" and conn["session_id"] == session_id
    assert conn["peer"].startswith("127.0.0.1:") and conn["resumed"] is False
    starts, ends = _events(stream, "turn_start"), _events(stream, "turn_end")
    assert [(e["user"], e["thread"], e["session_id"]) for e in starts] == [("local", "ops", session_id)] * 2
    assert [(e["status"], e["tool_calls"], e["workers"]) for e in ends] == [("completed", 1, 0), ("stopped", 1, 0)]
    assert all(e["user"] == "local" and e["thread"] == "ops" and e["duration_ms"] >= 0 for e in ends)


async def test_an_api_key_in_a_variable_ongrid_does_not_read_is_warned_about(tmp_path, caplog, monkeypatch):
    # ONGRID_LLM_API_KEY looks like ONGRID_LLM_BASE_URL's sibling, but the key is read from llm.api_key_env
    monkeypatch.setenv("ONGRID_LLM_API_KEY", "sk-guessed-variable-0123456789")
    caplog.set_level(logging.WARNING, logger="ongridd")
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}):
        pass
    [warning] = [r for r in caplog.records if r.msg == "api_key_variable_not_read"]
    fields = warning.ongrid_fields  # type: ignore[attr-defined]
    assert fields["variable"] == "ONGRID_LLM_API_KEY" and "$OPENAI_API_KEY" in fields["hint"]
    assert "sk-guessed" not in caplog.text
