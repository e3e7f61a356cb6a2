"""An interjection belongs to its turn (docs/architecture.md §9): when the
turn ends its interjection calls are cancelled, nothing they would emit is
sent after the turn's ``final``, and the message is answered once, by the
follow-up turn.  Real daemon, real websocket, the scripted model."""

from __future__ import annotations

import trio
from rt_helpers import open_daemon

from ongridd.runtime import core


async def _wait_interjection_over(turn: core.Turn) -> None:
    with trio.fail_after(15):
        while turn.interjecting or turn.interjections:
            await trio.sleep(0.02)


def _user_rows(d, sid: str) -> list[str]:
    return [r["content"] for r in d.rows("SELECT content FROM chat_messages WHERE session_id = ? AND role = 'user' "
                                         "ORDER BY seq", (sid,))]


async def test_interjection_call_in_flight_when_the_turn_ends_never_emits_after_final(tmp_path):
    """The message lands during the turn's last model call; its interjection
    call is still waiting for the model when the turn's final goes out.  It
    is cancelled: no interim after the final; the follow-up turn answers."""
    script = {
        "default": [
            {"delay_s": 2.0, "content": "first answer"},  # the turn's last (only) call
            {"delay_s": 3.0,  # the interjection call: still in flight when the turn ends
             "tool_calls": [{"name": "SendMessage", "arguments": {"text": "late acknowledgement"}}]},
            {"content": "second answer"},  # the follow-up turn
            {"content": "third answer"},
        ],
    }
    async with open_daemon(tmp_path, script) as d, d.ws("race") as c:
        await c.send({"type": "user_message", "text": "first question"})
        with trio.fail_after(10):
            await d.fake.wait_requests(1)
        turn = d.runtime.turns[c.session_id]
        await c.send({"type": "user_message", "text": "second question"})
        with trio.fail_after(10):
            await d.fake.wait_requests(2)  # the interjection call reached the model
        assert (await c.until_type("final", "error"))["text"] == "first answer"
        assert (await c.until_type("final", "error"))["text"] == "second answer"
        await _wait_interjection_over(turn)
        assert (await c.ask("third question"))["text"] == "third answer"
        kinds = [(f["type"], f.get("text")) for f in c.frames if f["type"] in ("final", "interim", "error")]
        assert kinds == [("final", "first answer"), ("final", "second answer"), ("final", "third answer")]
        assert _user_rows(d, c.session_id) == ["first question", "second question", "third question"]
        # the cancelled interjection ran no tool
        assert [a["tool_name"] for a in d.audit(c.session_id)] == []


async def test_message_in_the_debounce_window_at_turn_end_is_answered_once(tmp_path, monkeypatch):
    """The message lands as the turn finishes, before its interjection call
    starts: the call never starts (the model sees the coordinator twice, not
    three times) and the follow-up turn answers it, once."""
    monkeypatch.setattr(core, "INTERJECTION_DEBOUNCE_S", 3.0)  # the turn ends inside the debounce wait
    script = {
        "default": [
            {"delay_s": 1.0, "content": "first answer"},
            {"content": "second answer"},  # the follow-up turn (an interjection would take this step)
            {"content": "third answer"},
        ],
    }
    async with open_daemon(tmp_path, script) as d, d.ws("debounce") as c:
        await c.send({"type": "user_message", "text": "first question"})
        with trio.fail_after(10):
            await d.fake.wait_requests(1)
        turn = d.runtime.turns[c.session_id]
        await c.send({"type": "user_message", "text": "second question"})
        assert (await c.until_type("final", "error"))["text"] == "first answer"
        assert (await c.until_type("final", "error"))["text"] == "second answer"
        await _wait_interjection_over(turn)
        assert (await c.ask("third question"))["text"] == "third answer"
        finals = [f["text"] for f in c.frames if f["type"] in ("final", "error", "interim")]
        assert finals == ["first answer", "second answer", "third answer"]
        assert len(d.requests("default")) == 3  # no interjection call after the turn ended
        assert _user_rows(d, c.session_id) == ["first question", "second question", "third question"]
