"""The web console reloaded while a turn runs, in a real browser (Debian's chromium via
Playwright) against a real ``ongridd serve``: a message sent before the reload that joined
the running turn shows in the transcript once the turn ends, without another reload."""

from __future__ import annotations

import pytest

from tests.conftest import need
from tests.console.console_helpers import browser, daemon, have_browser, send_text, signed_in_page

pytestmark = pytest.mark.slow

TOKEN = "carol-token-0123456789abcdef"
SCRIPT = {"default": [
    {"delay_s": 4, "content": "First answer after a slow think."},
    {"content": "Noted your second message."},  # the interjection call
    {"content": "Final answer covering both messages."},
]}


def signed_in(b, url: str, thread: str):
    """A page of the console on ``thread``, signed in with TOKEN and attached; ``(page, watch)``."""
    return signed_in_page(b, url, thread, TOKEN)


send = send_text


def send_two(page, first: str, second: str) -> None:
    """Send ``first``, then ``second`` a second later, while the turn runs; wait for the
    interjection's acknowledgement of the second (the script's "Noted your second message.")."""
    send(page, first)
    page.wait_for_timeout(1000)
    send(page, second)
    page.locator(".msg", has_text="Noted your second message.").wait_for(timeout=15_000)


def test_a_message_that_joined_the_turn_shows_after_a_reload_mid_turn(tmp_path):
    need(have_browser(), "Debian's chromium (/usr/bin/chromium) and the playwright package")
    with daemon(tmp_path, SCRIPT, tokens=f"carol:{TOKEN}") as d, browser() as b:
        page, watch = signed_in(b, d["url"], "reload-room")
        send_two(page, "M1 first", "M2 important second message")
        page.reload()  # the model is still thinking about M1
        page.locator("#conn.online").wait_for()
        # the transcript read again when the turn ends takes the old one's place whole: the
        # conversation never blanks meanwhile; and the second turn, ending while it is read, never
        # shows twice (live and stored)
        page.evaluate("""() => { window.blanked = 0; window.twice = 0; const log = document.getElementById("log");
          new MutationObserver(() => {
            if (!log.querySelector(".msg.user")) window.blanked += 1;
            const finals = Array.from(log.querySelectorAll(".msg")).filter(
              (m) => m.textContent.includes("Final answer covering both messages."));
            if (finals.length > 1) window.twice += 1;
          }).observe(log, {childList: true, subtree: true, characterData: true}); }""")
        page.locator(".msg", has_text="Final answer covering both messages.").wait_for(timeout=30_000)
        page.locator(".msg.user", has_text="M2 important second message").wait_for(timeout=15_000)
        page.wait_for_timeout(1000)  # the transcript read again after the turn
        assert page.locator(".msg.user", has_text="M2 important second message").count() == 1
        assert page.evaluate("window.blanked") == 0
        assert page.evaluate("window.twice") == 0
        assert page.locator(".msg.noanswer").count() == 0
        assert watch.errors == []


def test_a_worker_that_ended_before_a_reload_mid_turn_shows_once_with_its_result(tmp_path):
    # reloaded after the worker answered, while the coordinator still thinks: the stored tile (with its
    # result) and the re-attach's live frame for it are one tile, whose elapsed time stays where it ended
    need(have_browser(), "Debian's chromium (/usr/bin/chromium) and the playwright package")
    script = {"default": [
                  {"content": "Dispatching the disk specialist.",
                   "tool_calls": [{"name": "AgentTool", "arguments": {
                       "description": "Disk usage of /var/log", "subagent_type": "specialist-disk",
                       "prompt": "Find what fills /var/log."}}]},
                  {"delay_s": 5, "content": "Final answer: the disk is fine."}],
              "specialist-disk": [{"delay_s": 1, "content": "Worker report: /var/log is small."}]}
    with daemon(tmp_path, script, tokens=f"carol:{TOKEN}") as d, browser() as b:
        page, watch = signed_in(b, d["url"], "ended-worker-room")
        send(page, "What fills /var/log?")
        page.locator(".tile .status.completed").wait_for(timeout=15_000)
        page.reload()  # the coordinator's last call is still pending
        page.locator("#conn.online").wait_for()
        tile = page.locator(".tile", has_text="Disk usage of /var/log")
        tile.locator(".status.completed").wait_for(timeout=5_000)
        page.wait_for_timeout(1500)  # the re-attach's frames have come
        assert page.locator(".tile").count() == 1
        assert "Worker report: /var/log is small." in tile.locator(".result-box").text_content()
        took = tile.locator(".elapsed").inner_text()
        page.wait_for_timeout(1500)
        assert tile.locator(".elapsed").inner_text() == took  # it ended: its time does not run on
        assert page.locator(".msg", has_text="Final answer: the disk is fine.").count() == 0  # still running
        page.locator(".msg.final", has_text="Final answer: the disk is fine.").wait_for(timeout=15_000)
        page.wait_for_timeout(1000)  # the transcript read again after the turn
        assert page.locator(".tile").count() == 1
        assert "Worker report: /var/log is small." in tile.locator(".result-box").text_content()
        assert watch.errors == []


