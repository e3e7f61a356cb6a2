"""The console reading a thread again while frames and requests race it, in a real browser (Debian's
chromium via Playwright) against a real ``ongridd serve``; the page's requests are slowed in the
browser (``page.route``), as a slow network would: a message sent while the log is read again shows
once, a read that hangs does not hold the frames of the next attach, and a thread list read before a
turn ended does not mark the page running after it."""

from __future__ import annotations

import contextlib

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


@contextlib.contextmanager
def room(tmp_path, script: dict, thread: str):
    """A daemon answering with ``script`` (user dave, TOKEN), a browser, and a console page signed in
    on ``thread``: ``(daemon, browser, page, watch)``; skipped without a browser."""
    need(have_browser(), NEED)
    with daemon(tmp_path, script, tokens=f"dave:{TOKEN}") as d, browser() as b:
        page, watch = signed_in(b, d["url"], thread)
        yield d, b, page, watch


def slow_transcript_reads(page, delay_ms: int, *, times: int = 1_000) -> None:
    """The page's next ``times`` reads of a transcript reach the daemon ``delay_ms`` late."""
    left = [times]

    def handler(route) -> None:
        if left[0] > 0:
            left[0] -= 1
            page.wait_for_timeout(delay_ms)
        route.continue_()
    page.route("**/api/sessions/*/messages*", handler)


def shown(page) -> list[str]:
    """The text of every message on ``page``, in order."""
    return page.locator(".msg").evaluate_all("els => els.map(e => e.textContent.trim())")


def reading_again_slowly(page, question: str, delay_ms: int, *, wait_ms: int = 500) -> None:
    """Send ``question``, reload ``wait_ms`` later while its turn runs (the page now watches a turn it
    did not start, so the turn's end reads the log again), slow the next transcript read by
    ``delay_ms``, and return once that read has begun."""
    send(page, question)
    page.wait_for_timeout(wait_ms)
    page.reload()
    page.locator("#conn.online").wait_for()
    slow_transcript_reads(page, delay_ms, times=1)
    page.wait_for_function("() => state.refreshing", timeout=15_000, polling=10)


def test_a_message_sent_while_the_log_is_read_again_shows_once(tmp_path):
    script = {"default": [{"delay_s": 3, "content": "Answer one."}, {"delay_s": 1, "content": "Answer to M."}]}
    with room(tmp_path, script, "race-room") as (d, b, page, watch):
        reading_again_slowly(page, "T1", 1500)
        send(page, "M sent while the log is read")  # the daemon would store it before the slowed read
        page.locator(".msg.final", has_text="Answer to M.").wait_for(timeout=15_000)
        page.wait_for_timeout(1000)
        assert page.locator(".msg.user", has_text="M sent while the log is read").count() == 1
        assert page.locator(".msg.user", has_text="T1").count() == 1
        assert page.locator("#text").input_value() == ""
        page.unroute("**/api/sessions/*/messages*")
        fresh, _ = signed_in(b, d["url"], "race-room")
        fresh.locator(".msg.final", has_text="Answer to M.").wait_for(timeout=15_000)
        assert shown(page) == shown(fresh)
        assert watch.errors == []


def test_a_read_that_hangs_does_not_hold_the_next_attach(tmp_path):
    script = {"default": [{"delay_s": 2, "content": "Answer one."}, {"content": "Answer two."}]}
    with room(tmp_path, script, "hang-room") as (d, b, page, watch):
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
    with room(tmp_path, {"default": [{"delay_s": 0.8, "content": "Answer one."}]}, "list-room") as (d, b, page, watch):

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


def test_a_message_sent_while_the_log_is_read_goes_as_it_was_and_comes_back_if_the_socket_drops(tmp_path):
    script = {"default": [{"delay_s": 2, "content": "Answer one."}, {"content": "Answer to the first."},
                          {"delay_s": 2, "content": "Answer three."}]}
    with room(tmp_path, script, "waiting-room") as (d, b, page, watch):
        reading_again_slowly(page, "T1", 1500)
        send(page, "the first, as it was")
        page.locator("#text").press("Enter")  # again: nothing more goes
        page.locator("#text").fill("typed after")  # typing on does not change what was sent
        page.locator(".msg.final", has_text="Answer to the first.").wait_for(timeout=15_000)
        assert page.locator(".msg.user", has_text="the first, as it was").count() == 1
        assert page.locator(".msg.user", has_text="typed after").count() == 0
        assert page.locator("#text").input_value() == "typed after"
        # sent while a read is pending and the socket drops: back in the box, said so
        page.locator("#text").fill("")
        reading_again_slowly(page, "T3", 3000, wait_ms=300)
        send(page, "lost in the drop?")
        page.evaluate("state.ws.close()")
        page.locator("#banner", has_text="Not sent").wait_for(timeout=5_000)
        assert page.locator("#text").input_value() == "lost in the drop?"
        assert watch.errors == []


