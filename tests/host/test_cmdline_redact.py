"""Secret-looking values in other processes' command lines never reach the model: the redactor,
and host_bash / get_host_processes on a real process that carries them."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from ongrid_host.cmdline_redact import redact_command_lines
from ongrid_host.local import redact_cmdline


@pytest.mark.parametrize(("line", "shown"), [
    ("app --token sk-live-1 --port 80", "app --token *** --port 80"),
    ("app --password=hunter2 -v", "app --password=*** -v"),
    ("app --api-key AKIA1 --access_key=AKIA2 --secret s", "app --api-key *** --access_key=*** --secret ***"),
    ("env DB_PASSWORD=hunter2 TOKEN:abc app", "env DB_PASSWORD=*** TOKEN:*** app"),
    ("psql postgres://ops:hunter2@db:5432/x", "psql postgres://ops:***@db:5432/x"),
    ("curl -H Authorization: Bearer tok123 https://x", "curl -H Authorization: Bearer *** https://x"),
    ("/usr/bin/mysql -uroot -phunter2 db", "/usr/bin/mysql -uroot -p*** db"),
    ("pgrep -p 12 nginx", "pgrep -p 12 nginx"),  # not a MySQL client: -p is not a password
    ("nginx: worker process", "nginx: worker process"),
    ("app --token --verbose", "app --token --verbose"),  # no value follows
    ("https://example.org/a:b@c", "https://example.org/a:b@c"),  # no user information
])
def test_secret_looking_values_are_hidden(line, shown):
    assert redact_command_lines(line) == shown


def test_a_listing_keeps_its_layout():
    table = "  PID CMD\n    1 /sbin/init\n  42 app --token   sk-1\n"
    assert redact_command_lines(table) == "  PID CMD\n    1 /sbin/init\n  42 app --token   ***\n"
    assert redact_cmdline(["x", "--token", "sk-live-SECRET123", "-pHunter2", "--api-key", "AKIA123"]) == (
        "x --token *** -pHunter2 --api-key ***")


@pytest.fixture
def process_with_a_token():
    marker = f"ongrid-redact-{uuid.uuid4().hex[:8]}"
    # 64 MiB written: among the largest processes here, so a listing by memory shows it
    code = "import time; b = b'x' * (64 << 20); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code, marker, "--token", "sk-live-SECRET123",
                             "mysql-password=hunter2"])
    try:
        yield marker, proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("cmd", ["pgrep -af {m}", "ps -o pid,args -p {pid}", "ps uww {pid}", "ps -fp {pid}"])
async def test_host_bash_hides_them_in_process_listings(call, process_with_a_token, cmd):
    marker, pid = process_with_a_token
    out = await call("host_bash", {"cmd": cmd.format(m=marker, pid=pid)})
    assert out["class"] == "read" and out["exit_code"] == 0, out
    line = next(row for row in out["stdout"].splitlines() if marker in row)
    assert "--token *** mysql-password=***" in line, line
    assert "SECRET123" not in out["stdout"] and "hunter2" not in out["stdout"]
    assert "***" in out["redacted"]


async def test_get_host_processes_hides_them(call, process_with_a_token):
    marker, _ = process_with_a_token
    out = await call("get_host_processes", {"top_n": 100, "sort_by": "rss"})
    rows = [p for p in out["processes"] if marker in p["cmdline"]]
    assert rows and "--token *** mysql-password=***" in rows[0]["cmdline"], rows
