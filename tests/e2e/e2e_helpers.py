"""Subprocess helpers for end-to-end tests: the real ``ongridd serve``,
``ongrid fake-llm`` and ``ongrid`` CLI, as a user runs them."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("ONGRID_")}
    out["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "plugins"), out.get("PYTHONPATH", "")])
    out.update(extra)
    return out


def ongrid(*args: str) -> list[str]:
    return [sys.executable, "-c", "from ongridd.cli import ongrid_main; ongrid_main()", *args]


def ongridd(*args: str) -> list[str]:
    return [sys.executable, "-c", "from ongridd.cli import ongridd_main; ongridd_main()", *args]


def start_fake_llm(tmp: Path, script: dict[str, Any], **extra_env: str) -> tuple[subprocess.Popen, str]:
    """Start ``ongrid fake-llm`` on a free port; returns (process, base URL)."""
    path = tmp / "script.json"  # JSON is YAML 1.2
    path.write_text(json.dumps(script))
    proc = subprocess.Popen(ongrid("fake-llm", "--script", str(path), "--listen", "127.0.0.1:0"),
                            env=env(**extra_env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line.startswith("http://127.0.0.1:"), proc.stderr.read()
    return proc, line


def start_daemon(tmp: Path, llm_url: str, **extra_env: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(ongridd("serve", "--state-dir", str(tmp / "state"), "--listen", f"127.0.0.1:{port}"),
                            cwd=tmp, env=env(ONGRID_LLM_BASE_URL=llm_url, ONGRID_LLM_MODEL="scripted",
                                             **extra_env),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(proc, url)
    return proc, url


def wait_healthy(proc: subprocess.Popen, url: str, timeout_s: float = 60.0) -> None:
    import httpx2

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = proc.stderr.read()[-3000:] if proc.stderr else "(its stderr went to a file)"
            raise AssertionError(f"daemon exited {proc.returncode}: {tail}")
        try:
            # /readyz: fully up (bridges, registries); /healthz answers earlier, during start-up
            if httpx2.get(url + "/readyz", timeout=1.0).status_code == 200:
                return
        except httpx2.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("daemon did not become healthy")


def stop(proc: subprocess.Popen, timeout_s: float = 10.0) -> int:
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    return proc.returncode


def rows(db: Path, sql: str) -> list[dict]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(sql)]
    finally:
        con.close()


def assert_rows_closed(db: Path) -> None:
    bad = rows(db, "select id, status from chat_sessions where parent_session_id is not null and "
                   "(closed_at is null or status in ('pending','running'))")
    assert not bad, bad
