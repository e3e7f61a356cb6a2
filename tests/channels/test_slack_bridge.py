"""The Slack bridge against a local double of the Slack Web API, with a real
``ongridd serve`` whose scripted coordinator dispatches a worker running the
real ``host_du_summary`` on a temporary folder."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time

import httpx2
import pytest

from tests.channels.doubles import Call, PlatformDouble
from tests.channels.helpers import disk_script, start_fake_llm, start_serve, stop
from tests.e2e.e2e_helpers import rows

pytestmark = pytest.mark.slow

SECRET = "8f2c1d0e9b7a6c5d4e3f2a1b0c9d8e7f"
TOKEN = "xoxb-test-0123456789-abcdefghijklmnop"
CHANNEL = "C0CHAN"
LONG = ("Summary of the investigation.\n\n```\n" + "\n".join(f"/data/file{i:04d}  {i * 7} KiB" for i in range(400))
        + "\n```\n\nThat is all: **nothing** is on fire <ok> & done.")


def slack_responder():
    counter = itertools.count(1)

    def respond(call: Call):
        if call.path.endswith("/auth.test"):
            return 200, {}, {"ok": True, "user_id": "UBOT", "team_id": "T1"}
        if call.path.endswith("/chat.postMessage"):
            return 200, {}, {"ok": True, "channel": call.payload["channel"], "ts": f"1700000100.{next(counter):06d}"}
        if call.path.endswith("/chat.update"):
            return 200, {}, {"ok": True, "channel": call.payload["channel"], "ts": call.payload["ts"]}
        return 404, {}, {"ok": False, "error": "unknown_method"}

    return respond


def sign(body: bytes, ts: int | None = None, secret: str = SECRET) -> dict[str, str]:
    ts = int(time.time()) if ts is None else ts
    base = f"v0:{ts}:".encode() + body
    sig = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": sig, "Content-Type": "application/json"}


def event(event_id: str, text: str, *, user: str = "U123", ts: str = "1700000000.000100",
          thread_ts: str | None = None, etype: str = "app_mention") -> bytes:
    ev = {"type": etype, "user": user, "text": text, "ts": ts, "channel": CHANNEL, "event_ts": ts}
    if thread_ts:
        ev["thread_ts"] = thread_ts
    return json.dumps({"type": "event_callback", "team_id": "T1", "event_id": event_id, "event_time": 1,
                       "authorizations": [{"user_id": "UBOT", "is_bot": True}], "event": ev}).encode()


@pytest.fixture
def slack(tmp_path):
    folder = tmp_path / "data"
    (folder / "logs").mkdir(parents=True)
    (folder / "logs" / "big.log").write_bytes(b"x" * 300_000)
    double = PlatformDouble(slack_responder()).start()
    llm, llm_url = start_fake_llm(tmp_path, disk_script(folder, LONG))
    settings = {"ongrid_slack": {"api_base_url": double.url + "/api", "users": {"U123": "alice"},
                                 "default_locale": "en", "locales": {CHANNEL: "fr"}, "edit_interval_s": 0.2}}
    daemon, url = start_serve(tmp_path, llm_url, settings, SLACK_BOT_TOKEN=TOKEN, SLACK_SIGNING_SECRET=SECRET)
    try:
        yield double, url, tmp_path
    finally:
        stop(daemon)
        stop(llm)
        double.stop()


def post(url: str, body: bytes, headers: dict[str, str]) -> httpx2.Response:
    return httpx2.post(url + "/api/channels/slack/events", content=body, headers=headers, timeout=10)


def test_challenge_signed_turn_progress_final_split_retry_and_forgeries(slack):
    double, url, tmp = slack
    challenge = json.dumps({"type": "url_verification", "token": "x", "challenge": "c-123"}).encode()
    res = post(url, challenge, sign(challenge))
    assert res.status_code == 200 and res.json() == {"challenge": "c-123"}
    # an unpaired surrogate echoed back is written as U+FFFD (the answer failed to encode: a 500)
    odd = b'{"type": "url_verification", "token": "x", "challenge": "c-\\ud800"}'
    res = post(url, odd, sign(odd))
    assert res.status_code == 200 and res.json() == {"challenge": "c-\ufffd"}, res.text

    # a platform 429 (Retry-After 1) on the first edit and a 500 on the first post: both retried
    double.inject("/chat.update", 429, {"Retry-After": "1"})
    double.inject("/chat.postMessage", 500)
    body = event("Ev001", "<@UBOT> what fills the data folder?")
    started = time.monotonic()
    res = post(url, body, sign(body))
    assert res.status_code == 200 and time.monotonic() - started < 3.0

    def final_posted():  # the placeholder, then the answer's later parts, the last one ending so
        return any(p.payload["text"].endswith("done.") for p in double.find("/chat.postMessage"))
    double.wait_for(final_posted, 90, "the final answer")
    posts = double.find("/chat.postMessage")
    updates = double.find("/chat.update")
    placeholder = posts[0]
    assert placeholder.payload["thread_ts"] == "1700000000.000100" and placeholder.payload["channel"] == CHANNEL
    assert "Working on it" in placeholder.payload["text"]
    assert placeholder.headers["authorization"] == f"Bearer {TOKEN}"
    # one message edited: every update targets the placeholder's ts
    ph_ts = "1700000100.000001"
    assert {u.payload["ts"] for u in updates} == {ph_ts}
    texts = [u.payload["text"] for u in updates]
    assert any("Looking at the disk usage now." in t for t in texts)  # SendMessage text
    assert any("*specialist-disk*" in t and "running" in t for t in texts)  # tile progress
    assert any("*specialist-disk*" in t and "completed" in t for t in texts)
    # final: first part replaces the placeholder, the rest follows in the thread; mrkdwn, split at 3,900
    answer = [texts[-1]] + [p.payload["text"] for p in posts[1:]]
    assert answer[0].startswith("Summary of the investigation.")
    assert all(len(a) <= 3900 for a in answer) and len(answer) >= 2
    assert all(a.count("```") % 2 == 0 for a in answer)  # no code block broken
    assert answer[-1].endswith("That is all: *nothing* is on fire &lt;ok&gt; &amp; done.")
    assert all(p.payload["thread_ts"] == "1700000000.000100" for p in posts)
    # no link or media preview: Slack's servers would fetch a URL the model wrote (and what it carries)
    assert all(p.payload["unfurl_links"] is False and p.payload["unfurl_media"] is False for p in posts)
    failed = [c for c in double.calls if c.status >= 429]
    assert sorted(c.status for c in failed) == [429, 500]
    # the edit after the 429 waited for Retry-After
    after_429 = next(c for c in double.calls if c.path.endswith("/chat.update") and c.status == 200)
    first_429 = next(c for c in double.calls if c.status == 429)
    assert after_429.at - first_429.at >= 0.9

    # the turn ran as alice in thread slack:C0CHAN/<ts>, its origin recorded on its user message
    db = tmp / "state" / "ongrid.db"
    [session] = rows(db, "select id, user_id, thread_id from chat_sessions where parent_session_id is null")
    assert session["user_id"] == "alice" and session["thread_id"] == "slack:C0CHAN/1700000000.000100"
    [origin] = rows(db, "select * from turn_origins")
    assert (origin["platform"], origin["im_user"], origin["conversation"]) == ("slack", "U123",
                                                                               "C0CHAN/1700000000.000100")
    [msg] = rows(db, f"select role, content from chat_messages where session_id = '{session['id']}' "
                     f"and seq = {origin['message_seq']}")
    assert msg == {"role": "user", "content": "what fills the data folder?"}
    audit = rows(db, "select tool_name, status from audit_logs")
    assert {"tool_name": "host_du_summary", "status": "ok"} in audit
    assert TOKEN not in (tmp / "daemon.log").read_text() and SECRET not in (tmp / "daemon.log").read_text()

    n_calls = len(double.calls)
    # the platform retries the same event: no second turn
    res = post(url, body, {**sign(body), "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"})
    assert res.status_code == 200
    # forged and stale requests: 401, nothing starts
    other = event("Ev002", "<@UBOT> again?", ts="1700000000.000200")
    forged = post(url, other, sign(other, secret="wrong-secret-wrong-secret"))
    assert forged.status_code == 401 and forged.json() == {"error": {"code": "unauthorized",
                                                                     "message": "invalid signature"}}
    assert post(url, other, sign(other, ts=int(time.time()) - 301)).status_code == 401
    tampered = sign(other)
    assert post(url, other.replace(b"again", b"AGAIN"), tampered).status_code == 401
    assert post(url, other, {"Content-Type": "application/json"}).status_code == 401
    # a timestamp of digits int() does not take (latin-1 "²"): refused as unsigned, never a 500
    odd = httpx2.post(url + "/api/channels/slack/events", content=other,
                      headers=[(b"Content-Type", b"application/json"), (b"X-Slack-Request-Timestamp", b"\xb2"),
                               (b"X-Slack-Signature", sign(other)["X-Slack-Signature"].encode())], timeout=10)
    assert odd.status_code == 401, odd.text
    # a body that is not UTF-8, a signature that is not ASCII hex: refused as unsigned, never a 500
    raw = b'{"a": "\xff"}'
    assert post(url, raw, sign(raw)).status_code == 401
    bad_sig = httpx2.post(url + "/api/channels/slack/events", content=other,
                          headers=[(b"Content-Type", b"application/json"),
                                   (b"X-Slack-Request-Timestamp", str(int(time.time())).encode()),
                                   (b"X-Slack-Signature", b"v0=" + "\u00e9".encode("latin-1") * 64)], timeout=10)
    assert bad_sig.status_code == 401, bad_sig.text
    # a number JSON does not have: an unsigned sender is refused as unsigned (401), not told what the
    # body holds; a signed one gets 400 from the bridge, which sees no JSON object
    nan = b'{"type": "event_callback", "x": NaN}'
    assert post(url, nan, sign(nan, secret="wrong-secret-wrong-secret")).status_code == 401
    signed_nan = post(url, nan, sign(nan))
    assert signed_nan.status_code == 400 and signed_nan.json()["error"]["message"] == "expected a JSON object"
    assert "plugin_route_failed" not in (tmp / "daemon.log").read_text()
    # a flood of forged requests writes about one refused line a second, the next saying how many were not
    seen = len((tmp / "daemon.log").read_text().splitlines())
    for _ in range(20):
        assert post(url, other, sign(other, secret="wrong-secret-wrong-secret")).status_code == 401
    time.sleep(1.1)
    assert post(url, other, sign(other, secret="wrong-secret-wrong-secret")).status_code == 401
    time.sleep(0.3)
    refused = [json.loads(line) for line in (tmp / "daemon.log").read_text().splitlines()[seen:]
               if '"slack_request_refused"' in line]
    assert 1 <= len(refused) <= 10 and refused[-1].get("not_logged", 0) >= 1, refused
    time.sleep(1.5)
    assert len(double.calls) == n_calls
    assert len(rows(db, "select id from chat_sessions where parent_session_id is null")) == 1

    # an unmapped Slack user gets a polite refusal in the thread and nothing runs
    stranger = event("Ev003", "<@UBOT> give me root", user="U999", ts="1700000000.000300")
    assert post(url, stranger, sign(stranger)).status_code == 200
    refusal = double.wait_for(lambda: [p for p in double.find("/chat.postMessage")
                                       if p.payload.get("thread_ts") == "1700000000.000300"], 20, "the refusal")
    assert "not mapped to an Ongrid user" in refusal[0].payload["text"]
    time.sleep(0.5)
    assert len(rows(db, "select id from chat_sessions where parent_session_id is null")) == 1

    # the bot's own messages and bot/subtype messages are ignored
    n_calls = len(double.calls)
    for i, ev in enumerate([
        {"type": "message", "user": "UBOT", "text": "hi", "ts": "1700000000.000400", "channel": CHANNEL,
         "channel_type": "im"},
        {"type": "message", "bot_id": "B1", "user": "U123", "text": "hi", "ts": "1700000000.000401",
         "channel": CHANNEL, "channel_type": "im"},
        {"type": "message", "subtype": "message_changed", "user": "U123", "text": "hi",
         "ts": "1700000000.000402", "channel": CHANNEL, "channel_type": "im"}]):
        raw = json.dumps({"type": "event_callback", "event_id": f"EvBot{i}", "event": ev}).encode()
        assert post(url, raw, sign(raw)).status_code == 200
    time.sleep(1.0)
    assert len(double.calls) == n_calls


def test_stop_message_stops_the_running_turn(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    script = disk_script(folder, "never reached")
    script["specialist-disk"][0]["delay_s"] = 60  # the worker hangs until stopped
    double = PlatformDouble(slack_responder()).start()
    llm, llm_url = start_fake_llm(tmp_path, script)
    settings = {"ongrid_slack": {"api_base_url": double.url + "/api", "default_user": "bob",
                                 "users": {"U777": "carol"}, "edit_interval_s": 0.2, "channels": [CHANNEL]}}
    daemon, url = start_serve(tmp_path, llm_url, settings, SLACK_BOT_TOKEN=TOKEN, SLACK_SIGNING_SECRET=SECRET)
    try:
        # start-up says the bridge is on and which default-named secrets it took (names, never values)
        log_text = (tmp_path / "daemon.log").read_text()
        assert TOKEN not in log_text and SECRET not in log_text
        events = [json.loads(line) for line in log_text.splitlines() if line.startswith("{")]
        active = [e for e in events if e["event"] == "bridge_active"]
        assert [(e["plugin"], e["route"]) for e in active] == [("ongrid_slack", "POST /api/channels/slack/events")]
        adopted = sorted(v for e in events if e["event"] == "plugin_secret_removed_from_environment"
                         for v in e["variables"])
        assert adopted == ["SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"]
        body = event("EvS1", "<@UBOT> check the disk", user="U555")  # unmapped: default_user bob
        assert post(url, body, sign(body)).status_code == 200
        double.wait_for(lambda: any("running" in u.payload["text"] for u in double.find("/chat.update")), 60,
                        "the worker tile")
        # a channel that is not allowed starts nothing
        elsewhere = json.loads(event("EvS2", "<@UBOT> hi", user="U555", ts="1700000000.000900"))
        elsewhere["event"]["channel"] = "C0OTHER"
        raw = json.dumps(elsewhere).encode()
        n = len(double.calls)
        assert post(url, raw, sign(raw)).status_code == 200
        # another message in the thread while the turn runs goes to that turn, not a second one
        more = event("EvS2b", "also look at /tmp", user="U555", ts="1700000000.000450",
                     thread_ts="1700000000.000100", etype="message")
        assert post(url, more, sign(more)).status_code == 200
        double.wait_for(lambda: any("Added to the turn already running" in u.payload["text"]
                                    for u in double.find("/chat.update")), 30, "the interjection note")
        # "stop" in the thread (a plain message, no mention)
        stop_msg = event("EvS3", "stop", user="U555", ts="1700000000.000500", thread_ts="1700000000.000100",
                         etype="message")
        assert post(url, stop_msg, sign(stop_msg)).status_code == 200
        double.wait_for(lambda: any(u.payload["text"] == "⏹ Stopped." for u in double.find("/chat.update")), 30,
                        "the stopped placeholder")
        replies = double.wait_for(lambda: [p for p in double.find("/chat.postMessage")
                                           if p.payload["text"] == "⏹ Stopped."], 10, "the stop reply")
        assert replies[0].payload["thread_ts"] == "1700000000.000100"
        assert not [c for c in double.calls[n:] if c.payload and c.payload.get("channel") == "C0OTHER"]
        db = tmp_path / "state" / "ongrid.db"
        [worker] = rows(db, "select status from chat_sessions where parent_session_id is not null")
        assert worker["status"] == "killed"
        [coord] = rows(db, "select user_id, thread_id from chat_sessions where parent_session_id is null")
        assert coord == {"user_id": "bob", "thread_id": "slack:C0CHAN/1700000000.000100"}

        # a second thread, stopped by a ⏹ reaction on its placeholder
        second = event("EvS4", "<@UBOT> and now?", user="U555", ts="1700000000.000700")
        assert post(url, second, sign(second)).status_code == 200
        [ph] = double.wait_for(lambda: [p for p in double.find("/chat.postMessage")
                                        if p.payload["thread_ts"] == "1700000000.000700"], 30, "the placeholder")
        target = ph.response["ts"]
        double.wait_for(lambda: len(rows(db, "select id from chat_sessions where parent_session_id is not null "
                                             "and status = 'running'")) == 1, 30, "the second worker")
        def reaction(event_id: str, user: str) -> bytes:
            return json.dumps({"type": "event_callback", "event_id": event_id, "event": {
                "type": "reaction_added", "user": user, "reaction": "black_square_for_stop",
                "item": {"type": "message", "channel": CHANNEL, "ts": target}}}).encode()

        # another member, mapped to another Ongrid user, cannot stop bob's turn; their "stop" in a new
        # conversation says nothing is running there and leaves no thread behind
        other = reaction("EvS5a", "U777")
        assert post(url, other, sign(other)).status_code == 200
        theirs = event("EvS5b", "<@UBOT> stop", user="U777", ts="1700000000.000800")
        assert post(url, theirs, sign(theirs)).status_code == 200
        double.wait_for(lambda: [p for p in double.find("/chat.postMessage") if p.payload["thread_ts"] ==
                                 "1700000000.000800" and "Nothing is running" in p.payload["text"]], 30,
                        "the answer to the other user's stop")
        time.sleep(0.5)
        assert len(rows(db, "select id from chat_sessions where parent_session_id is not null "
                            "and status = 'running'")) == 1
        assert not rows(db, "select id from chat_sessions where user_id = 'carol'")
        mine = reaction("EvS5", "U555")
        assert post(url, mine, sign(mine)).status_code == 200
        double.wait_for(lambda: any(u.payload["ts"] == target and u.payload["text"] == "⏹ Stopped."
                                    for u in double.find("/chat.update")), 30, "the reaction stop")
        assert len(rows(db, "select id from chat_sessions where status = 'killed'")) == 2
    finally:
        stop(daemon)
        stop(llm)
        double.stop()
