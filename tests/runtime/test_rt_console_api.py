"""The HTTP API the web console needs, on the real daemon and the scripted model:
``/api/me``, the caller's threads, transcript pages with rendered ``html``, audit rows
with the proposal a gated call recorded, owner-only answers, bounded parameters, and
``ongrid sessions list|audit`` showing the same."""

from __future__ import annotations

import json

import httpx2
import pytest
import trio
from rt_helpers import agent_call, ongrid_cmd, open_daemon, subprocess_env

REASON = "no runbook covers restarting nginx here"
SCRIPT = {
    "default": [
        {"content": "Dispatching the disk and ops specialists.",
         "tool_calls": [agent_call("specialist-disk", "What fills ${DISK_DIR}?", "disk usage"),
                        agent_call("specialist-ops", "Restart nginx on host local: users see 502s.", "restart nginx")]},
        {"content": "Done: the restart was **rejected**. <script>alert(1)</script>"},
    ],
    "specialist-disk": [
        {"tool_calls": [{"name": "host_du_summary", "arguments": {"paths": ["${DISK_DIR}"], "depth": 1}}]},
        {"content": "disk: measured"},
    ],
    "specialist-ops": [
        {"tool_calls": [{"name": "host_restart_service",
                         "arguments": {"service": "nginx", "reason": "users see 502s on web"}}]},
        {"content": "ops: rejected"},
    ],
    "reviewer": [{"content": f"Decision: reject\n- runbook: fail — {REASON}"}],
}

ALICE = {"Authorization": "Bearer tok-alice-console"}
BOB = {"Authorization": "Bearer tok-bob-console"}


async def cli(*args: str, token: str = "tok-alice-console") -> tuple[int, str, str]:
    with trio.fail_after(60):
        proc = await trio.run_process(ongrid_cmd(*args), capture_stdout=True, capture_stderr=True, check=False,
                                      env=subprocess_env(ONGRID_TOKEN=token, ONGRID_URL=""))
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


