"""The chat socket protocol (docs/architecture.md §15.5), identity and auth, and a
client that goes away mid-turn."""

from __future__ import annotations

import httpx2
import trio
from rt_helpers import agent_call, open_daemon, rtt


async def test_hello_session_resumed_locale_and_implicit_hello(tmp_path):
    script = {"default": [{"content": "one"}, {"content": "two"}]}  # each coordinator session from step 0
    async with open_daemon(tmp_path, script) as d:
        async with d.ws("t", locale="fr") as c:
            first = c.session
            assert first["resumed"] is False and first["thread"] == "t"
            assert (await c.ask("hello"))["text"] == "one"
            reminder = d.fake.requests[0].body["messages"][-1]["content"]
            assert "(locale fr)" in reminder
            await c.send({"type": "hello", "thread": "other"})  # already attached
            frame = await c.until_type("error")
            assert frame["code"] == "bad_frame" and "already attached" in frame["message"]
        async with d.ws("t") as c:
            assert c.session == {**first, "resumed": True}
            assert (await c.ask("again"))["text"] == "two"  # the thread continues where it was
            history = [m["content"] for m in d.fake.requests[1].body["messages"] if m["role"] != "system"]
            assert history[:3] == ["hello", "one", "again"]
        async with d.ws(None) as c:  # no hello: thread main, user local
            await c.send({"type": "user_message", "text": "hi"})
            session = await c.until_type("session")
            assert session["thread"] == "main" and session["resumed"] is False
            assert (await c.until_type("final"))["text"] == "one"
            assert d.row(session["session_id"])["user_id"] == "local"


MALFORMED = [
    ("not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object, got array"),
    ('{"type": "bogus"}', "unknown frame type 'bogus'"),
    ('{"text": "no type"}', "unknown frame type None"),
    ('{"type": "user_message"}', "user_message.text must be a non-empty string"),
    ('{"type": "user_message", "text": "   "}', "user_message.text must be a non-empty string"),
    ('{"type": "user_message", "text": 5}', "user_message.text must be a non-empty string"),
    ('{"type": "stop", "task_id": ""}', "stop.task_id must be a non-empty task id"),
    ('{"type": "stop", "task_id": 7}', "stop.task_id must be a string"),
    ('{"type": "hello", "thread": ""}', "hello.thread must be 1..128 characters"),
    ('{"type": "hello", "thread": "\\u0000x"}', "hello.thread must be printable text"),  # PostgreSQL text has no NUL
    ('{"type": "hello", "thread": "a\\nb"}', "hello.thread must be printable text"),
    (b"\x00binary", "binary frames are not accepted"),
]


async def test_malformed_frames_get_bad_frame_and_the_connection_stays_open(tmp_path):
    async with open_daemon(tmp_path, {"default": [{"content": "still here"}]}) as d, d.ws("bad") as c:
        for frame, words in MALFORMED:
            await c.conn.send_message(frame)
            err = await c.recv()
            assert err["type"] == "error" and err["code"] == "bad_frame", frame
            assert words in err["message"], (frame, err)
        assert (await c.ask("valid"))["text"] == "still here"
        await c.send({"type": "stop"})  # no turn running: an error, nothing changes
        err = await c.until_type("error")
        assert err["code"] == "not_found" and "no turn is running" in err["message"]


async def test_tokens_users_and_other_users_sessions(tmp_path, monkeypatch):
    monkeypatch.setenv("RT_TEST_TOKENS", "alice:tok-alice,bob:tok-bob-1")
    script = {
        "default": [{"tool_calls": [agent_call("rt-worker", "alice's task")]}, {"content": "alice done"}],
        "rt-worker": [{"tool_calls": [{"name": "rt_wait", "arguments": {"key": "alice"}}]}, {"content": "ok"}],
    }
    started, release = rtt.events("alice")
    async with open_daemon(tmp_path, script, server={"tokens_env": "RT_TEST_TOKENS"}) as d, d.ws(None) as c:
        for hello in ({"type": "hello", "thread": "x"}, {"type": "hello", "token": "wrong"},
                      {"type": "user_message", "text": "no hello, no token"}):
            await c.send(hello)
            err = await c.recv()
            assert err["type"] == "error" and err["code"] == "unauthorized", hello
        await c.send({"type": "hello", "token": "tok-alice", "thread": "main"})  # still open: retry works
        alice_sid = (await c.until_type("session"))["session_id"]
        await c.send({"type": "user_message", "text": "start"})
        with trio.fail_after(15):
            await started.wait()
        alice_task = d.task_id("rt-worker")
        async with d.ws("main", token="tok-bob-1") as bob:
            assert bob.session_id != alice_sid  # same thread name, another user, another session
            await bob.send({"type": "stop", "task_id": alice_task})
            err = await bob.until_type("error")
            assert err["code"] == "not_found" and f"no such task {alice_task}" in err["message"]
            assert d.row(alice_task)["status"] == "running"
            async with httpx2.AsyncClient(base_url=d.base_url) as http:
                for path in (f"/api/sessions/{alice_sid}/tree", f"/api/sessions/{alice_sid}/audit"):
                    r = await http.get(path, headers={"Authorization": "Bearer tok-bob-1"})
                    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
                    assert (await http.get(path)).status_code == 401
                    r = await http.get(path, headers={"Authorization": "Bearer nope"})
                    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
                    r = await http.get(path, headers={"Authorization": "Bearer tok-alice"})
                    assert r.status_code == 200
                r = await http.get(f"/api/sessions/{alice_sid}/tree", headers={"Authorization": "Bearer tok-alice"})
                tree = r.json()
                assert tree["id"] == alice_sid and tree["children"][0]["id"] == alice_task
                r = await http.get("/api/sessions/no-such-id/tree", headers={"Authorization": "Bearer tok-alice"})
                assert r.status_code == 404
            release.set()
            assert (await c.until_type("final"))["text"] == "alice done"
            d.use_script({"default": [{"content": "bob done"}]})
            assert (await bob.ask("hi"))["text"] == "bob done"
        assert d.row(alice_sid)["user_id"] == "alice"


