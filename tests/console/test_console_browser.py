"""The web console in a real browser (Debian's chromium via Playwright) against a real
``ongridd serve`` and the scripted model: sign-in, two agent tiles with their results and
the final answer after them, stopping one worker, reload keeping the thread, the session
view with a rejected proposal's reason, a hostile answer that runs nothing, personas and
the marketplace, screenshots at 1280 and 390 px."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx2
import pytest

from tests.conftest import need
from tests.console.console_helpers import PageWatch, browser, copy_out, daemon, have_browser, save_artifacts

pytestmark = pytest.mark.slow

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"
TOKENS = f"alice:{ALICE},bob:{BOB}"
REJECT_REASON = "no runbook covers restarting nginx here"
HOSTILE = ("Here: <script>window.__pwned = 1</script> and <img src=x onerror=\"window.__pwned = 2\"> "
           "and [x](javascript:window.__pwned=3) and **bold**")


def agent_call(persona: str, prompt: str, description: str) -> dict:
    return {"name": "AgentTool", "arguments": {"description": description, "subagent_type": persona,
                                               "prompt": prompt}}


SCRIPT = {
    "default": [
        # turn 1: two workers; the final answer is made of their results
        {"content": "Dispatching the **disk** and ops specialists.",
         "tool_calls": [agent_call("specialist-disk", "What fills ${DISK_DIR}?", "disk usage"),
                        agent_call("specialist-ops", "Restart nginx on host local: users see 502s.",
                                   "restart nginx")]},
        {"content": "Both specialists answered.\n\n- disk: measured\n- ops: the restart was **rejected**"},
        # turn 2: a slow worker the user stops, and a fast one
        {"tool_calls": [agent_call("specialist-network", "Trace the path", "slow trace"),
                        agent_call("specialist-compute", "Check the load", "quick load check")]},
        {"content": "Noted: DNS too."},  # the interjection call for the message sent while turn 2 runs
        {"content": "After the stop: the load check answered."},
        # turn 3: a hostile answer
        {"content": HOSTILE},
        # turn 4: stopped as a whole by the user
        {"tool_calls": [agent_call("specialist-network", "Trace again", "second slow trace")]},
    ],
    "specialist-disk": [
        {"tool_calls": [{"name": "host_du_summary", "arguments": {"paths": ["${DISK_DIR}"], "depth": 1}}]},
        {"content": "disk: the big folder is **logs**"},
    ],
    "specialist-ops": [
        {"tool_calls": [{"name": "host_restart_service",
                         "arguments": {"service": "nginx", "reason": "users see 502s on web"}}]},
        {"content": "ops: the restart was rejected by the reviewer"},
    ],
    "reviewer": [{"content": f"Decision: reject\n- runbook: fail — {REJECT_REASON}"}],
    "specialist-network": [{"delay_s": 120, "content": "too late"}],
    "specialist-compute": [{"content": "compute: load is fine"}],
}


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    need(have_browser(), "Debian's chromium (/usr/bin/chromium) and the playwright package")
    tmp = tmp_path_factory.mktemp("console")
    disk = tmp / "disk" / "logs"
    disk.mkdir(parents=True)
    (disk / "big.log").write_bytes(b"x" * 200_000)
    with daemon(tmp, SCRIPT, tokens=TOKENS, DISK_DIR=str(tmp / "disk")) as d, browser() as b:
        d["browser"] = b
        d["tmp"] = tmp
        yield d


def sign_in(page, url: str, token: str = ALICE, hash_: str = "") -> None:
    page.goto(url + "/" + hash_)
    page.locator("#token").fill(token)
    page.locator("#signin button[type=submit]").click()
    page.locator("#who").filter(has_text="user").wait_for()


def test_page_headers_forbid_inline_script(console):
    resp = httpx2.get(console["url"] + "/", timeout=10)
    assert resp.status_code == 200
    csp = resp.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert "<script src=\"/static/app.js\"" in resp.text and "<script>" not in resp.text
    js = httpx2.get(console["url"] + "/static/app.js", timeout=10)
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    signed_in = {"Authorization": f"Bearer {ALICE}"}
    for path in ("/static/../app.py", "/static/webpage.py"):
        assert httpx2.get(console["url"] + path, headers=signed_in, timeout=10).status_code == 404
        assert httpx2.get(console["url"] + path, timeout=10).status_code in (401, 404)  # names nothing either way


def test_chat_tiles_stop_reload_session_view_and_hostile_answer(console):
    url, tmp = console["url"], console["tmp"]
    ctx = console["browser"].new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    watch = PageWatch(page)
    # a wrong token is refused, the right one signs in and lands on the thread in the URL
    page.goto(url + "/#/t/ops-room")
    page.locator("#conn.online").wait_for()  # signed out, the daemon still answers: the badge says so
    page.locator("#token").fill("wrong-token-0123456789")
    page.locator("#signin button[type=submit]").click()
    page.locator("#signin-error").filter(has_text="not valid").wait_for()
    assert page.locator("#conn").inner_text() == "daemon up"  # not "online": nothing is attached yet
    assert page.locator("nav[aria-label='Sections']").is_hidden()  # every section needs the sign-in
    page.locator("#token").fill(ALICE)
    page.locator("#signin button[type=submit]").click()
    page.locator("#who").filter(has_text="user").wait_for()  # signed in: the badge now says the socket's state
    page.locator("#conn.online").wait_for()
    assert page.locator("#thread-title").inner_text() == "ops-room"
    # the thread this page just opened has nothing in it yet, and its list entry says so
    fresh = page.locator("#threads a[data-thread='ops-room']")
    fresh.locator(".last.muted", has_text="no messages yet").wait_for()
    assert fresh.locator(".when").inner_text() == "new"

    # turn 1: Enter sends; two tiles, their results under them, the final answer after them
    box = page.locator("#text")
    box.fill("What fills the disk, and restart nginx please")
    box.press("Shift+Enter")
    assert box.input_value().endswith("\n")  # Shift+Enter is a newline, nothing sent
    box.press("Enter")
    page.locator(".msg.final").first.wait_for(timeout=60_000)
    turn = page.locator(".turn").last
    personas = turn.locator(".tile .persona").all_inner_texts()
    # one tile per worker (and one for the reviewer the ops worker's gated call started)
    assert sorted(p for p in personas if p != "reviewer") == ["specialist-disk", "specialist-ops"]
    assert personas.count("reviewer") == 1
    disk = turn.locator(".tile", has=page.locator(".persona", has_text="specialist-disk"))
    ops = turn.locator(".tile", has=page.locator(".persona", has_text="specialist-ops"))
    assert "disk usage" in disk.locator(".desc").inner_text()
    disk.locator(".status.completed").wait_for()
    assert disk.locator("button[data-stop]").is_hidden()  # a finished worker shows no Stop
    assert "the big folder is logs" in disk.locator("details .result-body").inner_text()
    assert disk.locator("details .result-body strong").inner_text() == "logs"  # rendered markdown
    assert "rejected by the reviewer" in ops.locator("details .result-body").inner_text()
    # the reviewer's tile says what the gate decided, not only that the reviewer completed
    reviewer_tile = turn.locator(".tile", has=page.locator(".persona", has_text="reviewer"))
    assert reviewer_tile.locator(".decision.decision-reject").inner_text() == "reject"
    # the ops worker completed, and its tile says its change was not made (not a plain green "completed")
    assert ops.locator(".status").first.inner_text() == "completed"
    assert ops.locator(".not-made").first.inner_text() == "1 change not made"
    assert disk.locator(".not-made").count() == 0
    # live as after a reload: the reviewer's tile is nested right under the worker whose change it reviewed
    assert "nested" in reviewer_tile.get_attribute("class")
    ops_box, reviewer_box = ops.first.bounding_box(), reviewer_tile.bounding_box()
    assert ops_box and reviewer_box and reviewer_box["x"] + reviewer_box["width"] <= ops_box["x"] + ops_box["width"] + 1
    live_order = turn.evaluate("t => Array.from(t.querySelectorAll('.tile .persona')).map(p => p.textContent)")
    assert live_order.index("reviewer") == live_order.index("specialist-ops") + 1, live_order
    # order in the turn: user message, streamed text, tiles, then the final answer
    classes = turn.evaluate("t => Array.from(t.children).map(c => c.className)")
    first_tile = next(i for i, c in enumerate(classes) if c.startswith("tile"))
    final_at = next(i for i, c in enumerate(classes) if "final" in c)
    assert classes[0] == "msg user" and final_at > first_tile and final_at == len(classes) - 1
    assert turn.locator(".msg.final strong").inner_text() == "rejected"
    # what the coordinator wrote before its tool calls streamed as plain text; once the turn has
    # ended it is shown rendered, as the stored transcript has it
    before_tools = turn.locator(".msg", has_text="Dispatching the")
    before_tools.locator("strong", has_text="disk").wait_for(timeout=15_000)
    assert "**" not in before_tools.inner_text()
    assert page.locator("#stopturn").is_disabled()
    page.locator("#threads a[data-thread='ops-room']").wait_for()
    shot = save_artifacts(tmp, "console-1280", page)
    copy_out(shot)

    # session view from a tile: the worker's tree and audit rows with the rejected proposal
    ops.locator("a", has_text="audit").click()
    page.locator("#view-session:not([hidden])").wait_for()
    page.locator("#audit tbody tr").first.wait_for()
    row = page.locator("#audit tbody tr[data-tool='host_restart_service']")
    assert row.get_attribute("data-status") == "rejected"
    when = row.locator("td.when")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", when.get_attribute("title"))
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", when.inner_text())  # absolute, to the ms
    assert row.locator(".decision-reject").inner_text() == "reject"
    assert REJECT_REASON in row.locator(".reason").inner_text()
    assert "nginx" in row.locator("pre").first.inner_text()
    tree_text = page.locator("#session-tree").inner_text()
    assert "specialist-ops" in tree_text and "reviewer" in tree_text
    # the reviewer's node says what the gate decided (from the server, not the answer's text)
    assert page.locator("#session-tree .decision-reject").inner_text() == "reject"
    assert re.search(r"\d+ tokens in / \d+ out · 2 model calls", tree_text)  # the session's usage counters
    # a worker's page has its brief (what the coordinator asked) and its report (what it answered)
    page.locator("#session-worker:not([hidden])").wait_for()
    assert page.locator("#session-brief").inner_text() == "Restart nginx on host local: users see 502s."
    assert page.locator("#session-report").inner_text() == "ops: the restart was rejected by the reviewer"
    copy_out(save_artifacts(tmp, "session-1280", page))
    # the session's whole tree can be saved from here, as `ongrid sessions export` writes it
    with page.expect_download() as caught:
        page.locator("#session-export").click()
    saved = json.loads(Path(caught.value.path()).read_text())
    assert caught.value.suggested_filename.startswith("ongrid-session-") and saved["format"] == "ongrid-session-export"
    assert saved["session"]["audit"] and saved["session"]["messages"], sorted(saved["session"])
    # after a reload (or from a shared link) the way back still leads to the session's own thread
    page.reload()
    page.locator("#session-tree .persona").first.wait_for()
    page.locator("#session-back[href='#/t/ops-room']").wait_for(timeout=10_000)
    # the coordinator's session view lists every agent's calls
    page.go_back()
    page.locator("#conn.online").wait_for()
    page.locator("#thread-session").click()
    page.locator("#audit tbody tr[data-tool='host_du_summary']").wait_for()
    assert page.locator("#audit tbody tr[data-tool='AgentTool']").count() == 2
    assert page.locator("#session-worker").is_hidden()  # the coordinator was briefed by no one
    # at 390 px the audit stacks into one card per call: every cell on screen, nothing to scroll sideways
    size = page.viewport_size
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(100)
    assert page.evaluate("document.documentElement.scrollWidth <= 390 + 1")
    assert page.evaluate("document.querySelector('#view-session .scroll').scrollWidth"
                         " <= document.querySelector('#view-session .scroll').clientWidth + 1")
    cell = page.locator("#audit tbody tr[data-tool='host_du_summary'] td[data-label='result']").first
    cell.scroll_into_view_if_needed()
    box = cell.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390 + 1 and box["width"] > 200, box
    copy_out(save_artifacts(tmp, "session-390", page))
    assert page.locator("#menu").is_hidden()  # no thread list on this page: no button that opens none
    page.set_viewport_size(size)
    page.go_back()

    # turn 2: stop the slow worker only
    page.locator("#conn.online").wait_for()
    page.locator("#text").fill("Trace the network and check the load")
    page.locator("#text").press("Enter")
    slow = page.locator(".turn").last.locator(".tile", has=page.locator(".persona", has_text="specialist-network"))
    fast = page.locator(".turn").last.locator(".tile", has=page.locator(".persona", has_text="specialist-compute"))
    slow.locator(".status.running").wait_for(timeout=30_000)
    fast.locator(".status.completed").wait_for(timeout=30_000)
    assert not page.locator("#stopturn").is_disabled()
    page.locator("#threads a[data-thread='ops-room'] .running-mark").wait_for()  # the thread list's marker
    # a message sent while the turn runs joins it (one interjection call acknowledges it)
    page.locator("#text").fill("also check DNS")
    page.locator("#text").press("Enter")
    page.locator(".msg", has_text="Noted: DNS too.").wait_for(timeout=30_000)
    page.wait_for_timeout(2500)
    before = slow.locator(".elapsed").inner_text()
    assert re.fullmatch(r"[1-9]\d*s", before)  # live elapsed time
    # reload mid-turn: the running worker comes back as one live tile that can still be stopped, its
    # elapsed time counted from when it started, not from the reload
    page.reload()
    page.locator("#conn.online").wait_for()
    slow.locator(".status.running").wait_for(timeout=30_000)
    assert page.locator(".tile", has=page.locator(".persona", has_text="specialist-network")).count() == 1
    after = slow.locator(".elapsed").inner_text()
    assert int(after.rstrip("s")) >= int(before.rstrip("s")), (before, after)
    # the transcript of turn 1, reloaded: the reviewer the ops worker's change waited for is under its tile
    first = page.locator(".turn").first
    first.locator(".tile.nested").first.wait_for()
    assert first.locator(".tile.nested .persona").all_inner_texts() == ["reviewer"]
    order = first.evaluate("t => Array.from(t.querySelectorAll('.tile .persona')).map(p => p.textContent)")
    assert order.index("reviewer") == order.index("specialist-ops") + 1, order
    assert first.locator(".tile.nested .status").inner_text() == "completed"
    assert first.locator(".tile.nested .decision-reject").inner_text() == "reject"  # after the reload too
    assert first.locator(".tile.history .not-made").inner_text() == "1 change not made"
    first.locator(".tile.nested summary").click()  # and its reasons, as its result showed them live
    assert REJECT_REASON in first.locator(".tile.nested .result-body").inner_text()
    # finished tiles keep how long their worker ran (from the stored start and close)
    for tile in (first.locator(".tile.history", has=page.locator(".persona", has_text="specialist-ops")),
                 first.locator(".tile.nested")):
        assert re.fullmatch(r"\d+s|\d+m \d\ds", tile.locator(".elapsed").first.inner_text()), tile.inner_text()
    page.locator("#stopturn:not([disabled])").wait_for()
    slow.locator("button[data-stop]").click()
    slow.locator(".status.killed").wait_for(timeout=30_000)
    assert slow.locator("button[data-stop]").is_hidden()
    page.locator(".turn").last.locator(".msg.final").wait_for(timeout=30_000)
    assert "After the stop" in page.locator(".turn").last.locator(".msg.final").inner_text()
    # the page was reloaded during the turn: the message sent before the reload, stored as the turn
    # went on, shows in it once the turn ends (without another reload)
    page.locator(".turn", has=page.locator(".msg.user", has_text="Trace the network")).locator(
        ".msg.user", has_text="also check DNS").wait_for(timeout=15_000)
    fast.locator(".status.completed").wait_for()
    slow.locator(".status.killed").wait_for()  # the stored outcome once the turn ended
    assert "load is fine" in fast.locator(".result-body").text_content()
    # the stopped worker's page has its brief, and says why it has no report
    slow.locator("a", has_text="audit").click()
    page.locator("#session-worker:not([hidden])").wait_for()
    assert page.locator("#session-brief").inner_text() == "Trace the path"
    assert page.locator("#session-report").inner_text() == "No report — the worker ended killed: stopped by the user."
    page.go_back()
    page.locator("#conn.online").wait_for()

    # turn 3: a hostile answer renders as text and runs nothing
    page.locator("#text").fill("Say something nasty")
    page.locator("#text").press("Enter")
    final = page.locator(".turn").last.locator(".msg.final")
    final.wait_for(timeout=30_000)
    assert "<script>" in final.inner_text() and "onerror" in final.inner_text()
    assert final.locator("script, img, iframe").count() == 0
    assert final.locator("a[href^='javascript']").count() == 0
    assert final.locator("strong").inner_text() == "bold"
    page.wait_for_timeout(300)
    assert page.evaluate("window.__pwned === undefined")
    assert watch.errors == [] and watch.csp_violations() == []
    assert not [m for m in watch.console if "status of 404" in m], watch.console  # nothing missing (a favicon)
    # and the policy is a second wall: an inline script slipped into the page does not run
    page.evaluate("() => { const s = document.createElement('script'); s.textContent = 'window.__inline = 1';"
                  " document.body.append(s); }")
    page.wait_for_timeout(200)
    assert page.evaluate("window.__inline === undefined")
    assert watch.csp_violations(), watch.console

    # reload: the thread and its history stay
    page.reload()
    page.locator("#conn.online").wait_for()
    assert page.url.endswith("#/t/ops-room")
    page.locator(".msg.user", has_text="What fills the disk").wait_for()
    page.locator(".msg.user", has_text="Trace the network").wait_for()
    assert page.locator(".msg", has_text="Both specialists answered").count() == 1
    # the stored dispatches come back as tiles with their results
    stopped = page.locator(".tile.history", has=page.locator(".persona", has_text="specialist-network"))
    assert stopped.locator(".status").inner_text() == "killed"
    done = page.locator(".tile.history", has=page.locator(".persona", has_text="specialist-disk"))
    assert "the big folder" in done.locator(".result-body").text_content()
    hostile = page.locator(".msg", has_text="Here:")
    assert hostile.locator("script, img").count() == 0 and "<script>" in hostile.inner_text()
    assert page.evaluate("window.__pwned === undefined")
    assert watch.errors == []

    # the socket drops: the page reconnects by itself and re-attaches to the thread
    page.evaluate("state.ws.close()")
    page.locator("#conn", has_text="reconnecting").wait_for()
    page.locator("#conn.online").wait_for(timeout=15_000)
    page.locator(".msg.user", has_text="Say something nasty").wait_for()
    assert page.locator(".msg.user", has_text="What fills the disk").count() == 1
    # while the daemon cannot be reached (a restart), the conversation stays on screen, dimmed
    page.evaluate("() => { window.__RealWS = WebSocket; "
                  "window.WebSocket = function () { return new window.__RealWS('ws://127.0.0.1:9/'); }; }")
    page.evaluate("state.ws.close()")
    page.locator("#log.stale").wait_for(timeout=15_000)
    page.wait_for_timeout(1500)  # a failed reconnect or two
    assert page.locator("#log.stale .msg.user", has_text="What fills the disk").count() == 1
    assert page.locator("#conn", has_text="reconnecting").count() == 1
    page.evaluate("() => { window.WebSocket = window.__RealWS; }")
    page.locator("#conn.online").wait_for(timeout=30_000)
    assert page.locator("#log.stale").count() == 0
    assert page.locator(".msg.user", has_text="What fills the disk").count() == 1  # the stored copy, once

    # turn 4: the stop-the-turn button ends the turn and its worker, with a note under the message (a stop
    # the user asked for is no error: no red banner)
    page.locator("#text").fill("Trace it again")
    page.locator("#text").press("Enter")
    again = page.locator(".turn").last.locator(".tile", has=page.locator(".persona", has_text="specialist-network"))
    again.locator(".status.running").wait_for(timeout=30_000)
    page.locator("#stopturn").click()
    page.locator(".turn").last.locator(".msg.noanswer", has_text="Stopped").wait_for(timeout=30_000)
    assert page.locator("#banner").is_hidden()
    again.locator(".status.killed").wait_for(timeout=30_000)
    assert page.locator("#stopturn").is_disabled()
    # after a reload the banner is gone: the turn that never answered says so where it stands
    page.reload()
    page.locator("#conn.online").wait_for()
    page.locator(".turn", has=page.locator(".msg.user", has_text="Trace it again")).locator(
        ".msg.noanswer", has_text="Stopped — the turn was stopped.").wait_for(timeout=15_000)  # as live
    assert page.locator(".msg.noanswer").count() == 1  # the answered turns have none
    # the message that joined turn 2 is shown inside it, not as a turn of its own that never answered
    second = page.locator(".turn", has=page.locator(".msg.user", has_text="Trace the network"))
    assert second.locator(".msg.user", has_text="also check DNS").count() == 1
    assert page.locator(".turn", has=page.locator(".msg.user", has_text="also check DNS")).count() == 1

    # another user sees neither the thread nor its session (404)
    sid = page.locator("#thread-session").get_attribute("href").split("/")[-1]
    bob = {"Authorization": f"Bearer {BOB}"}
    assert httpx2.get(f"{url}/api/sessions/{sid}/messages", headers=bob, timeout=10).status_code == 404
    assert httpx2.get(f"{url}/api/sessions", headers=bob, timeout=10).json() == []

    # narrow screen: the same thread is usable at 390 px
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator("#text").wait_for()
    assert page.evaluate("document.documentElement.scrollWidth <= 390 + 1")
    assert page.locator("#menu").is_visible()  # the thread list's button, where the list is
    page.locator(".msg.assistant").last.scroll_into_view_if_needed()
    copy_out(save_artifacts(tmp, "console-390", page))
    page.locator("#menu").click()
    page.locator("#sidebar.open #threads a[data-thread='ops-room']").wait_for()
    ctx.close()


def test_personas_edit_save_warning_and_delete(console):
    url = console["url"]
    ctx = console["browser"].new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    page.on("dialog", lambda d: d.accept())
    sign_in(page, url, hash_="#/personas")
    row = page.locator("#personas tr[data-persona='specialist-disk']")
    row.wait_for()
    assert row.locator("td").nth(1).inner_text() == "builtin"
    # a built-in persona's page offers no delete
    page.goto(url + "/#/personas/specialist-disk")
    page.locator("#persona-meta").filter(has_text="builtin").wait_for()
    assert page.locator("#persona-delete").is_hidden()
    page.locator("#conn.online").wait_for()  # no chat socket on this page: the API says the daemon answers
    # overriding the built-in: the page says where the override lives at once, and after a delete that the
    # built-in is back, with its own text
    builtin_text = page.locator("#persona-body").input_value()
    page.locator("#persona-body").fill(builtin_text.replace("max_turns: 15", "max_turns: 14"))
    page.locator("#persona-form button[type=submit]").click()
    page.locator("#persona-result.good").filter(has_text="Saved specialist-disk").wait_for()
    meta = page.locator("#persona-meta").inner_text()
    assert meta.startswith("user") and "specialist-disk.md" in meta and "builtin_agents" not in meta, meta
    assert page.locator("#persona-delete").is_visible()
    page.locator("#persona-delete").click()
    page.locator("#persona-result.good").filter(has_text="the built-in specialist-disk is back").wait_for()
    page.locator("#persona-meta").filter(has_text="builtin").wait_for()
    assert page.locator("#persona-delete").is_hidden()
    assert "max_turns: 14" not in page.locator("#persona-body").input_value()
    page.goto(url + "/#/personas")
    # a user file with a problem: kept, and the list shows its warning (hot reload)
    (console["tmp"] / "agents" / "warned.md").write_text(
        '---\nname: warned\ndescription: "Has a warning"\ntools: ["no_such_tool_here"]\n---\nHi.\n')
    warned = page.locator("#personas tr[data-persona='warned']")
    for _ in range(40):
        page.reload()
        page.locator("#personas tr[data-persona='specialist-disk']").wait_for()
        if warned.count():
            break
        page.wait_for_timeout(250)
    assert warned.locator("td").nth(1).inner_text() == "user"
    assert "unknown tool 'no_such_tool_here'" in warned.locator(".warnings").inner_text()
    # a new user agent, started from the list's New persona form (a name the daemon would refuse is
    # said at once); save, then a broken edit shows the server's message and warnings
    page.locator("#persona-new-name").fill("console helper!")
    page.locator("#persona-new button[type=submit]").click()
    page.locator("#persona-new-error").filter(has_text="only letters, digits").wait_for()
    assert page.url.endswith("#/personas")
    page.locator("#persona-new-name").fill("console-helpe")  # put right: the note goes as you type
    assert page.locator("#persona-new-error").inner_text() == ""
    page.locator("#persona-new-name").fill("console-helper")
    page.locator("#persona-new button[type=submit]").click()
    page.locator("#persona-meta").filter(has_text="new persona").wait_for()
    assert page.url.endswith("#/personas/console-helper")
    assert "name: \"console-helper\"" in page.locator("#persona-body").input_value()
    page.locator("#persona-body").fill('---\nname: console-helper\ndescription: "Helps in tests"\n'
                                      'tools: ["get_host_load", "not_a_tool"]\n---\nYou help.\n')
    page.locator("#persona-form button[type=submit]").click()
    page.locator("#persona-result.good").filter(has_text="Saved console-helper").wait_for()
    assert "unknown tool 'not_a_tool'" in page.locator("#persona-warnings").inner_text()
    page.goto(url + "/#/personas")
    page.locator("#personas tr[data-persona='console-helper']").wait_for()
    page.goto(url + "/#/personas/console-helper")
    from playwright.sync_api import expect

    expect(page.locator("#persona-body")).to_have_value(re.compile("Helps in tests"))
    assert page.locator("#persona-delete").is_visible()  # a user agent can be deleted
    assert "get_host_load" in page.locator("#persona-body").input_value()
    page.locator("#persona-body").fill("---\nname: console-helper\nmax_turns: lots\n---\n")
    page.locator("#persona-form button[type=submit]").click()
    page.locator("#persona-result.bad").filter(has_text="Not saved").wait_for()
    # said once: on the result line, not again in the warnings box
    assert "'max_turns' must be an integer" in page.locator("#persona-result").inner_text()
    assert "'max_turns' must be an integer" not in page.locator("#persona-warnings").inner_text()
    # the saved version is still live; delete it
    assert httpx2.get(f"{url}/api/agents/console-helper", headers={"Authorization": f"Bearer {ALICE}"},
                      timeout=10).json()["description"] == "Helps in tests"
    page.locator("#persona-delete").click()
    # nothing defines it any more: back on the list, which says so (not an empty "new persona" form)
    page.locator("#personas-result.good").filter(has_text="Deleted console-helper").wait_for()
    assert page.url.endswith("#/personas")
    page.locator("#personas tr[data-persona='specialist-disk']").wait_for()
    assert page.locator("#personas tr[data-persona='console-helper']").count() == 0
    assert httpx2.get(f"{url}/api/agents/console-helper", headers={"Authorization": f"Bearer {ALICE}"},
                      timeout=10).status_code == 404
    # the reviewer's file is shown read-only, with why, instead of being refused on Save
    page.goto(url + "/#/personas/reviewer")
    page.locator("#persona-result").filter(has_text="decides the review gate").wait_for()
    assert "Decision" in page.locator("#persona-body").input_value()
    assert page.locator("#persona-body").get_attribute("readonly") is not None
    assert page.locator("#persona-save").is_hidden()
    # a name typed into the address bar that no persona can have is refused at once
    page.goto(url + "/#/personas/Bad%20Name")
    page.locator("#persona-result.bad").filter(has_text="No persona can be called that").wait_for()
    assert page.locator("#persona-save").is_hidden()
    page.goto(url + "/#/personas/specialist-disk")  # another persona is editable again
    page.locator("#persona-meta").filter(has_text="builtin").wait_for()
    assert page.locator("#persona-save").is_visible()
    assert page.locator("#persona-body").get_attribute("readonly") is None
    # a file dropped into an agents folder that gives no persona is listed above the table, with why
    broken = console["tmp"] / "agents" / "broken-yaml.md"
    broken.write_text("---\nname: broken\ndescription: [unclosed\n---\nbody\n")
    try:
        page.goto(url + "/#/personas")
        skipped = page.locator("#personas-skipped")
        for _ in range(30):  # the watcher reloads within a second or two
            page.reload()
            row.wait_for()
            page.wait_for_timeout(300)
            if skipped.is_visible():
                break
            page.wait_for_timeout(500)
        assert "broken-yaml.md" in skipped.inner_text() and "file skipped" in skipped.inner_text()
        assert skipped.inner_text().count("broken-yaml.md") == 1  # the path once, the reasons under it
        assert skipped.locator("ul ul li").first.inner_text().startswith("line ")
    finally:
        broken.unlink()
    # at 390 px the list stacks like the marketplace's: no cell squeezed, nothing off screen
    page.goto(url + "/#/personas")
    row.wait_for()
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(100)
    assert page.evaluate("document.documentElement.scrollWidth <= 390 + 1")
    assert page.evaluate("document.querySelector('#view-personas .scroll').scrollWidth"
                         " <= document.querySelector('#view-personas .scroll').clientWidth + 1")
    description = row.locator("td[data-label='description']")
    description.scroll_into_view_if_needed()
    box = description.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390 + 1 and box["width"] > 200, box
    ctx.close()


def test_marketplace_install_and_uninstall(console):
    url = console["url"]
    ctx = console["browser"].new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    sign_in(page, url, hash_="#/market")
    row = page.locator("#market tr[data-package='ongrid-example-postmortem']")
    row.wait_for()
    assert row.locator(".installed").inner_text() == "no"
    row.locator("button[data-action='install']").click()
    page.locator("#market-result.good").filter(has_text="installed").wait_for(timeout=120_000)
    assert "\nskills: skills" in page.locator("#market-result").inner_text()  # what it added, as the CLI says it
    row.locator(".installed", has_text="yes").wait_for()
    # an uninstall is asked first: declined, nothing happens
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    row.locator("button[data-action='uninstall']").click()
    page.wait_for_timeout(300)
    assert asked and "ongrid-example-postmortem" in asked[0], asked
    assert row.locator(".installed").inner_text() == "yes"
    page.once("dialog", lambda d: d.accept())
    row.locator("button[data-action='uninstall']").click()
    page.locator("#market-result.good").filter(has_text="uninstall").wait_for(timeout=120_000)
    row.locator(".installed", has_text="no").wait_for()
    # at 390 px the table stacks: nothing overflows, the installed cell and the button are on screen
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(100)
    assert page.evaluate("document.documentElement.scrollWidth <= 390 + 1")
    assert page.evaluate("document.querySelector('#view-market .scroll').scrollWidth"
                         " <= document.querySelector('#view-market .scroll').clientWidth + 1")
    for part in (row.locator(".installed"), row.locator("button[data-action='install']")):
        part.scroll_into_view_if_needed()
        box = part.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390 + 1, box
    ctx.close()
