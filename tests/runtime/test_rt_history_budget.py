"""The history budget of coordinator threads, from the outside: the real
``ongridd serve`` process on the scripted model, whose request log is what
is measured (docs/architecture.md §7, §12, §15)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx2
import trio
from rt_helpers import LiveEnv, db_rows, prepare
from test_rt_process import serve, write_config, ws

from ongridd.fakellm import open_fake_llm

BUDGET = 6000
HEADER = "[Summary of the earlier conversation"


def turn_steps(n: int) -> list[dict]:
    """Per turn: one SendMessage call (a tool call and its result), then an answer."""
    steps = []
    for k in range(n):
        steps.append({"tool_calls": [{"name": "SendMessage", "arguments": {"text": f"looking at question {k} "
                                                                                    + "x" * 60}}]})
        steps.append({"content": f"answer {k}: " + "y" * 150})
    return steps


def question(k: int) -> str:
    return f"question {k}: " + "q" * 90


def history_part(body: dict) -> list[dict]:
    """The request's messages without the system prompt (first) and the reminder (last)."""
    msgs = body["messages"]
    assert msgs[0]["role"] == "system" and "<system-reminder>" in msgs[-1]["content"]
    return msgs[1:-1]


def chars(messages: list[dict]) -> int:
    total = 0
    for m in messages:
        total += len(m.get("content") or "")
        for c in m.get("tool_calls") or ():
            total += len(c["function"]["name"]) + len(c["function"]["arguments"] or "")
    return total


def assert_pairs_intact(messages: list[dict]) -> None:
    """Every tool call is answered right after its assistant message; no tool message without its call."""
    i = 0
    while i < len(messages):
        m = messages[i]
        assert m["role"] != "tool", f"tool message without its call at {i}: {m}"
        calls = [c["id"] for c in m.get("tool_calls") or ()]
        answered = [x.get("tool_call_id") for x in messages[i + 1:i + 1 + len(calls)]]
        assert answered == calls, (i, calls, answered)
        i += 1 + len(calls)


def summary_request_count(fake) -> int:
    return len([r for r in fake.requests if r.agent == "summarizer"])


async def test_300_turns_stay_under_the_budget_and_the_summary_survives_a_restart(tmp_path):
    turns = 300
    script = {"default": turn_steps(turns + 40),
              "summarizer": [{"content": "SUMMARY: the user asked numbered questions; each was answered."}]}
    async with open_fake_llm(script, env=LiveEnv()) as fake:
        mapping = prepare(tmp_path, limits={"history_max_chars": BUDGET})
        mapping["llm"]["base_url"] = fake.base_url
        config = write_config(tmp_path, mapping)
        db = Path(mapping["state_dir"]) / "ongrid.db"
        async with serve(config) as first, ws(first.ws_url, "long") as c:
            sid = c.session["session_id"]
            k = 0
            for k in range(turns):
                frame = await c.ask(question(k))
                assert frame["type"] == "final" and frame["text"] == f"answer {k}: " + "y" * 150, frame
            # go on until a turn has just made a summary: the next turn is then under the budget for sure
            while True:
                k += 1
                assert k < turns + 40
                before_turn = summary_request_count(fake)
                frame = await c.ask(question(k))
                assert frame["type"] == "final", frame
                if summary_request_count(fake) > before_turn:
                    break
            async with httpx2.AsyncClient(base_url=first.url) as http:
                items = (await http.get(f"/api/sessions/{sid}/messages", params={"limit": 2000})).json()
            first.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(20):
                await first.proc.wait()
        done = k + 1

        requests = [r for r in fake.requests if r.agent == "default"]
        assert len(requests) == 2 * done
        for r in requests:
            hist = history_part(r.body)
            # the history part of every request, measured as the daemon counts it, is within the budget
            assert chars(hist) <= BUDGET, chars(hist)
            assert_pairs_intact(hist)
        assert any(HEADER in (m.get("content") or "") for m in history_part(requests[-1].body))
        summaries = db_rows(db, "SELECT * FROM thread_summaries WHERE session_id = ? ORDER BY through_seq", (sid,))
        assert len(summaries) == summary_request_count(fake) >= 10
        assert {s["source"] for s in summaries} == {"model"}
        assert [s["through_seq"] for s in summaries] == sorted({s["through_seq"] for s in summaries})
        # each summary call is bounded too (its input: the previous summary and the newly covered turns)
        for r in (r for r in fake.requests if r.agent == "summarizer"):
            assert len(r.body["messages"][1]["content"]) <= max(4000, BUDGET)
        # every summary call has its own closed session row, a child of the thread
        rows = db_rows(db, "SELECT * FROM chat_sessions WHERE agent_id = 'summarizer'")
        assert len(rows) == len(summaries)
        assert {(r["parent_session_id"], r["status"]) for r in rows} == {(sid, "completed")}
        assert all(r["closed_at"] for r in rows)
        assert {s["summarizer_session_id"] for s in summaries} == {r["id"] for r in rows}
        # the full transcript stays in the database: user, call, result, answer per turn
        (count,) = db_rows(db, "SELECT count(*) AS n FROM chat_messages WHERE session_id = ?", (sid,))
        assert count["n"] == 4 * done
        # the transcript API shows the summaries where they were made, messages keep their shape
        shown = [i for i in items if i["role"] == "summary"]
        assert [i["summary"]["through_seq"] for i in shown] == [s["through_seq"] for s in summaries]
        assert shown[-1]["content"] == summaries[-1]["content"] and shown[-1]["summary"]["source"] == "model"
        msgs = [i for i in items if i["role"] != "summary"]
        assert [m["seq"] for m in msgs] == list(range(1, 4 * done + 1))
        assert set(msgs[0]) == {"seq", "role", "content", "html", "tool_calls", "tool_call_id", "created_at"}
        for item in shown:  # right after the last message it covers
            at = items.index(item)
            assert items[at - 1]["seq"] == item["seq"]

        # after a restart the stored summary is used at once, without a new summary call
        calls_before, requests_before = summary_request_count(fake), len(fake.requests)
        async with serve(config) as second, ws(second.ws_url, "long") as c2:
            assert c2.session["session_id"] == sid and c2.session["resumed"]
            frame = await c2.ask(question(done))
            assert frame["type"] == "final", frame
        after = [r for r in fake.requests[requests_before:] if r.agent == "default"]
        assert summary_request_count(fake) == calls_before
        hist = history_part(after[0].body)
        assert hist[0]["role"] == "user" and hist[0]["content"].startswith(HEADER)
        assert summaries[-1]["content"] in hist[0]["content"]
        assert f"#{summaries[-1]['through_seq']})" in hist[0]["content"]
        assert chars(hist) <= BUDGET
        assert_pairs_intact(hist)