def test_a_turn_that_fails_says_so_under_its_message_live(tmp_path):
    # as a reload shows it: the failed turn's note stands under its message, not only in the banner
    need(have_browser(), "Debian's chromium (/usr/bin/chromium) and the playwright package")
    with daemon(tmp_path, {"default": [{"http_status": 400}]}, tokens=f"carol:{TOKEN}") as d, browser() as b:
        page, watch = signed_in(b, d["url"], "failing-room")
        page.set_viewport_size({"width": 390, "height": 600})
        # taller than the log: the thread opens scrolled, and must show the note at its end
        page.locator("#text").fill("Will this fail?\n" + "\n".join(f"detail line {i}" for i in range(60)))
        page.locator("#text").press("Enter")
        turn = page.locator(".turn", has=page.locator(".msg.user", has_text="Will this fail?"))
        turn.locator(".msg.noanswer", has_text="provider_error").wait_for(timeout=30_000)
        assert page.locator("#banner").is_visible() and "provider_error" in page.locator("#banner-text").inner_text()
        live = turn.locator(".msg.noanswer").inner_text()
        # after a reload the banner is gone, and the note under the message still says why
        page.reload()
        page.locator("#conn.online").wait_for()
        turn.locator(".msg.noanswer", has_text="provider_error").wait_for(timeout=15_000)
        assert turn.locator(".msg.noanswer").inner_text() == live and page.locator("#banner").is_hidden()
        below = "(() => { const l = document.getElementById('log'); return l.scrollHeight - l.clientHeight - l.scrollTop; })()"
        assert page.evaluate("document.getElementById('log').scrollHeight > document.getElementById('log').clientHeight")
        page.wait_for_function(f"{below} <= 2", timeout=5_000)  # the note is in view, not below the fold
        # the thread list marks the thread whose last turn failed, as `sessions list` does
        page.locator("#threads a[data-thread='failing-room'] .ended-mark.failed").wait_for(state="attached")
        assert watch.errors == []


def test_tiles_started_by_workers_nest_in_order_live(tmp_path):
    # reviewers and what they start, arriving interleaved: each under the tile that started it, after
    # what that one started before (the page's own tile code, driven with the frames a turn sends)
    need(have_browser(), "Debian's chromium (/usr/bin/chromium) and the playwright package")
    with daemon(tmp_path, {"default": [{"content": "hi"}]}, tokens=f"carol:{TOKEN}") as d, browser() as b:
        page, watch = signed_in(b, d["url"], "nesting-room")
        order = page.evaluate("""() => {
          const tile = (id, parent) => onTile({type: "agent_tile", task_id: id, subagent_type: id,
            description: "d", status: "running", started_at: new Date().toISOString(),
            ...(parent ? {parent_task_id: parent} : {})});
          for (const [id, parent] of [["W1"], ["W2"], ["R1", "W1"], ["G1", "R1"], ["R2", "W1"], ["R3", "W2"],
                                      ["G2", "R1"], ["R4", "W1"]]) tile(id, parent);
          tile("R1", "W1");  // a status change: the same tile, not a second one
          return Array.from(document.querySelectorAll("#log .tile")).map(
            (t) => `${t.dataset.task}:${t.dataset.depth || 0}`);
        }""")
        assert order == ["W1:0", "R1:1", "G1:2", "G2:2", "R2:1", "R4:1", "W2:0", "R3:1"], order
        # re-attached mid-turn: a running reviewer the reload drew from the stored tree becomes the live
        # tile, where it stands (not a second tile, out of order)
        order = page.evaluate("""() => {
          const drawn = document.createElement("div");
          drawn.className = "tile history nested";
          drawn.dataset.task = "H1";
          drawn.dataset.depth = "1";
          document.querySelector('#log .tile[data-task="R3"]').after(drawn);
          onTile({type: "agent_tile", task_id: "H1", subagent_type: "reviewer", description: "d",
                  status: "running", started_at: new Date().toISOString(), parent_task_id: "W2"});
          return Array.from(document.querySelectorAll("#log .tile")).map(
            (t) => `${t.dataset.task}:${t.dataset.depth || 0}:${t.classList.contains("history")}`);
        }""")
        assert order[-2:] == ["R3:1:false", "H1:1:false"], order
        assert watch.errors == []


