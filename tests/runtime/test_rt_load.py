"""Turn limits and the shared 429 hold, from the outside: the real ``ongridd
serve`` process, real websocket clients, the scripted model in this process
(so its request log is readable).  docs/architecture.md §4 Load, §15."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import test_rt_process as proc  # its serve()/ws()/write_config helpers
import trio
from rt_helpers import db_rows, prepare

from ongridd.fakellm import open_fake_llm
from ongridd.fakellm.script import coerce_script


async def _peak_in_flight(fake, persona: str, out: list[int]) -> None:
    """Track the most ``persona`` calls the scripted model held at once
    (a call is in flight until answered: status 0)."""
    seen = 0
    while True:
        await fake.wait_requests(seen + 1)
        seen = len(fake.requests)
        out.append(sum(1 for r in fake.requests if r.agent == persona and r.status == 0))


def _max_concurrent_from_logs(logs: list[dict]) -> int:
    now = peak = 0
    for entry in logs:
        if entry.get("event") == "turn_start":
            now += 1
            peak = max(peak, now)
        elif entry.get("event") == "turn_end":
            now -= 1
    return peak


async def test_fifty_turns_of_one_user_two_at_a_time(tmp_path: Path) -> None:
    script = {"default": [{"delay_s": 0.2, "content": "answered"}]}
    async with open_fake_llm(script) as fake:
        mapping = prepare(tmp_path, limits={"max_turns_per_user": 2, "max_queued_turns": 100})
        mapping["llm"]["base_url"] = fake.base_url
        config = proc.write_config(tmp_path, mapping)
        peaks: list[int] = []
        results: dict[int, list[dict]] = {}
        async with proc.serve(config) as sp, trio.open_nursery() as watch:
            watch.start_soon(_peak_in_flight, fake, "default", peaks)

            async def one(i: int) -> None:
                async with proc.ws(sp.ws_url, f"load-{i}") as c:
                    await c.ask(f"question {i}", timeout=120)
                    results[i] = c.frames

            with trio.fail_after(180):
                async with trio.open_nursery() as nursery:
                    for i in range(50):
                        nursery.start_soon(one, i)
            watch.cancel_scope.cancel()
        ends = [frames[-1] for frames in results.values()]
        assert len(ends) == 50 and all(f["type"] == "final" and f["text"] == "answered" for f in ends)
        assert max(peaks) == 2  # never more than max_turns_per_user calls in flight
        assert _max_concurrent_from_logs(sp.logs) == 2
        queued = [f for frames in results.values() for f in frames if f.get("queue_position")]
        assert len({f["text"] for f in queued}) > 5 and all(f["text"].startswith("queued (position ") for f in queued)
        assert len(fake.requests) == 50


async def test_full_queue_answers_busy_and_a_stopped_queued_turn_never_runs(tmp_path: Path) -> None:
    script = {"default": [{"delay_s": 2, "content": "slow answer"}]}
    async with open_fake_llm(script) as fake:
        mapping = prepare(tmp_path, limits={"max_concurrent_turns": 1, "max_turns_per_user": 1,
                                            "max_queued_turns": 4})  # one user: at most 2 of them
        mapping["llm"]["base_url"] = fake.base_url
        config = proc.write_config(tmp_path, mapping)
        db = Path(mapping["state_dir"]) / "ongrid.db"
        async with proc.serve(config) as sp, proc.ws(sp.ws_url, "t1") as c1, proc.ws(sp.ws_url, "t2") as c2, \
                proc.ws(sp.ws_url, "t3") as c3, proc.ws(sp.ws_url, "t4") as c4:
            await c1.send({"type": "user_message", "text": "first"})
            await fake.wait_requests(1)
            await c2.send({"type": "user_message", "text": "second"})
            assert (await c2.until(lambda f: "queue_position" in f))["text"] == "queued (position 1)"
            await c3.send({"type": "user_message", "text": "third"})
            assert (await c3.until(lambda f: "queue_position" in f))["text"] == "queued (position 2)"
            async with proc.ws(sp.ws_url, "t3") as again:  # a re-attaching client learns the position too
                assert (await again.recv())["text"] == "queued (position 2)"
            await c4.send({"type": "user_message", "text": "fourth"})
            busy = await c4.until_type("error", "final")
            assert busy["code"] == "busy" and "you already have 2 turn(s) waiting" in busy["message"]
            await c3.send({"type": "stop"})
            stopped = await c3.until_type("error", "final")
            assert stopped["code"] == "stopped"
            assert (await c1.until_type("final", "error", timeout=30))["text"] == "slow answer"
            assert (await c2.until_type("final", "error", timeout=30))["text"] == "slow answer"
            # the queued turn moved up when the first one finished
            assert any(f.get("text") == "the turn is starting (it waited in the queue)" for f in c2.frames)
            with trio.move_on_after(1):  # the busy and the stopped turn must never be answered later
                await c4.until_type("final", "error")
                raise AssertionError("the refused turn was answered")
            sessions = {c3.session_id, c4.session_id}
        assert [r.session for r in fake.requests if r.session in sessions] == []
        rows = db_rows(db, "SELECT session_id, content FROM chat_messages")
        assert [r for r in rows if r["session_id"] in sessions] == []  # nothing of them was stored
        assert sum(1 for r in rows if r["content"] in ("first", "second")) == 2
        assert next(e for e in sp.logs if e.get("event") == "turn_unqueued")["session_id"] == c3.session_id


async def test_round_robin_between_two_users(tmp_path: Path) -> None:
    script = {"default": [{"delay_s": 0.3, "content": "ok"}]}
    tokens = "alice:alice-token-0123456789,bob:bob-token-0123456789ab"
    async with open_fake_llm(script) as fake:
        mapping = prepare(tmp_path, limits={"max_concurrent_turns": 1, "max_turns_per_user": 1})
        mapping["llm"]["base_url"] = fake.base_url
        mapping["server"]["tokens_env"] = "RT_LOAD_TOKENS"
        config = proc.write_config(tmp_path, mapping)
        owner: dict[str, str] = {}
        import os
        os.environ["RT_LOAD_TOKENS"] = tokens
        try:
            async with proc.serve(config) as sp:
                from rt_helpers import WsClient
                from trio_websocket import open_websocket_url

                clients = []
                async with trio.open_nursery() as nursery:
                    async def connect(user: str, i: int, ready: trio.Event, go_on: trio.Event) -> None:
                        async with open_websocket_url(sp.ws_url) as conn:
                            c = WsClient(conn)
                            await c.send({"type": "hello", "thread": f"{user}-{i}", "token": f"{user}-token-"
                                          + ("0123456789" if user == "alice" else "0123456789ab")})
                            c.session = await c.recv()
                            owner[c.session_id] = user
                            await c.send({"type": "user_message", "text": f"{user} {i}"})
                            if fake.requests or clients:  # every turn but the very first one queues
                                await c.until(lambda f: "queue_position" in f)
                            else:
                                await fake.wait_requests(1)
                            clients.append(c)
                            ready.set()
                            await c.until_type("final", "error", timeout=60)
                            go_on.set()

                    done = []
                    for user, n in (("alice", 6), ("bob", 2)):
                        for i in range(n):
                            ready, finished = trio.Event(), trio.Event()
                            nursery.start_soon(connect, user, i, ready, finished)
                            with trio.fail_after(30):
                                await ready.wait()
                            done.append(finished)
            order = [owner[r.session] for r in fake.requests]
        finally:
            del os.environ["RT_LOAD_TOKENS"]
        # alice's first turn runs; then the queue alternates while both have turns waiting
        assert order == ["alice", "alice", "bob", "alice", "bob", "alice", "alice", "alice"]


async def test_a_429_storm_holds_every_turn(tmp_path: Path) -> None:
    script = {"default": [{"http_status": 429, "retry_after": 3}, {"http_status": 429, "retry_after": 1},
                          {"content": "a done"}],
              "probe": [{"content": "probe"}]}
    async with open_fake_llm(script) as fake:
        mapping = prepare(tmp_path, llm={"max_retries": 3})
        mapping["llm"]["base_url"] = fake.base_url
        config = proc.write_config(tmp_path, mapping)
        async with proc.serve(config) as sp, proc.ws(sp.ws_url, "a") as a, proc.ws(sp.ws_url, "b") as b:
            await a.send({"type": "user_message", "text": "a"})
            with trio.fail_after(15):
                while not any(r.status == 429 for r in fake.requests):
                    await fake.wait_requests(len(fake.requests) + 1)
                # the daemon has read the 429 (its hold is set before it logs the retry)
                while not any(e.get("event") == "model_call_retry" for e in sp.logs):
                    await trio.sleep(0.01)
            # new sessions get one good step; a's session goes on with its two last steps
            fake.script = coerce_script({"default": [{"content": "b done"}, {"http_status": 429, "retry_after": 1},
                                                     {"content": "a done"}], "probe": script["probe"]})
            await b.send({"type": "user_message", "text": "b"})
            await trio.sleep(1)  # a point in the middle of a's 3 s Retry-After

            def probe() -> None:
                req = urllib.request.Request(fake.base_url + "/chat/completions", method="POST",
                                             data=json.dumps({"model": "m", "messages": []}).encode(),
                                             headers={"Content-Type": "application/json", "X-Ongrid-Agent": "probe"})
                urllib.request.urlopen(req, timeout=10).read()

            await trio.to_thread.run_sync(probe)
            fa = await a.until_type("final", "error", timeout=30)
            fb = await b.until_type("final", "error", timeout=30)
        assert (fa["type"], fa.get("text")) == ("final", "a done")
        assert (fb["type"], fb.get("text")) == ("final", "b done")
        agents = [(r.agent, r.session, r.status) for r in fake.requests]
        b_index = next(i for i, (agent, sid, _) in enumerate(agents) if sid == b.session_id)
        probe_index = next(i for i, (agent, _, _) in enumerate(agents) if agent == "probe")
        assert probe_index < b_index  # b's call waited for a's Retry-After
        assert [s for _, sid, s in agents if sid == a.session_id] == [429, 429, 200]
        held = [e for e in sp.logs if e.get("event") == "model_call_rate_limited"]
        assert b.session_id in {e.get("session_id") for e in held}


async def test_shutdown_while_queued_never_runs_the_queued_turn(tmp_path: Path) -> None:
    import signal

    script = {"default": [{"delay_s": 2, "content": "slow answer"}]}
    async with open_fake_llm(script) as fake:
        mapping = prepare(tmp_path, limits={"max_concurrent_turns": 1})
        mapping["llm"]["base_url"] = fake.base_url
        config = proc.write_config(tmp_path, mapping)
        async with proc.serve(config) as sp, proc.ws(sp.ws_url, "s1") as c1, proc.ws(sp.ws_url, "s2") as c2:
            await c1.send({"type": "user_message", "text": "first"})
            await fake.wait_requests(1)
            await c2.send({"type": "user_message", "text": "second"})
            await c2.until(lambda f: "queue_position" in f)
            sp.proc.send_signal(signal.SIGTERM)
            end = await c2.until_type("error", "final", timeout=20)
            assert end["code"] == "stopped" and "shutdown" in end["message"]
            with trio.fail_after(30):
                assert await sp.proc.wait() == 0
            queued_sid = c2.session_id
        assert [r for r in fake.requests if r.session == queued_sid] == []
        db = Path(mapping["state_dir"]) / "ongrid.db"
        assert db_rows(db, "SELECT content FROM chat_messages WHERE session_id = ?", (queued_sid,)) == []
        assert db_rows(db, "SELECT content FROM pending_messages") == []  # held while it waited, then dropped


async def test_a_waiting_turns_inbox_is_bounded(tmp_path: Path) -> None:
    """Messages sent to a thread whose turn waits join it, up to INBOX_MAX;
    one more is refused ``busy`` (nothing stored), and the turn still runs."""
    from ongridd.runtime.core import INBOX_MAX

    script = {"default": [{"delay_s": 1, "content": "slow answer"}]}
    async with open_fake_llm(script) as fake:
        mapping = prepare(tmp_path, limits={"max_concurrent_turns": 1, "max_turns_per_user": 1})
        mapping["llm"]["base_url"] = fake.base_url
        config = proc.write_config(tmp_path, mapping)
        db = Path(mapping["state_dir"]) / "ongrid.db"
        async with proc.serve(config) as sp, proc.ws(sp.ws_url, "slow") as c1, proc.ws(sp.ws_url, "flood") as c2:
            await c1.send({"type": "user_message", "text": "first"})
            await fake.wait_requests(1)
            await c2.send({"type": "user_message", "text": "flood 0"})
            await c2.until(lambda f: "queue_position" in f)
            for i in range(1, INBOX_MAX + 1):
                await c2.send({"type": "user_message", "text": f"flood {i}"})
            await c2.send({"type": "user_message", "text": "one too many"})
            busy = await c2.until_type("error")
            assert busy["code"] == "busy" and f"{INBOX_MAX} messages waiting" in busy["message"]
            assert (await c2.until_type("final", timeout=60))["text"] == "slow answer"
        contents = [r["content"] for r in db_rows(db, "SELECT content FROM chat_messages WHERE role = 'user'")]
        assert "one too many" not in contents and f"flood {INBOX_MAX}" in contents
