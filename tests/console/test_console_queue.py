"""The web console shows a queued turn and a refused (busy) one, in a real
browser (Debian's chromium via Playwright) against a real daemon whose turn
limits are one at a time with a queue of one.  docs/console.md."""

from __future__ import annotations

import time

import httpx2
import pytest

from tests.conftest import need
from tests.console.console_helpers import PageWatch, browser, daemon, have_browser, open_thread_signed_in, send_text

ALICE = "alice-console-token-0123456789"


@pytest.fixture(scope="module")
def queued_console(tmp_path_factory):
    need(have_browser(), "Debian's chromium (/usr/bin/chromium) and the playwright package")
    tmp = tmp_path_factory.mktemp("console-queue")
    limits = {"limits": {"max_concurrent_turns": 1, "max_turns_per_user": 1, "max_queued_turns": 1}}
    script = {"default": [{"delay_s": 4, "content": "the **slow** answer"}]}
    with daemon(tmp, script, tokens=f"alice:{ALICE}", more_config=limits) as d, browser() as b:
        d["browser"] = b
        yield d


def open_thread(ctx, url: str, thread: str):
    page = ctx.new_page()
    watch = PageWatch(page)
    open_thread_signed_in(page, url, thread, ALICE)
    return page, watch


def wait_running(url: str, thread: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        threads = httpx2.get(f"{url}/api/sessions", headers={"Authorization": f"Bearer {ALICE}"}).json()
        if any(t["thread"] == thread and t["running"] for t in threads):
            return
        time.sleep(0.05)
    raise AssertionError(f"thread {thread} never ran")


send = send_text


def test_queued_turn_shows_its_position_and_a_full_queue_says_busy(queued_console):
    url = queued_console["url"]
    ctx = queued_console["browser"].new_context(viewport={"width": 1200, "height": 800})
    p1, w1 = open_thread(ctx, url, "q-one")
    p2, w2 = open_thread(ctx, url, "q-two")
    p3, w3 = open_thread(ctx, url, "q-three")
    send(p1, "first")
    p1.locator(".msg.user").filter(has_text="first").wait_for()
    wait_running(url, "q-one")  # the first turn holds the only slot
    send(p2, "second")
    queued = p2.locator(".turn").last.locator(".msg.queued")
    queued.wait_for(timeout=10_000)
    assert "position 1" in queued.inner_text()
    send(p3, "third")
    busy = p3.locator(".turn").last.locator(".msg.busy")
    busy.wait_for(timeout=10_000)
    assert "Not sent" in busy.inner_text() and "busy" in busy.inner_text()
    assert p3.locator("#banner").is_visible() and "Busy" in p3.locator("#banner-text").inner_text()
    assert p3.locator("#stopturn").is_disabled()  # nothing runs for the refused message
    # the queued turn starts when the first ends: its status line goes, the answer comes
    p1.locator(".msg.final").wait_for(timeout=30_000)
    p2.locator(".msg.final").wait_for(timeout=30_000)
    assert p2.locator(".msg.queued").count() == 0
    assert p2.locator(".msg.final strong").inner_text() == "slow"
    p3.wait_for_timeout(1000)
    assert p3.locator(".msg.final").count() == 0  # the refused message is never answered
    for w in (w1, w2, w3):
        assert w.errors == [] and w.csp_violations() == []
    ctx.close()


def test_a_queued_turn_stopped_before_it_ran_says_it_was_not_sent(queued_console):
    # it waited for a slot and never ran: nothing was stored, and the page says so (it looked sent)
    url = queued_console["url"]
    ctx = queued_console["browser"].new_context(viewport={"width": 1200, "height": 800})
    p1, _ = open_thread(ctx, url, "s-one")
    p2, w2 = open_thread(ctx, url, "s-two")
    send(p1, "holds the slot")
    wait_running(url, "s-one")
    send(p2, "queued one")
    p2.locator(".turn").last.locator(".msg.queued").wait_for(timeout=10_000)
    p2.locator("#stopturn").click()
    note = p2.locator(".turn").last.locator(".msg.noanswer")
    note.wait_for(timeout=10_000)
    assert "Not sent" in note.inner_text() and "Nothing was stored" in note.inner_text()
    assert p2.locator(".msg.queued").count() == 0 and p2.locator("#banner").is_hidden()
    p1.locator(".msg.final").wait_for(timeout=30_000)
    assert w2.errors == []
    ctx.close()
