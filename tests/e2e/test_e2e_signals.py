"""End to end against a real ``ongridd serve`` with token auth: changes
recorded from outside (``ongrid changes record`` and ``POST /api/changes``)
come back from ``query_change_events``, and an ``ongrid ask`` turn whose
incident investigator finds the error line in a real log file with
``search_logs`` quotes that line in its final answer."""

from __future__ import annotations

import json
from datetime import datetime, timezone
import subprocess
from pathlib import Path

import httpx2
import pytest

from tests.e2e.e2e_helpers import env, free_port, ongrid, ongridd, start_fake_llm, stop, wait_healthy

pytestmark = pytest.mark.slow

TOKEN = "ci-bot-token-0123456789abcdef"
ERROR_LINE = ("2026-03-02T10:04:59Z ERROR checkout[4242]: connection to postgres-main:5432 refused "
              "(FATAL: remaining connection slots are reserved)")


def _start(tmp: Path, llm_url: str, logs: Path) -> tuple[subprocess.Popen, str]:
    config = tmp / "ongrid.yaml"
    config.write_text(json.dumps({"logs": {"dirs": [str(logs)]}}))
    port = free_port()
    proc = subprocess.Popen(ongridd("serve", "--config", str(config), "--state-dir", str(tmp / "state"),
                                    "--listen", f"127.0.0.1:{port}"),
                            cwd=tmp, env=env(ONGRID_LLM_BASE_URL=llm_url, ONGRID_LLM_MODEL="scripted",
                                             ONGRID_TOKENS=f"ci-bot:{TOKEN}"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(proc, url)
    return proc, url


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    d.mkdir()
    (d / "checkout.log").write_text(
        "2026-03-02T10:04:00Z INFO checkout[4242]: served 200 /pay in 31ms\n"
        f"{ERROR_LINE}\n"
        "2026-03-02T10:05:01Z INFO checkout[4242]: retrying in 5s\n")
    return d


def test_changes_recorded_from_outside_come_back_from_query_change_events(tmp_path, logs):
    script = {"default": [
        {"tool_calls": [{"name": "query_change_events",
                         "arguments": {"subject": "checkout", "since": "2026-03-01T00:00:00Z"}}]},
        {"content_from_tool_results": True},
    ]}
    llm, llm_url = start_fake_llm(tmp_path, script)
    daemon, url = _start(tmp_path, llm_url, logs)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        res = subprocess.run(ongrid("changes", "record", "--kind", "deploy", "--subject", "checkout", "--actor", "ci",
                                    "--detail", '{"version": "1.4.2"}', "--at", "2026-03-02T10:03:00Z",
                                    "--url", url, "--token-file", str(token_file)),
                             env=env(), capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        change_id = res.stdout.strip()
        assert len(change_id) == 36
        posted = httpx2.post(url + "/api/changes", headers=auth, timeout=10,
                             json={"kind": "flag", "subject": "checkout", "actor": "alice",
                                   "detail": {"flag": "new-pay", "on": True}})
        assert posted.status_code == 201
        row = posted.json()
        assert row["recorded_by"] == "ci-bot" and row["kind"] == "flag" and row["occurred_at"]
        other = httpx2.post(url + "/api/changes", headers=auth, timeout=10,
                            json={"kind": "deploy", "subject": "search", "actor": "ci"})
        assert other.status_code == 201
        # refusals: no token, a bad field, an Ongrid-only kind, too large
        assert httpx2.post(url + "/api/changes", json={"kind": "deploy"}, timeout=10).status_code == 401
        bad = httpx2.post(url + "/api/changes", headers=auth, timeout=10,
                          json={"kind": "deploy", "subject": "", "actor": "ci"})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "subject"
        forged = httpx2.post(url + "/api/changes", headers=auth, timeout=10,
                             json={"kind": "incident", "subject": "x", "actor": "ci"})
        assert forged.status_code == 400 and forged.json()["error"]["field"] == "kind"
        huge = httpx2.post(url + "/api/changes", headers=auth, timeout=10,
                           json={"kind": "deploy", "subject": "x", "actor": "ci", "detail": {"blob": "x" * 70_000}})
        assert huge.status_code == 413
        # a time past year 9999 (or before year 1) cannot be written as a date: 400 naming it, not a 500
        for at in (1e12, 1e308, 99999999999999999999, "99999999999999999999", "now+999999999999h", -1e15):
            far = httpx2.post(url + "/api/changes", headers=auth, timeout=10,
                              json={"kind": "deploy", "subject": "x", "actor": "ci", "at": at})
            assert far.status_code == 400 and far.json()["error"]["field"] == "at", (at, far.text)
            assert "years 1 to 9999" in far.json()["error"]["message"], far.text
        usage = subprocess.run(ongrid("changes", "record", "--kind", "deploy", "--subject", "s", "--actor", "a",
                                      "--detail", "[1]", "--url", url), env=env(), capture_output=True, text=True,
                               timeout=60)
        assert usage.returncode == 2 and "JSON object" in usage.stderr
        http_error = subprocess.run(ongrid("changes", "record", "--kind", "nonsense", "--subject", "s", "--actor",
                                           "a", "--url", url, "--token-file", str(token_file)),
                                    env=env(), capture_output=True, text=True, timeout=60)
        assert http_error.returncode == 1 and "HTTP 400: kind" in http_error.stderr
        # what was recorded can be listed back: the API, and the CLI (newest first by when it happened)
        listed = httpx2.get(url + "/api/changes", params={"subject": "checkout"}, headers=auth, timeout=10)
        assert listed.status_code == 200
        assert [c["kind"] for c in listed.json()["changes"]] == ["flag", "deploy"]
        assert httpx2.get(url + "/api/changes", timeout=10).status_code == 401
        for query, field in (({"limit": "0"}, "limit"), ({"since": "yesterday-ish"}, "since"), ({"x": "1"}, "x"),
                             ({"since": "99999999999999"}, "since"), ({"until": "9999-12-31T23:59:59-14:00"}, "until"),
                             ({"since": "now-99999999999d"}, "since"), ({"limit": "\u00b2"}, "limit"),
                             ({"limit": "\u0665"}, "limit"), ({"limit": "0" * 5000 + "1"}, "limit")):
            bad = httpx2.get(url + "/api/changes", params=query, headers=auth, timeout=10)
            assert bad.status_code == 400 and bad.json()["error"]["field"] == field, bad.text
        shown = subprocess.run(ongrid("changes", "list", "--kind", "deploy", "--url", url, "--token-file",
                                      str(token_file)), env=env(), capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        header, *lines = shown.stdout.splitlines()
        assert header.split() == ["OCCURRED", "AT", "KIND", "SUBJECT", "ACTOR,", "DETAIL"]
        assert len(lines) == 2 and "search" in lines[0] and "checkout" in lines[1] and '"version": "1.4.2"' in lines[1]
        assert lines[1].startswith("2026-03-02T10:03:00") and "recorded by ci-bot" in lines[1]
        assert lines[0].index(" by ") == lines[1].index(" by ")  # subjects of other lengths: the actors line up
        assert header.index("ACTOR") == lines[0].index(" by ") + 1 and header.index("KIND") == lines[1].index("deploy")
        bad = subprocess.run(ongrid("changes", "list", "--since", "yesterday", "--url", url, "--token-file",
                                    str(token_file)), env=env(), capture_output=True, text=True, timeout=60)
        assert bad.returncode == 1 and "--since 24h is 24 hours ago" in bad.stderr, bad.stderr
        bad = subprocess.run(ongrid("changes", "record", "--kind", "deploy", "--subject", "s", "--actor", "a", "--at",
                                    "yesterday", "--url", url, "--token-file", str(token_file)),
                             env=env(), capture_output=True, text=True, timeout=60)
        assert bad.returncode == 1 and "--at 15m is 15 minutes ago" in bad.stderr, bad.stderr
        for args, said in ((("--kind", "deploys"), "kind: expected one of deploy, rollback"),
                           (("--since", "1h", "--until", "2h"), "must be after since")):
            bad = subprocess.run(ongrid("changes", "list", *args, "--url", url, "--token-file", str(token_file)),
                                 env=env(), capture_output=True, text=True, timeout=60)
            assert bad.returncode == 1 and said in bad.stderr, (args, bad.stderr)
        for own in ("incident", "tool"):  # Ongrid's own kinds can be listed (not posted)
            assert httpx2.get(url + "/api/changes", params={"kind": own}, headers=auth, timeout=10).status_code == 200
        for since, expected in (("1h", 1), ("100000d", 2), ("now-100000d", 2)):  # a bare duration: that long ago
            shown = subprocess.run(ongrid("changes", "list", "--kind", "deploy", "--since", since, "--json", "--url",
                                          url, "--token-file", str(token_file)),
                                   env=env(), capture_output=True, text=True, timeout=60)
            assert shown.returncode == 0 and len(json.loads(shown.stdout)) == expected, (since, shown.stderr)
        as_json = subprocess.run(ongrid("changes", "list", "--json", "--limit", "1", "--url", url, "--token-file",
                                        str(token_file)), env=env(), capture_output=True, text=True, timeout=60)
        assert as_json.returncode == 0 and len(json.loads(as_json.stdout)) == 1

        ask = subprocess.run(ongrid("ask", "--url", url, "--token-file", str(token_file), "What changed on checkout?"),
                             env=env(), capture_output=True, text=True, timeout=120)
        assert ask.returncode == 0, ask.stderr
        name, _, body = ask.stdout.strip().partition(": ")
        assert name == "query_change_events"
        events = json.loads(body)["events"]
        assert [(e["kind"], e["actor"], e["recorded_by"], e["origin"]) for e in events] == [
            ("flag", "alice", "ci-bot", "external"), ("deploy", "ci", "ci-bot", "external")]
        assert events[1]["id"] == change_id and events[1]["detail"] == {"version": "1.4.2"}
        assert events[1]["occurred_at"].startswith("2026-03-02T10:03:00")
        # --at takes a bare duration as that long ago, as --since does, and a relative time with its dash,
        # written apart from the option or joined to it
        for at in (("--at", "15m"), ("--at", "-15m"), ("--at=-15m",)):
            ago = subprocess.run(ongrid("changes", "record", "--kind", "maintenance", "--subject", "db", "--actor",
                                        "ops", *at, "--json", "--url", url, "--token-file", str(token_file)),
                                 env=env(), capture_output=True, text=True, timeout=60)
            assert ago.returncode == 0, (at, ago.stderr)
            when = datetime.fromisoformat(json.loads(ago.stdout)["occurred_at"].replace("Z", "+00:00"))
            assert 14 * 60 <= (datetime.now(timezone.utc) - when).total_seconds() <= 16 * 60, (at, when)
        recent = subprocess.run(ongrid("changes", "list", "--kind", "maintenance", "--since", "-1h", "--json",
                                       "--url", url, "--token-file", str(token_file)),
                                env=env(), capture_output=True, text=True, timeout=60)
        assert recent.returncode == 0 and len(json.loads(recent.stdout)) == 3, recent.stderr
        assert stop(daemon) == 0
    finally:
        stop(daemon)
        stop(llm)


def test_ask_turn_where_the_investigator_quotes_the_error_line_from_a_real_log(tmp_path, logs):
    script = {
        "default": [
            {"tool_calls": [{"name": "AgentTool", "arguments": {
                "description": "Why does checkout fail?", "subagent_type": "incident-investigator",
                "prompt": "checkout returns 502 since 10:05 UTC on host local; find the cause in its logs."}}]},
            {"content_from_tool_results": True},
        ],
        "incident-investigator": [
            {"tool_calls": [{"name": "search_logs", "arguments": {
                "pattern": "error", "source": "files", "since": "2026-03-02T09:00:00Z"}}]},
            {"content_from_tool_results": True},
        ],
    }
    llm, llm_url = start_fake_llm(tmp_path, script)
    daemon, url = _start(tmp_path, llm_url, logs)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    try:
        res = subprocess.run(ongrid("ask", "--url", url, "--token-file", str(token_file), "Why does checkout fail?"),
                             env=env(), capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        name, _, body = res.stdout.strip().partition(": ")
        dispatch = json.loads(body)
        assert name == "AgentTool" and dispatch["status"] == "completed"
        tool, _, result = dispatch["result"].partition(": ")
        found = json.loads(result)
        assert tool == "search_logs" and found["total_matched"] == 1
        assert found["hits"] == [{"host": "local", "file": str(logs / "checkout.log"), "line_no": 2,
                                  "timestamp": "2026-03-02T10:04:59Z", "line": ERROR_LINE}]
        assert ERROR_LINE in res.stdout.replace('\\"', '"')
        assert stop(daemon) == 0
    finally:
        stop(daemon)
        stop(llm)