def test_a_message_the_running_turn_has_not_read_yet_shows_right_after_a_reload(tmp_path):
    """Held for the running turn (its model has not read it yet), a message
    sent before the reload is in the transcript at once, inside that turn —
    and once the turn has answered, it is there once."""
    need(have_browser(), "Debian's chromium (/usr/bin/chromium) and the playwright package")
    script = {"default": [{"delay_s": 8, "content": "First answer after a long think."},
                          {"content": "Noted your second message."},  # the interjection call
                          {"content": "Final answer covering both messages."}]}
    with daemon(tmp_path, script, tokens=f"carol:{TOKEN}") as d, browser() as b:
        page, watch = signed_in(b, d["url"], "held-room")
        send_two(page, "M1 first", "M2 sent while it thinks")
        page.reload()  # the model is still thinking about M1: M2 is held, not read yet
        page.locator("#conn.online").wait_for()
        page.locator(".msg.user", has_text="M2 sent while it thinks").wait_for(timeout=5_000)
        assert page.locator(".msg", has_text="Final answer covering both messages.").count() == 0  # still running
        page.locator(".msg", has_text="Final answer covering both messages.").wait_for(timeout=30_000)
        page.wait_for_timeout(1000)  # the transcript read again after the turn
        assert page.locator(".msg.user", has_text="M2 sent while it thinks").count() == 1
        assert watch.errors == []


def test_an_interim_message_shows_as_it_did_live_after_a_reload(tmp_path):
    # SendMessage's text, shown live as an interim bubble, stands in the transcript after a reload in
    # its place, rendered as live: its markdown as sanitised HTML, HTML the model wrote as text
    need(have_browser(), "Debian's chromium (/usr/bin/chromium) and the playwright package")
    script = {"default": [
        {"tool_calls": [{"name": "SendMessage", "arguments": {"text": "Checking **disk** <b id='x'>first</b>"}}]},
        {"content": "Disk is fine."},
    ]}
    with daemon(tmp_path, script, tokens=f"carol:{TOKEN}") as d, browser() as b:
        page, watch = signed_in(b, d["url"], "interim-room")
        send(page, "How is the disk?")
        page.locator(".msg.final", has_text="Disk is fine.").wait_for(timeout=15_000)
        page.locator(".msg.interim", has_text="Checking").wait_for(timeout=5_000)
        page.reload()
        page.locator("#conn.online").wait_for()
        page.locator(".msg.final", has_text="Disk is fine.").wait_for(timeout=15_000)
        interim = page.locator(".msg.interim")
        assert interim.count() == 1
        assert interim.inner_text() == "Checking disk <b id='x'>first</b>"
        assert interim.locator("strong").inner_text() == "disk"
        assert page.locator("#x").count() == 0
        # in its place: after the question, before the answer
        classes = page.locator(".msg").evaluate_all("els => els.map(e => e.className.split(' '))")
        kinds = [k for c in classes for k in c if k in ("user", "interim", "final")]
        assert kinds == ["user", "interim", "final"], classes
        assert page.locator(".chip", has_text="SendMessage").count() == 0
        assert watch.errors == []