async def test_client_drops_mid_run_and_reattaches(tmp_path):
    """A client that goes away: the turn goes on without a client; interim frames produced while
    nobody is attached are dropped (not replayed); a re-attached client gets
    the true tiles of the running turn and the final; a turn that ended
    while nobody was attached gives its final on re-attach."""
    script = {
        "default": [
            {"tool_calls": [agent_call("rt-worker", "step one")]},
            {"tool_calls": [{"name": "SendMessage", "arguments": {"text": "still checking web-2"}},
                            agent_call("rt-other", "step two")]},
            {"content": "all done"},
        ],
        "rt-worker": [{"tool_calls": [{"name": "rt_wait", "arguments": {"key": "one"}}]}, {"content": "one ok"}],
        "rt-other": [{"tool_calls": [{"name": "rt_wait", "arguments": {"key": "two"}}]}, {"content": "two ok"}],
    }
    _, release_one = rtt.events("one")
    started_two, release_two = rtt.events("two")
    async with open_daemon(tmp_path, script) as d:
        async with d.ws("drop") as c1:
            sid = c1.session_id
            await c1.send({"type": "user_message", "text": "check web"})
            await c1.tile("running", "rt-worker")
        # the client is gone (connection closed) while the worker runs
        release_one.set()
        with trio.fail_after(15):
            await started_two.wait()
        assert sid in d.runtime.turns  # the turn goes on
        async with d.ws("drop") as c2:
            assert c2.session == {"type": "session", "session_id": sid, "thread": "drop", "resumed": True}
            tiles = {}
            while len(tiles) < 2:
                f = await c2.until_type("agent_tile")
                tiles[f["subagent_type"]] = f["status"]
            assert tiles == {"rt-worker": "completed", "rt-other": "running"}
            release_two.set()
            final = await c2.until_type("final", "error")
            assert final == {"type": "final", "text": "all done", "html": "<p>all done</p>\n"}
            assert c2.of_type("interim") == []  # sent while nobody was attached: dropped
        assert {r["agent_id"]: r["status"] for r in d.workers()} == {"rt-worker": "completed",
                                                                     "rt-other": "completed"}
        # SendMessage still ran and was audited; the transcript is in the database
        assert ("SendMessage", "ok") in [(a["tool_name"], a["status"]) for a in d.audit(sid)]

        # a turn that ends while nobody is attached: its final waits for the re-attach
        d.use_script({"default": [{"tool_calls": [agent_call("rt-worker", "again")]}, {"content": "done while away"}],
                      "rt-worker": [{"tool_calls": [{"name": "rt_wait", "arguments": {"key": "three"}}]},
                                    {"content": "three ok"}]})
        started_three, release_three = rtt.events("three")
        async with d.ws("away") as c3:
            sid3 = c3.session_id
            await c3.send({"type": "user_message", "text": "go"})
            with trio.fail_after(15):
                await started_three.wait()
        turn = d.runtime.turns[sid3]
        release_three.set()
        with trio.fail_after(15):
            await turn.done.wait()
        async with d.ws("away") as c4:
            assert c4.session["resumed"] is True
            assert await c4.recv() == {"type": "final", "text": "done while away", "html": "<p>done while away</p>\n"}
        async with d.ws("away") as c5:  # delivered once; nothing more to replay
            await c5.send({"type": "stop"})
            assert (await c5.recv())["code"] == "not_found"


async def test_answers_waiting_for_a_reattach_are_bounded_the_oldest_dropped(tmp_path):
    """Finals kept for clients that went away are bounded: past the bound the oldest thread's
    final is no longer replayed on re-attach (its transcript still has it)."""
    from ongridd.runtime.hub import UndeliveredEnds

    def script(key: str) -> dict:
        return {"default": [{"tool_calls": [agent_call("rt-worker", "wait")]}, {"content": "answered while away"}],
                "rt-worker": [{"tool_calls": [{"name": "rt_wait", "arguments": {"key": key}}]}, {"content": "ok"}]}

    async with open_daemon(tmp_path, script("kept-old")) as d:
        d.runtime.undelivered = UndeliveredEnds(max_frames=1)
        sids = []
        for thread in ("old", "new"):
            d.use_script(script(f"kept-{thread}"))
            started, release = rtt.events(f"kept-{thread}")
            async with d.ws(thread) as c:
                sids.append(c.session_id)
                await c.send({"type": "user_message", "text": "go"})
                with trio.fail_after(15):
                    await started.wait()
            turn = d.runtime.turns[c.session_id]
            release.set()
            with trio.fail_after(15):
                await turn.done.wait()
        async with d.ws("new") as c:  # the newer one is replayed
            assert (await c.recv())["text"] == "answered while away"
        async with d.ws("old") as c:  # the older one was dropped: nothing to replay
            await c.send({"type": "stop"})
            assert (await c.recv())["code"] == "not_found"
        transcript = d.rows("SELECT content FROM chat_messages WHERE session_id = ? AND role = 'assistant' "
                            "ORDER BY seq", (sids[0],))
        assert transcript[-1]["content"] == "answered while away"
