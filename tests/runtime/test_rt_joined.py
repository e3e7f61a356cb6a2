"""Messages that join a running turn are stored once, in the order they were sent, and sent to
the model once: a follow-up turn answering late messages, a message joining a follow-up turn
while it settles its writes, messages joining a turn before and after its first message is
stored, a stop while joined messages are being stored (delays injected to open each window)."""

from __future__ import annotations

import trio
from rt_helpers import open_daemon

from ongridd.runtime import core


def _slow_history_read(monkeypatch, seconds: float = 1.0) -> None:
    """Each turn reads its history ``seconds`` late: messages sent meanwhile join a turn whose first
    message is not stored yet."""
    from ongridd.runtime import compaction

    orig = compaction.ThreadHistories.history_for_turn

    async def slow(self, **kw):
        await trio.sleep(seconds)
        return await orig(self, **kw)

    monkeypatch.setattr(compaction.ThreadHistories, "history_for_turn", slow)


async def _second_while_first_runs(d, c, first: str, second: str) -> None:
    """Send ``first``, wait until its turn asks the model, then send ``second`` (it joins that turn)."""
    await c.send({"type": "user_message", "text": first})
    with trio.fail_after(10):
        await d.fake.wait_requests(1)
    await c.send({"type": "user_message", "text": second})


async def test_a_follow_up_turn_sends_its_message_once(tmp_path, monkeypatch):
    monkeypatch.setattr(core, "INTERJECTION_DEBOUNCE_S", 3.0)
    script = {"default": [{"delay_s": 1.0, "content": "first answer"}, {"content": "second answer"},
                          {"content": "third answer"}]}
    async with open_daemon(tmp_path, script) as d, d.ws("debounce") as c:
        await _second_while_first_runs(d, c, "first question", "second question")
        assert (await c.until_type("final", "error"))["text"] == "first answer"
        assert (await c.until_type("final", "error"))["text"] == "second answer"
        msgs = d.requests("default")[1].body["messages"]
        users = [m["content"] for m in msgs if m["role"] == "user"]
        assert users.count("second question") == 1, users


def _user_rows(d, sid):
    return [(r["content"], r["name"]) for r in d.rows(
        "SELECT content, name FROM chat_messages WHERE session_id = ? AND role = 'user' ORDER BY seq", (sid,))]


async def test_a_message_joining_a_follow_up_while_it_settles_is_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(core, "INTERJECTION_DEBOUNCE_S", 3.0)
    orig = core.Runtime._settle_writes
    settled: list[object] = []

    async def slow_settle(self, turn, status, end):
        settled.append(turn)
        if len(settled) == 2:  # the follow-up turn
            await trio.sleep(1.5)
        return await orig(self, turn, status, end)

    monkeypatch.setattr(core.Runtime, "_settle_writes", slow_settle)
    script = {"default": [{"delay_s": 1.0, "content": "a1"}, {"content": "a2"}, {"content": "a3"},
                          {"content": "a4"}]}
    async with open_daemon(tmp_path, script) as d, d.ws("lost") as c:
        await _second_while_first_runs(d, c, "Q1", "Q2")
        assert (await c.until_type("final", "error"))["text"] == "a1"
        with trio.fail_after(10):
            while len(settled) < 2:
                await trio.sleep(0.01)
        await c.send({"type": "user_message", "text": "Q3"})
        assert (await c.until_type("final", "error"))["text"] == "a2"
        assert (await c.until_type("final", "error"))["text"] == "a3"
        await trio.sleep(2)
        rows = _user_rows(d, c.session_id)
        assert [r[0] for r in rows] == ["Q1", "Q2", "Q3"], rows


async def test_a_stop_while_joined_messages_are_stored_loses_none(tmp_path, monkeypatch):
    # messages that joined before the turn's first model call are drained together: a stop while the
    # first of them commits (slowly, here) must not leave the others unstored
    from ongridd.store import writer as writer_mod

    _slow_history_read(monkeypatch)
    orig_settled = writer_mod.PendingWrite.settled

    async def slow_settled(self):
        if self.kind == "message" and (self.values or {}).get("content") == "A":
            await trio.sleep(2.0)
        await orig_settled(self)

    monkeypatch.setattr(writer_mod.PendingWrite, "settled", slow_settled)
    # the interjection call for A and B comes first (the history read is slowed), then the turn's own
    script = {"default": [{"content": "noted"}, {"delay_s": 30, "content": "never"}]}
    async with open_daemon(tmp_path, script) as d, d.ws("stop-drain") as c:
        await c.send({"type": "user_message", "text": "T"})
        await trio.sleep(0.3)
        await c.send({"type": "user_message", "text": "A"})
        await c.send({"type": "user_message", "text": "B"})
        await trio.sleep(1.5)  # the history read is over; the drain is storing A
        await c.send({"type": "stop"})
        assert (await c.until_type("error"))["code"] == "stopped"
        await trio.sleep(1)
        assert [r[0] for r in _user_rows(d, c.session_id)] == ["T", "A", "B"]


async def test_messages_joining_a_starting_turn_are_stored_in_the_order_sent(tmp_path, monkeypatch):
    from ongridd.runtime import sink as sinkmod
    monkeypatch.setattr(core, "INTERJECTION_DEBOUNCE_S", 5.0)
    _slow_history_read(monkeypatch)
    orig_call = sinkmod.PersistSink.__call__

    async def slow_call(self, event):
        await orig_call(self, event)
        from ongridd.kernel import events as ev
        if isinstance(event, ev.UserMessageEvent) and event.source == "user":
            await trio.sleep(1.0)  # a slow commit of the turn's first message

    monkeypatch.setattr(sinkmod.PersistSink, "__call__", slow_call)
    script = {"default": [{"content": "a1"}, {"content": "a2"}, {"content": "a3"}]}
    async with open_daemon(tmp_path, script) as d, d.ws("order") as c:
        await c.send({"type": "user_message", "text": "T"})
        await trio.sleep(0.4)
        await c.send({"type": "user_message", "text": "A"})  # before T is stored
        with trio.fail_after(10):
            while d.runtime.turns[c.session_id].user_write is None:
                await trio.sleep(0.01)
        await c.send({"type": "user_message", "text": "B"})  # T stored, model not asked yet
        assert (await c.until_type("final", "error"))["text"] == "a1"
        await trio.sleep(1)
        rows = _user_rows(d, c.session_id)
        users = [m["content"] for m in d.requests("default")[0].body["messages"] if m["role"] == "user"]
        assert [r[0] for r in rows] == ["T", "A", "B"], rows
        assert users[:3] == ["T", "A", "B"], users  # as the model saw them
