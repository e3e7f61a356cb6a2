"""Pure parts of the history budget (ongridd/runtime/compaction.py): where a
history may be cut, the fallback summary, the budget arithmetic."""

from __future__ import annotations

from ongridd.llm.types import Message, ToolCall
from ongridd.runtime.compaction import (
    _Entry,
    cut_points,
    estimate_tokens,
    fallback_summary,
    history_budget,
    message_chars,
)


def entries(*messages: Message) -> list[_Entry]:
    return [_Entry(i + 1, m) for i, m in enumerate(messages)]


def call(cid: str) -> Message:
    return Message(role="assistant", content=None, tool_calls=(ToolCall(id=cid, name="t", arguments="{}"),))


def result(cid: str) -> Message:
    return Message(role="tool", content="ok", tool_call_id=cid, name="t")


def user(text: str) -> Message:
    return Message(role="user", content=text)


def answer(text: str) -> Message:
    return Message(role="assistant", content=text)


def test_cuts_only_before_user_messages_and_never_between_a_call_and_its_result():
    es = entries(user("a"), call("c1"), result("c1"), answer("A"),
                 user("b"), call("c2"),
                 user("mid-turn message"),  # an interjection stored before the result came
                 result("c2"), answer("B"), user("c"))
    assert cut_points(es) == [4, 9, 10]


def test_a_call_never_answered_does_not_block_later_cuts():
    es = entries(user("a"), call("lost"), user("b"), answer("B"), user("c"))
    assert cut_points(es) == [2, 4, 5]


def test_fallback_keeps_user_messages_and_answers_cut_to_fit():
    msgs = [user("disk full on web-1?"), call("c1"), result("c1"), answer("yes, /var/log is 98%")] * 50
    text = fallback_summary("earlier things", msgs, 1000)
    assert len(text) <= 1000
    assert text.startswith("Earlier: earlier things")
    assert "User: disk full on web-1?" in text and "Answer: yes, /var/log is 98%" in text
    assert "older lines omitted" in text and "ok\n" not in text and not text.endswith("ok")


def test_budget_uses_the_context_when_known():
    assert history_budget(history_max_chars=200_000, context_tokens=None, fixed_chars=50_000) == 200_000
    # 32k context: 4k kept for the answer, 10k chars (3,334 tokens) of system prompt/tools/reminder
    assert history_budget(history_max_chars=200_000, context_tokens=32_000, fixed_chars=10_000) == \
        (32_000 - 4_000 - 3_334) * 3
    assert history_budget(history_max_chars=5_000, context_tokens=1_000_000, fixed_chars=0) == 5_000
    assert estimate_tokens(10) == 4
    assert message_chars(Message(role="assistant", content="ab", tool_calls=(
        ToolCall(id="x", name="tool", arguments='{"a": 1}'),))) == 2 + 4 + 8


async def test_context_tokens_bound_the_history_with_the_system_prompt_counted(tmp_path):
    """With ``llm.context_tokens`` set, the history of every request stays within what the
    context leaves after the system prompt, tool schemas, reminder and room for the answer."""
    import json

    from rt_helpers import open_daemon

    steps = []
    for k in range(40):
        steps.append({"content": f"answer {k}: " + "z" * 400})
    script = {"default": steps, "summarizer": [{"content": "SUMMARY of the earlier numbered questions."}]}
    async with open_daemon(tmp_path, script, llm={"context_tokens": 8000}) as d, d.ws("ctx") as c:
        for k in range(40):
            frame = await c.ask(f"question {k}: " + "q" * 200)
            assert frame["type"] == "final", frame
        reqs = d.requests("default")
        for r in reqs:
            msgs = r.body["messages"]
            total = sum(len(m.get("content") or "") for m in msgs) + len(json.dumps(r.body.get("tools") or []))
            # the conservative estimate: 3 characters a token, 1/8 of the context kept for the answer
            assert total <= (8000 - 1024) * 3, total
        assert d.requests("summarizer")


def test_a_call_id_reused_by_a_later_turn_pairs_with_the_nearest_call():
    """Some models number calls ``call_0`` afresh in every turn: a result
    answers the latest call with its id, so earlier turns can still be cut
    (and no cut falls between any call and its result)."""
    es = entries(user("a"), call("call_0"), result("call_0"), answer("x"),
                 user("b"), call("call_0"), user("interjection"), result("call_0"), answer("y"),
                 user("c"))
    assert cut_points(es) == [4, 9, 10]


def test_a_thread_state_keeps_the_size_of_its_entries_up_to_date():
    from ongridd.runtime.compaction import ThreadState

    msgs = [user("hello"), call("c1"), result("c1"), answer("x" * 50), user("again"), answer("y" * 7)]
    state = ThreadState("s", entries=entries(*msgs[:2]))
    assert state.chars == sum(message_chars(m) for m in msgs[:2])
    for e in entries(*msgs)[2:]:
        state.append(e)
    assert state.chars == sum(message_chars(m) for m in msgs) == sum(e.chars for e in state.entries)
    state.drop_oldest(4)
    assert [e.message for e in state.entries] == msgs[4:]
    assert state.chars == sum(message_chars(m) for m in msgs[4:])
    state.clear()
    assert state.entries == [] and state.chars == 0
