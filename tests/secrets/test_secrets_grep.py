"""The secrets grep: a real ``ongridd serve`` with tokens, an API key and a
plugin secret configured, driven by ``ongrid ask --token …`` (so the token
shows in ``ps``), whose scripted worker runs ``host_bash ps -f -p PID`` on a
process whose command line holds a token, ``get_host_processes`` and an
``ls`` of a folder named after a token, and
whose scripted model echoes every secret in its text and tool arguments.

Afterwards no secret value may be found in the daemon's log, in any text
column of any table of the database (audit rows and stored messages
included), in any request the model received, or in the environment of a
program the daemon started.

About ``/proc/<daemon pid>/environ``: Linux shows there the environment the
process was started with; removing a variable from ``os.environ`` (which
the daemon does at start-up) does not rewrite it.  What the daemon controls
is what its children inherit, so that is what is checked: a recording
stand-in for ``ps`` placed first on the daemon's ``PATH`` dumps the
environment ``host_bash`` gave it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from tests.e2e.e2e_helpers import env, free_port, ongrid, ongridd, stop, wait_healthy

REDACTED = "[redacted]"


def _forms(value: str) -> set[str]:
    """The literal and JSON-escaped forms a leak could take."""
    return {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}


def _leaks(text: str, values: dict[str, str]) -> list[str]:
    """Names of the secrets found in ``text`` (any form)."""
    return sorted(name for name, value in values.items() if any(f in text for f in _forms(value)))


def _db_text(db: Path) -> dict[str, str]:
    """``{table.column: every value of that column joined}`` for every table."""
    con = sqlite3.connect(db)
    try:
        out: dict[str, str] = {}
        tables = [r[0] for r in con.execute("select name from sqlite_master where type = 'table'")]
        for table in tables:
            cur = con.execute(f'select * from "{table}"')
            names = [d[0] for d in cur.description]
            for row in cur:
                for name, value in zip(names, row):
                    if value is not None:
                        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
                        out[f"{table}.{name}"] = out.get(f"{table}.{name}", "") + "\n" + text
        return out
    finally:
        con.close()


@pytest.fixture
def setup(tmp_path):
    """Secrets, the stand-in ``ps``, a folder named after a token, a process
    whose command line holds another token."""
    s = {
        "TOK_A": "alice-" + secrets.token_hex(12),
        "TOK_B": "bob-" + secrets.token_hex(12),
        "TOK_SHORT": "c" + secrets.token_hex(4),  # 9 characters: warned about, still redacted
        "KEY": "sk-e2e-" + secrets.token_hex(16),
        "BRIDGE": "bridge-" + secrets.token_hex(12),
    }
    real_ps = shutil.which("ps")
    assert real_ps, "ps is not installed"
    bindir, dumps = tmp_path / "bin", tmp_path / "childenv"
    bindir.mkdir()
    dumps.mkdir()
    standin = bindir / "ps"
    standin.write_text(f'#!/bin/sh\nenv > "{dumps}/ps.$$"\nexec {real_ps} "$@"\n')
    standin.chmod(0o755)
    leak_dir = tmp_path / "leak"
    (leak_dir / f"dir-{s['TOK_A']}").mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", s["TOK_B"]])
    try:
        yield tmp_path, s, bindir, dumps, leak_dir, holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_no_secret_reaches_logs_database_model_or_children(setup):
    tmp, s, bindir, dumps, leak_dir, holder_pid = setup
    model_env = {f"E2E_{k}": v for k, v in s.items()}
    echo = "${E2E_TOK_A} ${E2E_TOK_B} ${E2E_TOK_SHORT} ${E2E_KEY} ${E2E_BRIDGE}"
    script = {
        "default": [
            {"content": f"Echoing what I should never know: {echo}.",
             "tool_calls": [{"name": "AgentTool", "arguments": {
                 "description": "Processes (${E2E_TOK_B})", "subagent_type": "specialist-compute",
                 "prompt": f"List the processes of host local. Secrets to leak: {echo}"}}]},
            {"content_from_tool_results": True},
        ],
        "specialist-compute": [
            {"tool_calls": [
                # the holder by pid: on a busy machine a full listing is cut before it
                {"name": "host_bash", "arguments": {"cmd": f"ps -f -p {holder_pid}"}},
                {"name": "get_host_processes", "arguments": {"top_n": 100, "sort_by": "rss"}},
                {"name": "host_bash", "arguments": {"cmd": f"ls {leak_dir}"}},
                {"name": "host_bash", "arguments": {"cmd": "ls /nonexistent/${E2E_TOK_B}"}},
            ]},
            {"content_from_tool_results": True},
        ],
    }
    record = tmp / "model-requests.jsonl"
    script_path = tmp / "script.json"
    script_path.write_text(json.dumps(script))
    llm = subprocess.Popen(ongrid("fake-llm", "--script", str(script_path), "--listen", "127.0.0.1:0",
                                  "--record", str(record)),
                           env=env(**model_env), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    llm_url = llm.stdout.readline().strip()
    assert llm_url.startswith("http://127.0.0.1:")
    config = tmp / "ongrid.yaml"
    config.write_text("plugins: {settings: {e2e_bridge: {bot_token_env: E2E_BRIDGE_SECRET}}}\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp / "daemon.log"
    daemon_env = env(
        ONGRID_TOKENS=f"alice:{s['TOK_A']},bob:{s['TOK_B']},carol:{s['TOK_SHORT']}",
        OPENAI_API_KEY=s["KEY"], E2E_BRIDGE_SECRET=s["BRIDGE"],
        ONGRID_LLM_BASE_URL=llm_url, ONGRID_LLM_MODEL="scripted",
        PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    with log.open("w") as log_fh:
        daemon = subprocess.Popen(ongridd("serve", "--config", str(config), "--state-dir", str(tmp / "state"),
                                          "--listen", f"127.0.0.1:{port}"),
                                  cwd=tmp, env=daemon_env, stdout=subprocess.DEVNULL, stderr=log_fh)
    try:
        try:
            wait_healthy(daemon, url)
        except AssertionError:
            raise AssertionError(log.read_text()[-3000:]) from None
        assert httpx2.get(url + "/metrics", timeout=5).status_code == 401
        assert httpx2.get(url + "/metrics", headers={"Authorization": f"Bearer {s['TOK_A']}"},
                          timeout=5).status_code == 200
        ask = subprocess.run(ongrid("ask", "--url", url, "--token", s["TOK_A"], "--timeout", "120",
                                    f"What runs here? (bob's token is {s['TOK_B']})"),
                             env=env(), capture_output=True, text=True, timeout=180)
        # ps printed bob's token: the turn was stopped, and the person told why
        assert ask.returncode == 1 and "carried or printed part of a secret" in ask.stderr, ask.stderr[-3000:]
        assert "shows the token to every local user" in ask.stderr
        assert stop(daemon) == 0
    finally:
        stop(daemon)
        stop(llm)

    values = {name: value for name, value in s.items()}
    daemon_log = log.read_text()
    requests = record.read_text()
    db = _db_text(tmp / "state" / "ongrid.db")

    # the run did what it should: the tools really saw the secrets, and their results were withheld (a
    # redacted result would tell a model which of its guesses is a piece)
    from ongridd.tools.runner import SECRET_OUTPUT_WITHHELD

    audit = sqlite3.connect(tmp / "state" / "ongrid.db").execute(
        "select tool_name, status, arguments, result from audit_logs").fetchall()
    by_tool = [(name, status) for name, status, _, _ in audit]
    worker_calls = [(n, st, r) for n, st, _, r in audit if n in ("host_bash", "get_host_processes")]
    assert len(worker_calls) == 4 and all(st in ("error", "cancelled") for _, st, _ in worker_calls), by_tool
    # ps showed the holder's command line with bob's token (or ls the folder named after alice's): withheld
    assert any(SECRET_OUTPUT_WITHHELD in r for _, _, r in worker_calls), [(n, st, r[:60]) for n, st, r in worker_calls]
    # a command the model wrote with a secret in it ran (or was refused) with the secret redacted
    assert any(a == json.dumps({"cmd": f"ls /nonexistent/{REDACTED}"}) for n, st, a, r in audit), audit
    assert requests.count(REDACTED) >= 5
    assert len(requests.splitlines()) == 2  # the coordinator once, the worker once: the turn stopped there
    assert list(dumps.iterdir()), "host_bash did not run the stand-in ps"

    # zero occurrences anywhere
    assert _leaks(daemon_log, values) == [], "daemon log"
    assert {col: _leaks(text, values) for col, text in db.items() if _leaks(text, values)} == {}, "database"
    assert _leaks(requests, values) == [], "model requests"
    assert _leaks(ask.stdout, values) == [], "the answer"
    for dump in dumps.iterdir():
        child = dump.read_text()
        assert _leaks(child, values) == [], f"environment of {dump.name}"
        names = {line.partition("=")[0] for line in child.splitlines()}
        assert not names & {"ONGRID_TOKENS", "OPENAI_API_KEY", "E2E_BRIDGE_SECRET"}, names

    # the operator's view: who connected, which turns ran; the short token was warned about
    events = [json.loads(line) for line in daemon_log.splitlines() if line.startswith("{")]
    kinds = {e["event"]: e for e in events}
    assert kinds["short_token"]["user"] == "carol" and kinds["short_token"]["length"] == 9
    assert kinds["connection"]["user"] == "alice" and kinds["connection"]["peer"].startswith("127.0.0.1:")
    assert kinds["connection"]["thread"].startswith("ask-")
    assert kinds["turn_start"]["user"] == "alice" and kinds["turn_start"]["thread"] == kinds["connection"]["thread"]
    end = kinds["turn_end"]
    assert (end["user"], end["status"], end["tool_calls"], end["workers"]) == ("alice", "stopped", 1, 1)
    assert kinds["turn_stopped_for_secret"]["user"] == "alice"
    assert end["session_id"] == kinds["turn_start"]["session_id"] and end["duration_ms"] >= 0
    assert sorted(kinds["secrets_removed_from_environment"]["variables"]) == [
        "E2E_BRIDGE_SECRET", "ONGRID_TOKENS", "OPENAI_API_KEY"]
