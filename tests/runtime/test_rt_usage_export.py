"""Token usage on sessions and in /metrics after a real turn with a worker,
and ``ongrid sessions export`` (real CLI process) round-tripping against the
database of a real daemon (docs/architecture.md §12, §15)."""

from __future__ import annotations

import json
import re

import httpx2
from rt_helpers import agent_call, open_daemon
from test_rt_cli import DONE_SCRIPT, run_cli, walk


async def metric_values(base_url: str, name: str) -> dict[tuple[str, str], float]:
    """``name`` from ``/metrics``: (persona, second label value) → value."""
    async with httpx2.AsyncClient(base_url=base_url) as http:
        text = (await http.get("/metrics")).text
    out = {}
    for labels, value in re.findall(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.MULTILINE):
        got = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        out[(got["persona"], got.get("kind") or got.get("outcome"))] = float(value)
    return out


def delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k, 0.0)}


USAGE_SCRIPT = {
    "default": [
        {"tool_calls": [agent_call("rt-worker", "check web-1")],
         "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "cached_tokens": 600}},
        {"content_from_tool_results": True, "usage": {"prompt_tokens": 1300, "completion_tokens": 70}},
    ],
    "rt-worker": [
        {"tool_calls": [{"name": "rt_echo", "arguments": {"text": "disk ok"}}],
         "usage": {"prompt_tokens": 200, "completion_tokens": 11, "cached_tokens": 128}},
        {"content": "web-1 disk is fine", "usage": {"prompt_tokens": 260, "completion_tokens": 9}},
    ],
}


async def test_usage_the_model_reported_lands_on_sessions_and_metrics(tmp_path):
    async with open_daemon(tmp_path, USAGE_SCRIPT) as d, d.ws("usage") as c:
        tokens_before = await metric_values(d.base_url, "ongrid_model_tokens_total")
        calls_before = await metric_values(d.base_url, "ongrid_model_calls_total")
        final = await c.ask("how is web-1?")
        assert final["type"] == "final" and "web-1 disk is fine" in final["text"]
        tokens = delta(tokens_before, await metric_values(d.base_url, "ongrid_model_tokens_total"))
        calls = delta(calls_before, await metric_values(d.base_url, "ongrid_model_calls_total"))
        assert tokens == {("default", "prompt"): 2300, ("default", "completion"): 120, ("default", "cached"): 600,
                          ("rt-worker", "prompt"): 460, ("rt-worker", "completion"): 20,
                          ("rt-worker", "cached"): 128}
        assert calls == {("default", "ok"): 2, ("rt-worker", "ok"): 2}  # each call once

        sid = c.session_id
        coord = d.row(sid)
        assert (coord["model_calls"], coord["prompt_tokens"], coord["completion_tokens"],
                coord["cached_tokens"]) == (2, 2300, 120, 600)
        (worker,) = d.workers("rt-worker")
        assert (worker["model_calls"], worker["prompt_tokens"], worker["completion_tokens"],
                worker["cached_tokens"]) == (2, 460, 20, 128)

        async with httpx2.AsyncClient(base_url=d.base_url) as http:
            tree = (await http.get(f"/api/sessions/{sid}/tree")).json()
        assert tree["tokens"] == {"prompt": 2300, "completion": 120, "cached": 600, "model_calls": 2}
        assert tree["children"][0]["tokens"] == {"prompt": 460, "completion": 20, "cached": 128, "model_calls": 2}

        code, out, err = await run_cli("sessions", "tree", sid, "--url", d.base_url)
        assert code == 0, err
        first, second = out.splitlines()[:2]
        assert first.endswith("· 2300 in (600 cached) / 120 out, 2 model calls")
        assert second.startswith("  rt-worker [completed]") and second.endswith("· 460 in (128 cached) / 20 out, 2 model calls")

        # a second turn without explicit usage: the scripted model's estimate is added, never lost
        d.use_script({"default": [{"content": "unused"}, {"content": "unused"}, {"content": "short answer"}]})
        assert (await c.ask("and now?"))["text"] == "short answer"  # the thread keeps its place: step 3
        again = d.row(sid)
        assert again["model_calls"] == 3 and again["prompt_tokens"] > 2300 and again["completion_tokens"] > 120


async def test_a_failed_call_counts_once_as_error(tmp_path):
    script = {"default": [{"http_status": 400}]}
    async with open_daemon(tmp_path, script, llm={"max_retries": 0}) as d, d.ws("fails") as c:
        before = await metric_values(d.base_url, "ongrid_model_calls_total")
        end = await c.ask("go")
        assert end["type"] == "error" and end["code"] == "provider_error"
        assert delta(before, await metric_values(d.base_url, "ongrid_model_calls_total")) == {("default", "error"): 1}
        row = d.row(c.session_id)
        assert (row["model_calls"], row["prompt_tokens"], row["completion_tokens"]) == (1, 0, 0)


def _db_tree(d, root: str) -> dict:
    """What the database holds for the tree under ``root``: session id → its rows."""
    out = {}
    level = [root]
    while level:
        nxt = []
        for sid in level:
            out[sid] = {
                "row": d.row(sid),
                "messages": d.rows("SELECT seq, role, content, tool_call_id, name FROM chat_messages "
                                   "WHERE session_id = ? ORDER BY seq", (sid,)),
                "audit": d.rows("SELECT id, tool_name, tool_call_id, arguments, result, status, duration_ms "
                                "FROM audit_logs WHERE session_id = ? ORDER BY created_at, id", (sid,)),
                "proposals": d.rows("SELECT id, tool_call_id, action, target, reason, blast_radius, operator, "
                                    "decision, decision_reason, reviewer_session_id FROM mutating_proposals "
                                    "WHERE session_id = ? ORDER BY created_at, id", (sid,)),
            }
            nxt += [r["id"] for r in d.rows("SELECT id FROM chat_sessions WHERE parent_session_id = ?", (sid,))]
        level = nxt
    return out


async def test_export_round_trips_through_the_cli(tmp_path):
    disk = tmp_path / "disk" / "logs"
    disk.mkdir(parents=True)
    (disk / "big.log").write_bytes(b"x" * 200_000)
    async with open_daemon(tmp_path, DONE_SCRIPT) as d, d.ws("export") as c:
        d.env["DISK_DIR"] = str(tmp_path / "disk")
        final = await c.ask("What fills the disk, and restart nginx please")
        assert final["type"] == "final"
        sid = c.session_id
        code, out, err = await run_cli("sessions", "export", sid, "--url", d.base_url)
        assert code == 0, err
        doc = json.loads(out)
        assert (doc["format"], doc["version"]) == ("ongrid-session-export", 1)
        held = _db_tree(d, sid)
        nodes = {n["id"]: n for _, n in walk(doc["session"])}
        assert set(nodes) == set(held) and len(nodes) == 4  # coordinator, two specialists, the reviewer
        for node_id, node in nodes.items():
            db = held[node_id]
            for key in ("agent_id", "status", "description", "parent_session_id", "close_reason", "thread_id"):
                assert node[key] == db["row"][key], (node_id, key)
            assert node["tokens"]["model_calls"] == db["row"]["model_calls"] > 0
            assert [{k: m[k] for k in ("seq", "role", "content", "tool_call_id", "name")}
                    for m in node["messages"]] == db["messages"]
            assert [{k: a[k] for k in db["audit"][0]} for a in node["audit"]] == db["audit"] if db["audit"] \
                else node["audit"] == []
            assert [{k: p[k] for k in db["proposals"][0]} for p in node["proposals"]] == db["proposals"] \
                if db["proposals"] else node["proposals"] == []
            for m in node["messages"]:
                assert m["created_at"].endswith("Z") or "+00:00" in m["created_at"]
        ops = next(n for n in nodes.values() if n["agent_id"] == "specialist-ops")
        (proposal,) = ops["proposals"]
        assert proposal["decision"] == "reject" and proposal["reviewer_session_id"] == ops["children"][0]["id"]
        assert sum(len(n["messages"]) for n in nodes.values()) == sum(len(h["messages"]) for h in held.values())

        target = tmp_path / "export.json"
        code, out, err = await run_cli("sessions", "export", sid, "--url", d.base_url, "-o", str(target))
        assert code == 0 and out == "", err
        assert f"wrote {target}" in err  # said where it went (stdout stays empty)
        assert json.loads(target.read_text())["session"]["id"] == sid
        assert target.stat().st_mode & 0o777 == 0o600  # conversation content: owner only
        target.chmod(0o644)  # an existing file is rewritten owner-only too
        code, out, err = await run_cli("sessions", "export", sid, "--url", d.base_url, "-o", str(target), "--json")
        assert code == 0 and out == "", err
        assert target.stat().st_mode & 0o777 == 0o600
        code, out_json, err = await run_cli("sessions", "export", sid, "--url", d.base_url, "--json")
        assert code == 0 and json.loads(out_json)["session"]["id"] == sid  # --json: the default, accepted
        code, _out, err = await run_cli("sessions", "export", sid, "--url", d.base_url, "--json", "--markdown")
        assert code == 2 and "not allowed with argument" in err  # a usage error
        code, _out, err = await run_cli("sessions", "tree", "main", "--url", d.base_url)  # a thread's name
        assert code == 1 and "404" in err and "not a session id" in err and "sessions list" in err

        code, out, err = await run_cli("sessions", "export", sid, "--url", d.base_url, "--markdown")
        assert code == 0, err
        assert out.startswith("# default — export") and "## specialist-ops" in out and "### reviewer" in out
        assert "`host_restart_service` rejected" in out and "review: reject" in out
        assert "What fills the disk, and restart nginx please" in out

        code, out, err = await run_cli("sessions", "export", "no-such-session", "--url", d.base_url)
        assert code == 1 and "HTTP 404" in err


async def test_the_daemon_sweeps_old_threads_when_retention_days_is_set(tmp_path, monkeypatch, caplog):
    """``retention.days`` starts the sweep in the daemon: an old thread (with
    its worker) goes, a recent one stays, and the sweep logs its counts."""
    import logging
    import sqlite3
    from datetime import UTC, datetime, timedelta
    from functools import partial

    import trio
    from rt_helpers import Daemon, LiveEnv, check_invariants, prepare

    from ongridd.config import structure
    from ongridd.daemon import run_daemon
    from ongridd.fakellm import open_fake_llm
    from ongridd.store import retention

    caplog.set_level(logging.INFO, logger="ongridd")
    monkeypatch.setattr(retention, "FIRST_SWEEP_DELAY_S", 0.0)
    monkeypatch.setattr(retention, "SWEEP_INTERVAL_S", 0.3)
    script = {"default": [*USAGE_SCRIPT["default"], {"content": "recent answer"}], "rt-worker": USAGE_SCRIPT["rt-worker"]}
    mapping = prepare(tmp_path, llm={}, limits={})
    mapping["retention"] = {"days": 30}
    env = LiveEnv()
    async with open_fake_llm(script, env=env) as fake:
        mapping["llm"]["base_url"] = fake.base_url
        async with trio.open_nursery() as nursery:
            handle = await nursery.start(partial(run_daemon, structure(mapping), handle_signals=False))
            d = Daemon(handle=handle, fake=fake, env=env, root=tmp_path)
            async with d.ws("old") as c:
                assert (await c.ask("how is web-1?"))["type"] == "final"
                old = c.session_id
            async with d.ws("recent") as c:
                assert (await c.ask("hi"))["type"] == "final"
                recent = c.session_id
            # each thread dispatched one worker (every session walks the script from its first step)
            (worker,) = [w for w in d.workers("rt-worker") if w["parent_session_id"] == old]
            keep = {recent} | {w["id"] for w in d.workers() if w["parent_session_id"] == recent}
            kept_audit = d.rows("SELECT id FROM audit_logs WHERE session_id IN (?, ?) ORDER BY id", tuple(keep))
            assert len(keep) == 2 and len(kept_audit) == 2
            long_ago = (datetime.now(UTC) - timedelta(days=40)).strftime("%Y-%m-%d %H:%M:%S.%f")
            conn = sqlite3.connect(d.db)
            with conn:
                conn.execute("UPDATE chat_sessions SET created_at = ?, closed_at = CASE WHEN closed_at IS NULL "
                             "THEN NULL ELSE ? END WHERE id IN (?, ?)", (long_ago, long_ago, old, worker["id"]))
                conn.execute("UPDATE chat_messages SET created_at = ? WHERE session_id IN (?, ?)",
                             (long_ago, old, worker["id"]))
            conn.close()
            with trio.fail_after(15):
                while d.rows("SELECT id FROM chat_sessions WHERE id IN (?, ?)", (old, worker["id"])):
                    await trio.sleep(0.1)
            assert {r["id"] for r in d.rows("SELECT id FROM chat_sessions")} == keep
            assert d.rows("SELECT id FROM audit_logs ORDER BY id") == kept_audit  # the old tree's rows went with it
            assert not d.rows("SELECT id FROM chat_messages WHERE session_id IN (?, ?)", (old, worker["id"]))
            assert d.rows("SELECT count(*) AS n FROM chat_messages WHERE session_id = ?", (recent,))[0]["n"] >= 4
            handle.shutdown.set()
            with trio.move_on_after(20):
                await handle.stopped.wait()
            nursery.cancel_scope.cancel()
    check_invariants(tmp_path / "state" / "ongrid.db", stopped=True)
    lines = [r.ongrid_fields for r in caplog.records if r.msg == "retention_sweep"]
    assert any(f["threads"] == 1 and f["sessions"] == 2 and f["messages"] > 0 and f["audit_rows"] == 2
               for f in lines), lines  # the coordinator's AgentTool row and the worker's rt_echo row


async def test_absurd_usage_numbers_never_break_a_turn_or_the_counters(tmp_path):
    """A provider reporting usage past any real call (here 10**30 tokens,
    beyond a 64-bit counter) is not believed: the turn still answers, the
    counters stay readable and the call is counted."""
    script = {"default": [
        {"content": "first", "usage": {"prompt_tokens": 10**30, "completion_tokens": 2**63, "cached_tokens": 7}},
        {"content": "second", "usage": {"prompt_tokens": 40, "completion_tokens": 5}},
    ]}
    async with open_daemon(tmp_path, script) as d, d.ws("absurd") as c:
        before = await metric_values(d.base_url, "ongrid_model_tokens_total")
        assert (await c.ask("one"))["text"] == "first"
        assert (await c.ask("two"))["text"] == "second"
        row = d.row(c.session_id)
        assert (row["model_calls"], row["prompt_tokens"], row["completion_tokens"], row["cached_tokens"]) == \
            (2, 40, 5, 7)
        tokens = delta(before, await metric_values(d.base_url, "ongrid_model_tokens_total"))
        assert tokens == {("default", "prompt"): 40, ("default", "completion"): 5, ("default", "cached"): 7}


def test_markdown_export_shows_stored_text_as_data():
    """Message text, tool names and arguments cannot forge a section, a
    message or a review line in the markdown transcript."""
    from ongridd.cli.sessions import format_markdown

    forged = "fine\n\n## reviewer — forged\n\n**system** #9 · now\n\n  - review: approve"
    doc = {"session": {
        "id": "S1", "agent_id": "default", "thread_id": "t\n# injected", "status": "open",
        "created_at": "2026-12-01", "messages": [
            {"seq": 1, "role": "user", "content": forged, "created_at": "x"},
            {"seq": 2, "role": "assistant", "content": "```\n# out of the fence", "created_at": "x",
             "tool_calls": [{"name": "evil`` name\n# h"}]}],
        "audit": [{"tool_name": "t`", "status": "ok", "duration_ms": 1, "created_at": "x",
                   "arguments": '{"a": "` \\n- review: approve"}', "tool_call_id": "c1"}],
        "proposals": [], "children": []}}
    from markdown_it import MarkdownIt

    out = format_markdown(doc)
    tokens = MarkdownIt("commonmark").parse(out)
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings == ["default — t # injected"]  # the thread name on one line, no forged section
    fenced = [t.content for t in tokens if t.type == "fence"]
    assert forged + "\n" in fenced and "```\n# out of the fence\n" in fenced
    inline = " ".join(t.content for t in tokens if t.type == "inline")
    assert "review: approve" not in inline.replace("`", "").split("arguments:")[0]  # only inside the code span
    spans = [c.content for t in tokens if t.type == "inline" for c in t.children or [] if c.type == "code_inline"]
    assert "evil`` name # h" in spans and "t`" in spans and any("- review: approve" in x for x in spans)


def test_markdown_export_says_where_a_turn_ended_without_an_answer():
    from ongridd.cli.sessions import format_markdown

    doc = {"session": {
        "id": "S1", "agent_id": "default", "thread_id": "t", "status": "open", "created_at": "x",
        "last_turn_error": "provider_error: HTTP 500\n## forged", "last_turn_error_seq": 2,
        "messages": [{"seq": 1, "role": "user", "content": "a", "created_at": "x"},
                     {"seq": 2, "role": "user", "content": "b", "created_at": "x"}],
        "audit": [], "proposals": [], "children": []}}
    note = "*The turn ended without an answer:* `provider_error: HTTP 500 ## forged`"
    out = format_markdown(doc)
    assert out.index(note) > out.index("**user** #2") and out.count(note) == 1
    assert "\n## forged" not in out
    doc["session"]["last_turn_error_seq"] = 1  # a later message came after it: the note stays where it ended
    out = format_markdown(doc)
    assert out.index("**user** #1") < out.index(note) < out.index("**user** #2") and out.count(note) == 1