@pytest.mark.slow
async def test_threads_messages_and_audit_with_proposals(tmp_path, monkeypatch):
    monkeypatch.setenv("RT_CONSOLE_TOKENS", "alice:tok-alice-console,bob:tok-bob-console")
    (tmp_path / "disk" / "logs").mkdir(parents=True)
    (tmp_path / "disk" / "logs" / "a.log").write_bytes(b"x" * 100_000)
    async with open_daemon(tmp_path, SCRIPT, server={"tokens_env": "RT_CONSOLE_TOKENS"}) as d:
        d.env["DISK_DIR"] = str(tmp_path / "disk")
        code, out, err = await cli("ask", "--url", d.base_url, "--json", "--thread", "ops", "restart nginx please")
        assert code == 0, err
        frames = [json.loads(line) for line in out.splitlines()]
        sid = frames[0]["session_id"]
        final = frames[-1]
        assert final["type"] == "final" and "<strong>rejected</strong>" in final["html"]
        assert "<script>" not in final["html"] and "&lt;script&gt;" in final["html"]
        results = [f for f in frames if f["type"] == "agent_result"]
        assert results and all(f["html"].startswith("<p>") for f in results)

        async with httpx2.AsyncClient(base_url=d.base_url) as http:
            assert (await http.get("/api/me")).json() == {"user": None, "auth_required": True}
            assert (await http.get("/api/me", headers=ALICE)).json() == {"user": "alice", "auth_required": True}
            assert (await http.get("/api/me", headers={"Authorization": "Bearer nope"})).status_code == 401

            threads = (await http.get("/api/sessions", headers=ALICE)).json()
            assert [t["thread"] for t in threads] == ["ops"]
            t = threads[0]
            assert set(t) == {"id", "thread", "status", "created_at", "updated_at", "last_user_text", "running",
                              "last_turn", "last_turn_error"}
            assert t["last_turn_error"] is None
            assert t["id"] == sid and t["running"] is False and t["last_turn"] == "completed"
            assert t["last_user_text"] == "restart nginx please" and t["updated_at"] >= t["created_at"]
            assert (await http.get("/api/sessions", headers=BOB)).json() == []
            # cursor: nothing older than this thread's last activity
            page = await http.get("/api/sessions", headers=ALICE, params={"before": t["updated_at"], "limit": 5})
            assert page.json() == []
            page = await http.get("/api/sessions", headers=ALICE,
                                  params={"before": t["updated_at"], "before_id": "~" * 36})
            assert [x["id"] for x in page.json()] == [sid]  # same time, id below the cursor's

            msgs = (await http.get(f"/api/sessions/{sid}/messages", headers=ALICE)).json()
            assert [m["seq"] for m in msgs] == list(range(1, len(msgs) + 1))
            assert set(msgs[0]) == {"seq", "role", "content", "html", "tool_calls", "tool_call_id", "created_at"}
            assert msgs[0]["role"] == "user" and msgs[0]["html"] is None
            answer = msgs[-1]
            assert answer["role"] == "assistant" and answer["html"] == final["html"]
            calls = msgs[1]["tool_calls"]
            assert [c["name"] for c in calls] == ["AgentTool", "AgentTool"]
            tool_msgs = [m for m in msgs if m["role"] == "tool"]
            assert {m["tool_call_id"] for m in tool_msgs} == {c["id"] for c in calls}
            part = (await http.get(f"/api/sessions/{sid}/messages", headers=ALICE,
                                   params={"after_seq": 1, "limit": 2})).json()
            assert [m["seq"] for m in part] == [2, 3]

            audit = (await http.get(f"/api/sessions/{sid}/audit", headers=ALICE)).json()
            gated = [a for a in audit if a["tool_name"] == "host_restart_service"]
            assert len(gated) == 1 and gated[0]["status"] == "rejected"
            proposal = gated[0]["proposal"]
            assert proposal["decision"] == "reject" and REASON in proposal["decision_reason"]
            reviewer = proposal["reviewer_session_id"]
            tree = (await http.get(f"/api/sessions/{sid}/tree", headers=ALICE)).json()
            ops = next(c for c in tree["children"] if c["agent_id"] == "specialist-ops")
            assert [c["id"] for c in ops["children"]] == [reviewer]
            assert all(a["tool_call_id"] for a in audit)  # every call's id is kept
            assert all(a["proposal"] is None for a in audit if a is not gated[0])
            limited = (await http.get(f"/api/sessions/{sid}/audit", headers=ALICE, params={"limit": 1})).json()
            assert len(limited) == 1

            # owner only; bad parameters are a 400, absurd limits are clamped
            for path in (f"/api/sessions/{sid}/messages", f"/api/sessions/{sid}/audit", f"/api/sessions/{sid}/tree"):
                r = await http.get(path, headers=BOB)
                assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
                assert (await http.get(path)).status_code == 401
            for params in ({"limit": "abc"}, {"after_seq": "1e9"}, {"limit": "9" * 40}):
                r = await http.get(f"/api/sessions/{sid}/messages", headers=ALICE, params=params)
                assert r.status_code == 400, params
            assert (await http.get("/api/sessions", headers=ALICE, params={"before": "yesterday"})).status_code == 400
            big = await http.get(f"/api/sessions/{sid}/messages", headers=ALICE, params={"limit": 10**9})
            assert big.status_code == 200 and len(big.json()) == len(msgs)

        code, out, err = await cli("sessions", "list", "--json", "--url", d.base_url)
        assert code == 0, err
        assert [t["id"] for t in json.loads(out)] == [sid]
        code, out, err = await cli("sessions", "list", "--url", d.base_url)
        assert code == 0 and "ops" in out and sid in out and "completed" in out
        header, *lines = out.splitlines()
        code, _out, err = await cli("sessions", "list", "--url", d.base_url, token="")
        assert code == 2 and "HTTP 401" in err and "--token-file" in err and "$ONGRID_TOKEN" in err
        assert header.split()[:4] == ["LAST", "ACTIVITY", "LAST", "TURN"] and "THREAD" in header and len(lines) == 1
        code, out, err = await cli("sessions", "audit", sid, "--url", d.base_url)
        assert code == 0, err
        assert "review: reject" in out and REASON in out and reviewer in out
        code, out, err = await cli("sessions", "messages", sid, "--url", d.base_url)
        assert code == 0 and "#1 user: restart nginx please" in out


async def test_a_transcript_page_is_rendered_off_the_event_loop(tmp_path, monkeypatch):
    """A page of long answers takes a while to render the first time: it is rendered in a worker
    thread, so the event loop (and /healthz) keeps answering meanwhile."""
    import threading

    import ongridd.runtime.core as core

    seen: list[threading.Thread] = []
    real = core.markdown_html

    def recording(text: str) -> str:
        seen.append(threading.current_thread())
        return real(text)

    async with open_daemon(tmp_path, {"default": [{"content": "**long** answer " * 300}]}) as d:
        async with d.ws("paged") as c:
            await c.ask("go")
            sid = c.session_id
        monkeypatch.setattr(core, "markdown_html", recording)
        page = await d.runtime.session_messages(sid, user_id="local")
    assert page[-1]["html"].startswith("<p><strong>long</strong> answer")
    assert seen and threading.main_thread() not in seen
