"""The console reading a thread again while frames and requests race it, in a real browser (Debian's
chromium via Playwright) against a real ``ongridd serve``; the page's requests are slowed in the
browser (``page.route``), as a slow network would: a message sent while the log is read again shows
once, a read that hangs does not hold the frames of the next attach, and a thread list read before a
turn ended does not mark the page running after it."""

from __future__ import annotations

import pytest

from tests.conftest import need
from tests.console.console_helpers import browser, daemon, have_browser, send_text, signed_in_page

pytestmark = pytest.mark.slow

TOKEN = "dave-token-0123456789abcdef"
NEED = ("Debian's chromium (/usr/bin/chromium) and the playwright package")


def signed_in(b, url: str, thread: str):
    """A page of the console on ``thread``, signed in with TOKEN and attached; ``(page, watch)``."""
    return signed_in_page(b, url, thread, TOKEN)


send = send_text


def slow_transcript_reads(page, delay_ms: int, *, times: int = 1_000) -> None:
    """The page's next ``times`` reads of a transcript reach the daemon ``delay_ms`` late."""
    left = [times]

    def handler(route) -> None:
        if left[0] > 0:
            left[0] -= 1
            page.wait_for_timeout(delay_ms)
        route.continue_()
    page.route("**/api/sessions/*/messages*", handler)


def test_a_message_sent_while_the_log_is_read_again_shows_once(tmp_path):
    need(have_browser(), NEED)
    script = {"default": [{"delay_s": 3, "content": "Answer one."}, {"delay_s": 1, "content": "Answer to M."}]}
    with daemon(tmp_path, script, tokens=f"dave:{TOKEN}") as d, browser() as b:
        page, watch = signed_in(b, d["url"], "race-room")
        send(page, "T1")
        page.wait_for_timeout(500)
        page.reload()  # attached to a turn it did not start: its end reads the log again
        page.locator("#conn.online").wait_for()
        slow_transcript_reads(page, 1500)
        page.wait_for_function("() => state.refreshing", timeout=15_000, polling=10)
        send(page, "M sent while the log is read")  # the daemon would store it before the slowed read
        page.locator(".msg.final", has_text="Answer to M.").wait_for(timeout=15_000)
        page.wait_for_timeout(1000)
        assert page.locator(".msg.user", has_text="M sent while the log is read").count() == 1
        assert page.locator(".msg.user", has_text="T1").count() == 1
        assert page.locator("#text").input_value() == ""
        page.unroute("**/api/sessions/*/messages*")
        fresh, _ = signed_in(b, d["url"], "race-room")
        fresh.locator(".msg.final", has_text="Answer to M.").wait_for(timeout=15_000)
        shown = lambda p: p.locator(".msg").evaluate_all("els => els.map(e => e.textContent.trim())")
        assert shown(page) == shown(fresh)
        assert watch.errors == []


def test_a_read_that_hangs_does_not_hold_the_next_attach(tmp_path):
    need(have_browser(), NEED)
    script = {"default": [{"delay_s": 2, "content": "Answer one."}, {"content": "Answer two."}]}
    with daemon(tmp_path, script, tokens=f"dave:{TOKEN}") as d, browser() as b:
        page, watch = signed_in(b, d["url"], "hang-room")
        send(page, "T1")
        page.wait_for_timeout(500)
        page.reload()
        page.locator("#conn.online").wait_for()
        slow_transcript_reads(page, 12_000, times=1)  # the refresh at the turn's end hangs
        page.wait_for_function("() => state.refreshing", timeout=15_000, polling=10)
        # the socket drops: the page attaches again, its conversation on screen (dimmed) until the stored
        # one, read aside, takes its place — never blank
        page.evaluate("""() => { window.blanked = 0; const log = document.getElementById("log");
          new MutationObserver(() => { if (!log.querySelector(".msg.user")) window.blanked += 1; })
            .observe(log, {childList: true, subtree: true}); state.ws.close(); }""")
        page.wait_for_function("() => !state.buffering && state.ws && state.ws.readyState === 1", timeout=10_000)
        page.locator("#conn.online").wait_for(timeout=10_000)
        send(page, "T2")
        # answered at once: shown live, not when the hung read gives up
        page.locator(".msg.final", has_text="Answer two.").wait_for(timeout=5_000)
        assert page.locator("#stopturn").is_disabled()
        assert page.evaluate("window.blanked") == 0
        assert watch.errors == []


def test_a_thread_list_read_before_the_turn_ended_does_not_mark_it_running(tmp_path):
    need(have_browser(), NEED)
    with daemon(tmp_path, {"default": [{"delay_s": 0.8, "content": "Answer one."}]},
                tokens=f"dave:{TOKEN}") as d, browser() as b:
        page, watch = signed_in(b, d["url"], "list-room")

        def late(route) -> None:  # asked while the turn runs, answered ("running") after it ended
            answer = route.fetch()
            page.wait_for_timeout(800)
            route.fulfill(response=answer)
        page.route("**/api/sessions?limit=50", late)
        send(page, "T1")
        page.locator(".msg.final", has_text="Answer one.").wait_for(timeout=15_000)
        page.wait_for_timeout(2000)
        assert page.locator("#stopturn").is_disabled()
        assert page.evaluate("state.running") is False
        assert watch.errors == []
