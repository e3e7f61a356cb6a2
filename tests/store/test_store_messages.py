"""Message histories: seq order, tool calls, validation, concurrency."""

from __future__ import annotations

import uuid

import pytest
import trio

from ongridd.errors import NotFound
from ongridd.llm.types import ToolCall


async def test_append_and_load_round_trip(store):
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    assert await store.append_message(coord["id"], role="user", content="what fills /var?") == 1
    calls = [
        {"id": "call_1", "name": "AgentTool", "arguments": '{"subagent_type":"specialist-disk"}'},
        ToolCall(id="call_2", name="SendMessage", arguments=""),
    ]
    assert await store.append_message(coord["id"], role="assistant", content="On it.", tool_calls=calls) == 2
    assert (
        await store.append_message(coord["id"], role="tool", content='{"ok":1}', tool_call_id="call_1", name="AgentTool")
        == 3
    )
    assert await store.append_message(coord["id"], role="assistant", content="Done. Café ✓ 日本") == 4

    history = await store.load_messages(coord["id"])
    assert [m["seq"] for m in history] == [1, 2, 3, 4]
    assert history[0] == {**history[0], "role": "user", "content": "what fills /var?", "tool_calls": None}
    assert history[1]["tool_calls"] == [
        {"id": "call_1", "name": "AgentTool", "arguments": '{"subagent_type":"specialist-disk"}'},
        {"id": "call_2", "name": "SendMessage", "arguments": ""},
    ]
    assert history[1]["content"] == "On it."
    assert (history[2]["tool_call_id"], history[2]["name"]) == ("call_1", "AgentTool")
    assert history[3]["content"] == "Done. Café ✓ 日本"
    assert set(history[0]) == {"seq", "role", "content", "tool_calls", "tool_call_id", "name", "created_at"}
    assert all(m["created_at"].endswith("Z") for m in history)


async def test_assistant_with_only_tool_calls_and_empty_list(store):
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    await store.append_message(coord["id"], role="assistant", content=None, tool_calls=[{"id": "c", "name": "t"}])
    await store.append_message(coord["id"], role="assistant", content="plain", tool_calls=[])
    first, second = await store.load_messages(coord["id"])
    assert first["content"] is None and first["tool_calls"] == [{"id": "c", "name": "t", "arguments": ""}]
    assert second["tool_calls"] is None


async def test_histories_are_per_session(store):
    a, _ = await store.get_or_create_coordinator("alice", "main")
    b, _ = await store.get_or_create_coordinator("bob", "main")
    assert await store.append_message(a["id"], role="user", content="a1") == 1
    assert await store.append_message(b["id"], role="user", content="b1") == 1
    assert await store.append_message(a["id"], role="user", content="a2") == 2
    assert [m["content"] for m in await store.load_messages(a["id"])] == ["a1", "a2"]
    assert await store.load_messages(str(uuid.uuid4())) == []


async def test_fifty_concurrent_appends_get_seqs_1_to_50(store):
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    seqs = []

    async def append(i):
        seqs.append(await store.append_message(coord["id"], role="user", content=f"m{i}"))

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(append, i)
    assert sorted(seqs) == list(range(1, 51))
    history = await store.load_messages(coord["id"])
    assert [m["seq"] for m in history] == list(range(1, 51))
    assert sorted(m["content"] for m in history) == sorted(f"m{i}" for i in range(50))
    # Each caller got the seq its own row carries.
    by_seq = {m["seq"]: m["content"] for m in history}
    assert len(set(by_seq.values())) == 50


async def test_bad_messages_are_refused_before_the_database(store):
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    sid = coord["id"]
    with pytest.raises(ValueError, match="role"):
        await store.append_message(sid, role="robot", content="x")
    with pytest.raises(ValueError, match="tool_call_id"):
        await store.append_message(sid, role="tool", content="x")
    with pytest.raises(ValueError, match="only assistant"):
        await store.append_message(sid, role="user", content="x", tool_calls=[{"id": "a", "name": "b"}])
    with pytest.raises(ValueError, match=r"tool_calls\[0\].id"):
        await store.append_message(sid, role="assistant", content=None, tool_calls=[{"name": "b"}])
    with pytest.raises(ValueError, match=r"tool_calls\[1\].arguments"):
        await store.append_message(
            sid, role="assistant", content=None, tool_calls=[{"id": "a", "name": "b"}, {"id": "c", "name": "d", "arguments": {}}]
        )
    with pytest.raises(ValueError, match="content"):
        await store.append_message(sid, role="user", content=42)
    assert await store.load_messages(sid) == []
    with pytest.raises(NotFound, match="does not exist"):
        await store.append_message(str(uuid.uuid4()), role="user", content="x")


async def test_nul_characters_are_stored_the_same_on_every_backend(store):
    """A tool that read a binary file: PostgreSQL text cannot hold NUL, so it becomes U+FFFD."""
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    await store.append_message(coord["id"], role="tool", content="ELF\x00\x01bin", tool_call_id="c1", name="cat")
    await store.append_message(
        coord["id"], role="assistant", content=None, tool_calls=[{"id": "c2", "name": "t", "arguments": '{"a":"\x00"}'}]
    )
    await store.add_audit(
        session_id=coord["id"], tool_name="cat", arguments='{"p":"\x00"}', result="a\x00b", status="ok", duration_ms=1
    )
    first, second = await store.load_messages(coord["id"])
    assert first["content"] == "ELF\ufffd\x01bin"
    assert second["tool_calls"][0]["arguments"] == '{"a":"\x00"}'  # JSON escapes it: kept exactly
    (row,) = await store.list_audit(coord["id"])
    assert (row["arguments"], row["result"]) == ('{"p":"\ufffd"}', "a\ufffdb")


async def test_unpaired_surrogates_are_stored_as_replacement_characters(store):
    """A file name's undecodable byte (``surrogateescape``) or a lone ``\\ud800`` from JSON: no
    UTF-8 encoder takes it, so the row would fail; it is stored as U+FFFD on every backend, a
    valid astral character kept."""
    coord, _ = await store.get_or_create_coordinator("alice", "main")
    await store.append_message(coord["id"], role="tool", content="app-\udcff.log \U0001f600 \ud800",
                               tool_call_id="c1", name="search_logs")
    await store.add_audit(session_id=coord["id"], tool_name="search_logs", arguments='{"q":"\udc80"}',
                          result="/var/log/\udcfe", status="ok", duration_ms=1)
    (message,) = await store.load_messages(coord["id"])
    assert message["content"] == "app-\ufffd.log \U0001f600 \ufffd"
    (row,) = await store.list_audit(coord["id"])
    assert (row["arguments"], row["result"]) == ('{"q":"\ufffd"}', "/var/log/\ufffd")


async def test_a_summary_is_stored_like_any_text_column(store):
    """A summary is model output: a held secret in it is redacted and a NUL
    becomes U+FFFD before it is stored (and so before it is sent again)."""
    from ongridd.secretset import REGISTRY

    coord, _ = await store.get_or_create_coordinator("alice", "main")
    secret = "sk-summary-held-secret-5533"
    with REGISTRY.hold([secret]):
        row = await store.add_summary(coord["id"], through_seq=3, content=f"key {secret} and \x00 here",
                                      source="model", summarizer_session_id=None)
    latest = await store.latest_summary(coord["id"])
    for got in (row["content"], latest["content"]):
        assert secret not in got and "\x00" not in got and "\ufffd here" in got
