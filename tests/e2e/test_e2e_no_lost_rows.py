"""No lost rows under load: a real ``ongridd serve`` and ``ongrid fake-llm``,
many websocket sessions connected first, then one turn each; afterwards
every row is counted against what was sent — exactly, per kind.

Each turn: the coordinator dispatches one worker (AgentTool), the worker
makes three tool calls in one step and answers, the coordinator answers.
Expected per session: coordinator messages user 1, assistant 2, tool 1;
one worker row, closed ``completed``; worker messages 6; audit rows 4.

The daemon runs with a small connection pool (default 2) so writes queue
for database slots the way they do with many more sessions on a bigger
pool.  Knobs (environment):

* ``ONGRID_LOAD_SESSIONS`` — sessions (default 700, about a minute on two
  cores; 1000 for the full run),
* ``ONGRID_LOAD_RATE`` — turns started per second, spread evenly
  (default 0: all at once, the burst shape),
* ``ONGRID_LOAD_POOL_SIZE`` — the daemon's ``database.pool_size`` (default 2),
* ``ONGRID_LOAD_POSTGRES=1`` — run on PostgreSQL (a fresh schema in the
  test database of ``ONGRID_TEST_PG_URL``) instead of SQLite.

It prints ``sessions, expected vs stored rows, wall time``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import sqlalchemy as sa
import trio

from tests.e2e.e2e_helpers import env, free_port, ongrid, ongridd, stop, wait_healthy
from tests.e2e.load_shape import concurrent_turns

pytestmark = [pytest.mark.slow, pytest.mark.exclusive, pytest.mark.timeout(1200)]

SESSIONS = int(os.environ.get("ONGRID_LOAD_SESSIONS", "700"))
RATE = float(os.environ.get("ONGRID_LOAD_RATE", "0"))
POOL_SIZE = int(os.environ.get("ONGRID_LOAD_POOL_SIZE", "2"))
PG = os.environ.get("ONGRID_LOAD_POSTGRES", "") == "1"

WORKER = """---
name: load-worker
description: Load-test worker that looks things up.
when_to_use: The row-count load test only.
tools: [query_knowledge, query_devices]
max_turns: 4
---
You look things up and answer in one line.
"""

SCRIPT = {
    "default": [
        {"tool_calls": [{"name": "AgentTool", "arguments": {
            "description": "load test lookup", "subagent_type": "load-worker",
            "prompt": "Look up the disk runbook and the devices, then answer in one line."}}]},
        {"content": "load turn done"},
    ],
    "load-worker": [
        {"tool_calls": [{"name": "query_knowledge", "arguments": {"query": "disk full"}},
                        {"name": "query_devices", "arguments": {}},
                        {"name": "query_knowledge", "arguments": {"query": "nginx 502"}}]},
        {"content": "worker answer"},
    ],
}

#: what one turn must leave in the database
PER_TURN = {"coordinator user": 1, "coordinator assistant": 2, "coordinator tool": 1, "worker sessions": 1,
            "worker sessions closed completed": 1, "worker messages": 6, "audit rows": 4}


def count_rows(url: str) -> dict[str, int]:
    """The stored rows of the load threads, by kind (``url``: SQLAlchemy URL of the daemon's database)."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as con:
            one = lambda sql: con.execute(sa.text(sql)).scalar_one()  # noqa: E731
            coord = "SELECT id FROM chat_sessions WHERE parent_session_id IS NULL AND thread_id LIKE 'load-%'"
            out = {f"coordinator {role}": one(f"SELECT count(*) FROM chat_messages WHERE role = '{role}' "
                                              f"AND session_id IN ({coord})")
                   for role in ("user", "assistant", "tool")}
            out["worker sessions"] = one(f"SELECT count(*) FROM chat_sessions WHERE parent_session_id IN ({coord})")
            out["worker sessions closed completed"] = one(
                f"SELECT count(*) FROM chat_sessions WHERE parent_session_id IN ({coord}) "
                "AND status = 'completed' AND closed_at IS NOT NULL")
            out["worker messages"] = one(f"SELECT count(*) FROM chat_messages WHERE session_id IN "
                                         f"(SELECT id FROM chat_sessions WHERE parent_session_id IN ({coord}))")
            out["audit rows"] = one("SELECT count(*) FROM audit_logs")
            out["open worker rows"] = one(
                "SELECT count(*) FROM chat_sessions WHERE parent_session_id IS NOT NULL "
                "AND (closed_at IS NULL OR status IN ('pending', 'running'))")
            out["sessions with seq gaps"] = len(con.execute(sa.text(
                "SELECT session_id FROM chat_messages GROUP BY session_id "
                "HAVING max(seq) != count(*) OR min(seq) != 1")).all())
            return out
    finally:
        engine.dispose()


@contextlib.contextmanager
def database(tmp_path: Path) -> Iterator[tuple[dict[str, str], str]]:
    """``(daemon environment, URL to count with)``: SQLite in the state dir,
    or with ``ONGRID_LOAD_POSTGRES=1`` a fresh PostgreSQL schema (dropped after)."""
    if not PG:
        yield {}, f"sqlite:///{tmp_path / 'state' / 'ongrid.db'}"
        return
    from tests.store.conftest import fresh_pg_schema

    with fresh_pg_schema("ongrid_load") as url:
        yield {"ONGRID_DATABASE_URL": url}, url


def metric(url: str, name: str) -> float:
    """The value of an unlabelled metric on ``/metrics``."""
    import httpx2

    for line in httpx2.get(url, timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name} at {url}")


def start_fake_llm(tmp: Path) -> tuple[subprocess.Popen, str]:
    """``ongrid fake-llm`` with its log in a file: it logs every call, and a
    pipe nobody reads would stall it once the pipe buffer is full."""
    path = tmp / "script.json"  # JSON is YAML 1.2
    path.write_text(json.dumps(SCRIPT))
    proc = subprocess.Popen(ongrid("fake-llm", "--script", str(path), "--listen", "127.0.0.1:0"), env=env(),
                            stdout=subprocess.PIPE, stderr=open(tmp / "fake-llm.log", "w"), text=True)
    line = proc.stdout.readline().strip()
    assert line.startswith("http://127.0.0.1:"), (tmp / "fake-llm.log").read_text()
    return proc, line


def test_every_row_of_a_concurrent_load_is_stored(tmp_path):
    n = SESSIONS
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "load-worker.md").write_text(WORKER)
    config = tmp_path / "ongrid.yaml"
    config.write_text(json.dumps({
        "database": {"pool_size": POOL_SIZE},
        "agents": {"user_dirs": [str(agents)]},
        "llm": {"max_retries": 0, "timeout_s": 600},
        # every session is user "local" (no tokens): let them all run at once, as the load is meant
        # to count rows under full concurrency (the queue has its own tests)
        "limits": {"worker_timeout_s": 900, "max_concurrent_turns": 2 * n, "max_turns_per_user": 2 * n},
    }))
    with database(tmp_path) as (db_env, db_url):
        run_load(tmp_path, config, db_env, db_url, n)