def test_a_tool_chip_says_after_a_reload_what_it_said_live(tmp_path):
    # a call that did not run (a redirect stub, an unknown tool) must not read, after a reload, like a
    # call that ran: the chip says ok, redirect or error with why, as it did live
    need(have_browser(), "Debian's chromium (/usr/bin/chromium) and the playwright package")
    script = {"default": [
        {"content": "Checking a few things first.",
         "tool_calls": [{"name": "AgentTool", "arguments": {"description": "ghost job", "subagent_type": "ghost",
                                                             "prompt": "nothing"}},
                        {"name": "host_restart_service", "arguments": {"host": "local", "service": "nginx"}},
                        {"name": "no_such_tool", "arguments": {}},
                        {"name": "query_knowledge", "arguments": {"query": "disk full"}},
                        {"name": "query_devices", "arguments": {}}]},
        {"content": "Restarted nginx."},
    ]}
    with daemon(tmp_path, script, tokens=f"carol:{TOKEN}") as d, browser() as b:
        page, watch = signed_in(b, d["url"], "chip-room")
        send(page, "Restart nginx")
        page.locator(".msg.final", has_text="Restarted nginx.").wait_for(timeout=15_000)
        live = page.locator(".chip").all_inner_texts()
        page.reload()
        page.locator("#conn.online").wait_for()
        page.locator(".msg.final", has_text="Restarted nginx.").wait_for(timeout=15_000)
        again = page.locator(".chip").all_inner_texts()
        assert sorted(again) == sorted(live), (live, again)
        # in the model's order, live and after a reload (a refused dispatch's chip aside: live it comes
        # when the refusal does)
        order = [c.split(" ")[0] for c in again if not c.startswith("AgentTool")]
        assert order == ["host_restart_service", "no_such_tool", "query_knowledge", "query_devices"], again
        assert [c.split(" ")[0] for c in live if not c.startswith("AgentTool")] == order, live
        assert any(c.startswith("no_such_tool error: no_such_tool is not available") for c in again), again
        assert page.locator(".chip.redirect").count() == 3 - 2 and page.locator(".chip.error").count() == 3
        assert "query_devices ok" in again, again
        # a dispatch refused before any worker ran is an error chip with why, live and after a reload; no tile
        assert any(c.startswith("AgentTool error: subagent_type 'ghost' is not a known persona") for c in again)
        assert page.locator(".tile").count() == 0
        assert page.locator(".msg", has_text="Checking a few things first.").count() == 1
        # and the redirect says where to go
        assert any(c.startswith("host_restart_service redirect: host_restart_service is not available") for c in again)
        assert watch.errors == []


def test_a_long_answer_shows_rendered_once_the_turn_ends(tmp_path):
    # a long text goes out live as plain text (rendering it on the event loop could hold the daemon);
    # when the turn ends the page reads the transcript, which has it rendered
    need(have_browser(), "Debian's chromium (/usr/bin/chromium) and the playwright package")
    answer = "## Findings\n\n" + "".join(f"- **web-{i}**: /var/log is 91% full\n" for i in range(200))
    with daemon(tmp_path, {"default": [{"content": answer}]}, tokens=f"carol:{TOKEN}") as d, browser() as b:
        page, watch = signed_in(b, d["url"], "long-room")
        send(page, "Which hosts are full?")
        page.locator(".msg.final h2", has_text="Findings").wait_for(timeout=15_000)
        assert page.locator(".msg.final strong", has_text="web-199").count() == 1
        assert page.locator(".msg.final pre").count() == 0
        assert watch.errors == []



def test_a_question_says_working_until_the_turn_shows_something(tmp_path):
    need(have_browser(), "Debian's chromium (/usr/bin/chromium) and the playwright package")
    with daemon(tmp_path, {"default": [{"delay_s": 2, "content": "Thought it over."}]},
                tokens=f"carol:{TOKEN}") as d, browser() as b:
        page, watch = signed_in(b, d["url"], "slow-room")
        send(page, "Take your time")
        page.locator(".turn .msg.working", has_text="Working on it").wait_for(timeout=5_000)
        page.locator(".msg.final", has_text="Thought it over.").wait_for(timeout=15_000)
        assert page.locator(".msg.working").count() == 0
        assert watch.errors == []