async def test_a_failing_summary_call_falls_back_and_the_turn_still_answers(tmp_path):
    turns = 30
    script = {"default": turn_steps(turns), "summarizer": [{"http_status": 500}]}
    async with open_fake_llm(script, env=LiveEnv()) as fake:
        mapping = prepare(tmp_path, limits={"history_max_chars": BUDGET})
        mapping["llm"]["base_url"] = fake.base_url
        config = write_config(tmp_path, mapping)
        db = Path(mapping["state_dir"]) / "ongrid.db"
        async with serve(config) as d, ws(d.ws_url, "fails") as c:
            sid = c.session["session_id"]
            for k in range(turns):
                frame = await c.ask(question(k))
                assert frame["type"] == "final" and frame["text"].startswith(f"answer {k}:"), frame
            async with httpx2.AsyncClient(base_url=d.url) as http:
                items = (await http.get(f"/api/sessions/{sid}/messages")).json()
        assert summary_request_count(fake) >= 1
        summaries = db_rows(db, "SELECT * FROM thread_summaries WHERE session_id = ? ORDER BY through_seq", (sid,))
        assert summaries and {s["source"] for s in summaries} == {"fallback"}
        # the fallback keeps the user messages and the final answers, not the tool traffic
        last = summaries[-1]["content"]
        assert "User: question" in last and "Answer: answer" in last and "looking at question" not in last
        assert len(last) <= BUDGET // 5
        rows = db_rows(db, "SELECT * FROM chat_sessions WHERE agent_id = 'summarizer'")
        assert rows and {r["status"] for r in rows} == {"failed"} and all(r["closed_at"] for r in rows)
        assert all("500" in (r["close_reason"] or "") or "provider" in (r["close_reason"] or "") for r in rows)
        for r in (r for r in fake.requests if r.agent == "default"):
            hist = history_part(r.body)
            assert chars(hist) <= BUDGET
            assert_pairs_intact(hist)
        shown = [i for i in items if i["role"] == "summary"]
        assert shown and {i["summary"]["source"] for i in shown} == {"fallback"}
        assert json.loads(json.dumps(shown[-1]))["content"] == last