def test_workers_of_one_persona_and_description_keep_their_own_tiles_after_a_reload(tmp_path):
    dispatch = lambda prompt: {"name": "AgentTool", "arguments": {  # noqa: E731
        "description": "Disk usage", "subagent_type": "specialist-disk", "prompt": prompt}}
    script = {"default": [{"content": "first", "tool_calls": [dispatch("look")]},
                          {"content": "second", "tool_calls": [dispatch("look again, other host")]},
                          {"content": "Both done."}],
              "specialist-disk": [{"delay_s": 2.5, "content": "report one"},
                                  {"delay_s": 2.5, "content": "report two"}]}
    with room(tmp_path, script, "twin-room") as (d, b, page, watch):
        send(page, "go")
        page.locator(".tile .status.completed").first.wait_for(timeout=15_000)
        page.wait_for_timeout(700)  # the second worker runs
        page.reload()
        page.locator("#conn.online").wait_for()
        page.wait_for_timeout(700)
        tiles = page.locator(".tile")
        assert tiles.count() == 2
        assert "report one" in tiles.nth(0).locator(".result-box").text_content()
        assert tiles.nth(0).locator(".status.completed").count() == 1
        assert tiles.nth(1).locator(".status.running").count() == 1
        page.locator(".msg.final", has_text="Both done.").wait_for(timeout=15_000)
        page.wait_for_timeout(1000)
        assert tiles.count() == 2
        assert watch.errors == []


def test_the_next_turn_shows_live_when_an_attach_ends_on_a_turn_that_ended(tmp_path):
    # frames waiting for an attach's read: a turn's final among them starts another read, and the next
    # turn's frames after it wait for that one — they are shown live, not lost in a log swapped out
    interim = lambda text: {"name": "SendMessage", "arguments": {"text": text}}  # noqa: E731
    script = {"default": [{"delay_s": 2, "content": "Answer one."},
                          {"content": "Looking.", "tool_calls": [interim("interim one")]},
                          {"delay_s": 3, "tool_calls": [interim("interim two, later")]},
                          {"delay_s": 4, "content": "Answer two."}]}
    with room(tmp_path, script, "relay-room") as (d, b, watcher, watch):
        sender, _ = signed_in(b, d["url"], "relay-room")
        send(sender, "T1")
        watcher.wait_for_timeout(500)
        slow_transcript_reads(watcher, 3500, times=1)
        watcher.reload()
        sender.locator(".msg.final", has_text="Answer one.").wait_for(timeout=15_000)
        send(sender, "T2")
        watcher.locator("#conn.online").wait_for(timeout=15_000)
        sender.locator(".msg.interim", has_text="interim two, later").wait_for(timeout=15_000)
        watcher.locator(".msg.interim", has_text="interim two, later").wait_for(timeout=2_000)
        assert watcher.evaluate("!state.turn || state.turn.el.isConnected")
        assert watch.errors == []


def test_a_re_attach_whose_read_fails_keeps_the_log_dimmed_then_reads_it_again(tmp_path):
    with room(tmp_path, {"default": [{"content": "Answer one."}]}, "retry-room") as (d, b, page, watch):
        send(page, "T1")
        page.locator(".msg.final", has_text="Answer one.").wait_for(timeout=15_000)
        failed = [2]  # the attach's read and its first retry fail: it is tried again, later

        def abort_twice(route) -> None:
            if failed[0]:
                failed[0] -= 1
                route.abort()
            else:
                route.continue_()
        page.route("**/api/sessions/*/messages*", abort_twice)
        page.evaluate("state.ws.close()")
        page.locator("#banner", has_text="Could not load the transcript").wait_for(timeout=10_000)
        assert page.locator("#log.stale .msg.final", has_text="Answer one.").count() == 1  # the last copy, dimmed
        page.wait_for_function("() => !document.getElementById('log').classList.contains('stale')", timeout=15_000)
        assert page.locator(".msg.final", has_text="Answer one.").count() == 1
        assert page.locator("#banner").is_hidden()  # the read that failed is not said any more
        assert page.locator(".msg.user", has_text="T1").count() == 1


def test_a_message_another_tab_sent_into_this_pages_turn_shows_when_it_ends(tmp_path):
    dispatch = {"name": "AgentTool", "arguments": {"description": "Measure", "subagent_type": "specialist-disk",
                                                   "prompt": "Measure"}}
    script = {"default": [{"content": "Dispatching.", "tool_calls": [dispatch]}, {"content": "Answer with M."},
                          {"content": "Answer three."}],
              "specialist-disk": [{"delay_s": 3, "content": "disk: fine"}]}
    with room(tmp_path, script, "joined-room") as (d, b, owner, watch):
        other, _ = signed_in(b, d["url"], "joined-room")
        send(owner, "QA")
        owner.wait_for_timeout(1000)
        send(other, "M from the other tab")  # joins the owner's turn
        owner.locator(".msg.user", has_text="M from the other tab").wait_for(timeout=20_000)
        owner.locator(".msg.final").first.wait_for(timeout=5_000)
        owner.wait_for_timeout(1000)
        fresh, _ = signed_in(b, d["url"], "joined-room")
        fresh.locator(".msg.final").first.wait_for(timeout=15_000)
        assert shown(owner) == shown(fresh)
        assert watch.errors == []


def test_a_waiting_message_that_comes_back_on_another_thread_names_its_thread(tmp_path):
    with room(tmp_path, {"default": [{"delay_s": 2, "content": "Answer one."}]}, "first-room") as (d, b, page, watch):
        reading_again_slowly(page, "T1", 3000)
        send(page, "meant for first-room")
        page.evaluate("location.hash = '#/t/second-room'")
        page.locator("#banner", has_text="Not sent to “first-room”").wait_for(timeout=10_000)
        assert page.locator("#text").input_value() == "meant for first-room"
        assert watch.errors == []