def run_load(tmp_path: Path, config: Path, db_env: dict[str, str], db_url: str, n: int) -> None:
    fake, llm_url = start_fake_llm(tmp_path)
    port = free_port()
    daemon = subprocess.Popen(
        ongridd("serve", "--config", str(config), "--state-dir", str(tmp_path / "state"),
                "--listen", f"127.0.0.1:{port}"),
        cwd=tmp_path, env=env(ONGRID_LLM_BASE_URL=llm_url, ONGRID_LLM_MODEL="scripted", **db_env),
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "daemon.log", "w"), text=True)
    try:
        wait_healthy(daemon, f"http://127.0.0.1:{port}")
        wall = time.monotonic()
        turns, took = trio.run(partial(concurrent_turns, f"ws://127.0.0.1:{port}/ws", n, RATE, prefix="load-",
                                       connect_timeout_s=300, turns_timeout_s=900))
        ends = {i: turn.frame for i, turn in turns.items()}  # each session's last frame
        transactions = metric(f"http://127.0.0.1:{port}/metrics", "ongrid_store_write_transactions_total")
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=120) == 0
        wall = time.monotonic() - wall
    finally:
        stop(daemon)
        stop(fake)
    log = (tmp_path / "daemon.log").read_text()
    stored = count_rows(db_url)
    expected = {k: v * n for k, v in PER_TURN.items()} | {"open worker rows": 0, "sessions with seq gaps": 0}
    kinds = sorted({(f["type"], f.get("code") or f.get("text")) for f in ends.values()})
    print(f"\nload: {n} sessions on {'PostgreSQL' if PG else 'SQLite'}, pool_size {POOL_SIZE}, "
          f"rate {RATE or 'burst'}; turns took {took:.1f} s, wall (turns + graceful stop) {wall:.1f} s; "
          f"end frames {kinds}; "
          f"{transactions:.0f} store writer transactions ({transactions / n:.2f} per turn)")
    for key in expected:
        print(f"  {key:34} expected {expected[key]:6}  stored {stored[key]:6}")
    failures = [line for line in log.splitlines() if '"store_write_failed"' in line]
    assert not failures, failures[:5]
    # a turn the model failed writes fewer rows by design: that is not a lost row, so say it apart
    assert len(ends) == n and kinds == [("final", "load turn done")], f"turns that did not end in the answer: {kinds}"
    assert stored == expected
