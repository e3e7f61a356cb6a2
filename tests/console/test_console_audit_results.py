"""The session view's audit table in a real browser: a command that exited non-zero (an answer,
audited ok) says so beside its status, and a tool's JSON result reads one field a line, a
command's output as the lines it printed."""

from __future__ import annotations

import pytest

from tests.conftest import need
from tests.console.console_helpers import browser, copy_out, daemon, have_browser, save_artifacts, send_text, signed_in_page

pytestmark = pytest.mark.slow

ALICE = "alice-token-0123456789abcdef"

SCRIPT = {
    "default": [
        {"tool_calls": [{"name": "AgentTool", "arguments": {
            "description": "look at the log folder", "subagent_type": "specialist-compute",
            "prompt": "List ${LOG_DIR} and a folder that is not there."}}]},
        {"content": "The worker listed the folder."},
    ],
    "specialist-compute": [
        {"tool_calls": [{"name": "host_bash", "arguments": {"cmd": "ls -1 ${LOG_DIR}"}},
                        {"name": "host_bash", "arguments": {"cmd": "ls ${LOG_DIR}/not-there"}}]},
        {"content": "listed"},
    ],
}


def test_a_non_zero_exit_shows_beside_its_status_and_output_reads_as_lines(tmp_path):
    need(have_browser(), "Debian's chromium (/usr/bin/chromium) and the playwright package")
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("app.log", "db.log"):
        (logs / name).write_text("x\n")
    with daemon(tmp_path, SCRIPT, tokens=f"alice:{ALICE}", LOG_DIR=str(logs)) as d, browser() as b:
        # signed in and attached first: the badge is "online" (daemon up) before the sign-in too, and a
        # message sent then was lost under load
        page, watch = signed_in_page(b, d["url"], "audit-room", ALICE)
        send_text(page, "what is in the log folder?")
        page.locator(".msg.final").first.wait_for(timeout=60_000)
        tile = page.locator(".turn").last.locator(".tile").first
        tile.locator("a", has_text="audit").click()
        page.locator("#view-session:not([hidden])").wait_for()
        rows = page.locator("#audit tbody tr[data-tool='host_bash']")
        rows.nth(1).wait_for()
        texts = [rows.nth(i).inner_text() for i in range(rows.count())]
        failed = next(i for i, t in enumerate(texts) if "not-there" in t)
        listed = 1 - failed
        status = rows.nth(failed).locator("td[data-label='status']")
        assert status.inner_text() == "ok · exit 2" and status.locator(".exit-nonzero").count() == 1
        assert rows.nth(listed).locator("td[data-label='status']").inner_text() == "ok"  # exit 0: nothing added
        shown = rows.nth(listed).locator("td[data-label='result'] pre").last.text_content()
        assert "stdout:\n  app.log\n  db.log\n" in shown and "\\n" not in shown, shown
        copy_out(save_artifacts(tmp_path, "audit-exit-1280", page))
        assert not watch.errors and not watch.csp_violations(), (watch.errors, watch.console)
