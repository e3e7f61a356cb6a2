"""The Telegram bridge against a local double of the Bot API (long polling
and webhook), with a real ``ongridd serve`` whose scripted coordinator
dispatches a worker running the real ``host_du_summary``."""

from __future__ import annotations

import itertools
import re
import threading
import time

import httpx2
import pytest

from tests.channels.doubles import Call, PlatformDouble
from tests.channels.helpers import disk_script, start_fake_llm, start_serve, stop
from tests.e2e.e2e_helpers import rows

pytestmark = pytest.mark.slow

TOKEN = "123456:AAE-test-token-0123456789abcdefXYZ"
WEBHOOK_SECRET = "whsec-0123456789abcdefghij"
HOSTILE = ('Done. <script>alert("x")</script> & <b>not bold</b> [click](javascript:alert(1)) '
           '[docs](https://example.org/?a=1&b="2")\n\n```sh\necho "<tag>" && true\n```')
BOT_ID, BOT_NAME = 777000111, "ongrid_ops_bot"
LONG = "Findings:\n\n```\n" + "\n".join(f"/srv/f{i:04d} <{i}> & more" for i in range(300)) + "\n```\n\n" + HOSTILE


class BotAPI:
    """getUpdates (long poll over a queue), sendMessage, editMessageText."""

    def __init__(self):
        self.updates: list[dict] = []
        self.cond = threading.Condition()
        self.ids = itertools.count(1000)

    def push(self, update: dict) -> None:
        with self.cond:
            self.updates.append(update)
            self.cond.notify_all()

    def __call__(self, call: Call):
        method = call.path.rsplit("/", 1)[-1]
        if not call.path.startswith(f"/bot{TOKEN}/"):
            return 401, {}, {"ok": False, "error_code": 401, "description": "Unauthorized"}
        if method == "getUpdates":
            offset = (call.payload or {}).get("offset", 0)
            deadline = time.monotonic() + min((call.payload or {}).get("timeout", 0), 2)
            with self.cond:
                while True:
                    ready = [u for u in self.updates if u["update_id"] >= offset]
                    if ready or time.monotonic() >= deadline:
                        return 200, {}, {"ok": True, "result": ready}
                    self.cond.wait(max(0.01, deadline - time.monotonic()))
        if method == "getMe":
            return 200, {}, {"ok": True, "result": {"id": BOT_ID, "is_bot": True, "first_name": "Ongrid",
                                                    "username": BOT_NAME}}
        if method == "sendMessage":
            return 200, {}, {"ok": True, "result": {"message_id": next(self.ids), "chat": {"id": call.payload["chat_id"]}}}
        if method == "editMessageText":
            return 200, {}, {"ok": True, "result": {"message_id": call.payload["message_id"]}}
        return 404, {}, {"ok": False, "description": "Not Found: method not found"}


def update(update_id: int, text: str, *, user: int = 42, chat: int = -1001, thread: int | None = 7,
           message_id: int = 10, chat_type: str = "supergroup", addressed: bool = True,
           entities: list | None = None) -> dict:
    """A ``message`` update; in a group, by default addressed to the bot
    (``@bot text``, or ``/cmd@bot`` for a command) with the entity the Bot API sets."""
    if addressed and chat_type != "private":
        if text.startswith("/"):
            text = f"{text}@{BOT_NAME}"
            entities = [{"type": "bot_command", "offset": 0, "length": len(text)}]
        else:
            text = f"@{BOT_NAME} {text}"
            entities = [{"type": "mention", "offset": 0, "length": len(BOT_NAME) + 1}]
    msg = {"message_id": message_id, "date": 1, "text": text, "chat": {"id": chat, "type": chat_type},
           "from": {"id": user, "is_bot": False, "first_name": "Op"}}
    if entities is not None:
        msg["entities"] = entities
    if thread is not None:
        msg.update(message_thread_id=thread, is_topic_message=True)
    return {"update_id": update_id, "message": msg}


def unescape_len_ok(texts):
    """Every message within Telegram's 4,096 characters after entities parsing, the answer in as few as fit."""
    from ongrid_telegram.markup import visible_length

    sizes = [visible_length(t) for t in texts]
    return all(size <= 4096 for size in sizes) and all(size > 2048 for size in sizes[:-1])


def test_polling_turn_progress_final_html_split_outage_and_refusal(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "big.bin").write_bytes(b"x" * 200_000)
    api = BotAPI()
    double = PlatformDouble(api).start()
    llm, llm_url = start_fake_llm(tmp_path, disk_script(folder, LONG))
    settings = {"ongrid_telegram": {"api_base_url": double.url, "users": {"42": "carol"}, "poll_timeout_s": 1,
                                    "edit_interval_s": 0.2, "default_locale": "de"}}
    daemon, _url = start_serve(tmp_path, llm_url, settings, TELEGRAM_BOT_TOKEN=TOKEN)
    try:
        double.wait_for(lambda: double.find("/getUpdates"), 30, "the first poll")
        # a 429 with retry_after on the first send: honoured, then the placeholder goes out
        double.inject("/sendMessage", 429, body={"ok": False, "error_code": 429,
                                                 "description": "Too Many Requests: retry after 2",
                                                 "parameters": {"retry_after": 2}})
        api.push(update(501, "what fills the data folder?"))
        done = double.wait_for(lambda: [c for c in double.find("/sendMessage")
                                        if c.payload["text"].rstrip().endswith("</code></pre>")
                                        and "echo" in c.payload["text"]], 90, "the final answer")
        sends = double.find("/sendMessage")
        edits = double.find("/editMessageText")
        placeholder = sends[0]
        [limited] = [c for c in double.calls if c.status == 429]
        assert placeholder.at - limited.at >= 1.9  # retry_after honoured
        assert placeholder.payload["chat_id"] == -1001 and placeholder.payload["message_thread_id"] == 7
        assert placeholder.payload["reply_parameters"]["message_id"] == 10
        assert placeholder.payload["parse_mode"] == "HTML" and "Working on it" in placeholder.payload["text"]
        assert {e.payload["message_id"] for e in edits} == {1000}  # one message edited throughout
        texts = [e.payload["text"] for e in edits]
        assert any("Looking at the disk usage now." in t for t in texts)
        assert any("<b>specialist-disk</b>" in t and "running" in t for t in texts)
        answer = [texts[-1]] + [s.payload["text"] for s in sends[1:]]
        assert answer[0].startswith("Findings:") and len(answer) >= 2 and unescape_len_ok(answer)
        assert all(a.count("<pre>") == a.count("</pre>") for a in answer)  # no code block broken
        last = done[-1].payload["text"]
        assert '&lt;script&gt;alert("x")&lt;/script&gt; &amp; &lt;b&gt;not bold&lt;/b&gt;' in last
        assert "javascript:" not in re.sub(r"\[click\]\(javascript:alert\(1\)\)", "", last)
        assert '<a href="https://example.org/?a=1&amp;b=&quot;2&quot;">docs</a>' in last
        assert '<pre><code class="language-sh">echo "&lt;tag&gt;" &amp;&amp; true</code></pre>' in last
        assert "<script" not in "".join(answer)
        assert all(TOKEN not in line for line in (tmp_path / "daemon.log").read_text().splitlines())
        db = tmp_path / "state" / "ongrid.db"
        [coord] = rows(db, "select user_id, thread_id from chat_sessions where parent_session_id is null")
        assert coord == {"user_id": "carol", "thread_id": "telegram:-1001/7"}
        assert {"tool_name": "host_du_summary", "status": "ok"} in rows(db, "select tool_name, status from audit_logs")
        [origin] = rows(db, "select platform, im_user, conversation from turn_origins")
        assert origin == {"platform": "telegram", "im_user": "42", "conversation": "-1001/7"}

        # the API goes away and comes back: the loop keeps polling
        double.stop()
        time.sleep(3)
        polls_before = len(double.find("/getUpdates"))
        double.start()
        api.push(update(502, "hello?", user=99, chat=555, thread=None, message_id=11))  # unmapped user
        refusal = double.wait_for(lambda: [c for c in double.find("/sendMessage") if c.payload["chat_id"] == 555],
                                  60, "the refusal after the outage")
        assert "not mapped to an Ongrid user" in refusal[0].payload["text"]
        assert len(double.find("/getUpdates")) > polls_before
        assert "message_thread_id" not in refusal[0].payload
        log = (tmp_path / "daemon.log").read_text()
        assert "telegram_poll_failed" in log and "telegram_poll_recovered" in log
        assert len(rows(db, "select id from chat_sessions where parent_session_id is null")) == 1
        users = rows(db, "select content from chat_messages where role = 'user' and session_id in "
                         "(select id from chat_sessions where parent_session_id is null)")
        assert users == [{"content": "what fills the data folder?"}]  # the bot's @name taken out

        def answered(message_id: int) -> list:
            return [c for c in double.find("/sendMessage")
                    if (c.payload.get("reply_parameters") or {}).get("message_id") == message_id]

        # in a group only what is addressed to the bot is answered, the refusal included: not a plain
        # message, not a mention of another bot; a reply to the bot's message is; a mention after an
        # emoji (entity offsets count UTF-16 units) is; a private chat needs no mention
        api.push(update(503, "hello?", user=99, chat=555, thread=None, message_id=12, addressed=False))
        api.push(update(504, "@other_bot stop", thread=None, message_id=13, addressed=False,
                        entities=[{"type": "mention", "offset": 0, "length": 10}]))
        reply = update(505, "stop", thread=None, message_id=14, addressed=False)
        reply["message"]["reply_to_message"] = {"message_id": 1000, "from": {"id": BOT_ID, "is_bot": True}}
        api.push(reply)
        api.push(update(506, f"🔥 @{BOT_NAME} stop", thread=None, message_id=15, addressed=False,
                        entities=[{"type": "mention", "offset": 3, "length": len(BOT_NAME) + 1}]))
        api.push(update(507, "stop", chat=42, chat_type="private", thread=None, message_id=16))
        for mid in (14, 15, 16):
            double.wait_for(lambda mid=mid: answered(mid), 30, f"the answer to message {mid}")
        assert not answered(12) and not answered(13)
        assert len(double.find("/getMe")) == 1
    finally:
        stop(daemon)
        stop(llm)
        double.stop()


def _webhook_daemon_with_a_slow_worker(tmp_path, **settings):
    """(the Bot API double, fake-llm, the daemon in webhook mode, its URL): the disk worker's first
    model call takes 60 s, so a turn stays running."""
    folder = tmp_path / "data"
    folder.mkdir()
    script = disk_script(folder, "never reached")
    script["specialist-disk"][0]["delay_s"] = 60
    double = PlatformDouble(BotAPI()).start()
    llm, llm_url = start_fake_llm(tmp_path, script)
    settings = {"ongrid_telegram": {"api_base_url": double.url, "mode": "webhook", "default_user": "dave",
                                    "edit_interval_s": 0.2, **settings}}
    daemon, url = start_serve(tmp_path, llm_url, settings, TELEGRAM_BOT_TOKEN=TOKEN,
                              TELEGRAM_WEBHOOK_SECRET=WEBHOOK_SECRET)
    return double, llm, daemon, url


def test_webhook_secret_dedup_and_stop(tmp_path):
    double, llm, daemon, url = _webhook_daemon_with_a_slow_worker(tmp_path, chats=["-1001"])
    hook = url + "/api/channels/telegram/webhook"
    try:
        first = update(601, "check the disk", thread=None)
        assert httpx2.post(hook, json=first, timeout=10).status_code == 401
        assert httpx2.post(hook, json=first, timeout=10,
                           headers={"X-Telegram-Bot-Api-Secret-Token": "wrong"}).status_code == 401
        time.sleep(0.5)
        assert not double.calls  # nothing started, and no polling in webhook mode
        ok = {"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET}
        assert httpx2.post(hook, json={**first, "update_id": True}, headers=ok, timeout=10).status_code == 400
        for uid in (10**400, -1):  # no Bot API id: refused as such, never a 500 from the store's bound
            too_big = '{"update_id": %d, "message": {"text": "x"}}' % uid
            answer = httpx2.post(hook, content=too_big, headers={**ok, "Content-Type": "application/json"}, timeout=10)
            assert answer.status_code == 400 and answer.json()["error"]["code"] == "bad_request"
        assert httpx2.post(hook, json=first, headers=ok, timeout=10).status_code == 200
        assert httpx2.post(hook, json=first, headers=ok, timeout=10).status_code == 200  # redelivered
        double.wait_for(lambda: any("running" in e.payload["text"] for e in double.find("/editMessageText")), 60,
                        "the worker tile")
        assert len(double.find("/sendMessage")) == 1  # one placeholder: one turn
        other_chat = update(602, "hi", chat=777, thread=None)
        assert httpx2.post(hook, json=other_chat, headers=ok, timeout=10).status_code == 200
        assert httpx2.post(hook, json=update(603, "/stop", thread=None, message_id=12), headers=ok,
                           timeout=10).status_code == 200
        double.wait_for(lambda: any(e.payload["text"] == "⏹ Stopped." for e in double.find("/editMessageText")),
                        30, "the stopped placeholder")
        assert not [c for c in double.calls if (c.payload or {}).get("chat_id") == 777]
        db = tmp_path / "state" / "ongrid.db"
        [worker] = rows(db, "select status from chat_sessions where parent_session_id is not null")
        assert worker["status"] == "killed"
    finally:
        stop(daemon)
        stop(llm)
        double.stop()


def test_a_turn_a_daemon_stop_ends_says_so_in_its_chat(tmp_path):
    """SIGTERM mid-turn: the turn is drained, stopped, and its placeholder says the daemon stopped (it was
    left at the worker's "running" tile, for good, as the relay was cancelled before it could edit)."""
    double, llm, daemon, url = _webhook_daemon_with_a_slow_worker(tmp_path)
    try:
        assert httpx2.post(url + "/api/channels/telegram/webhook", json=update(701, "check the disk", thread=None),
                           headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET}, timeout=10).status_code == 200
        double.wait_for(lambda: any("running" in e.payload["text"] for e in double.find("/editMessageText")), 60,
                        "the worker tile")
        assert stop(daemon, 30) == 0
        last = double.find("/editMessageText")[-1].payload["text"]
        assert "restarted or shut down" in last and "send your message again" in last, last
    finally:
        stop(daemon)
        stop(llm)
        double.stop()


def test_queued_and_busy_turns_show_in_the_placeholder(tmp_path):
    """One turn at a time, a queue of one: the second conversation's
    placeholder says it is queued (then gets its answer), the third is told
    the daemon is busy — and nothing of it runs or is stored."""
    api = BotAPI()
    double = PlatformDouble(api).start()
    llm, llm_url = start_fake_llm(tmp_path, {"default": [{"delay_s": 3, "content": "the answer"}]})
    settings = {"ongrid_telegram": {"api_base_url": double.url, "users": {"42": "carol"}, "poll_timeout_s": 1,
                                    "edit_interval_s": 0.2}}
    limits = {"limits": {"max_concurrent_turns": 1, "max_turns_per_user": 1, "max_queued_turns": 1}}
    daemon, _url = start_serve(tmp_path, llm_url, settings, more_config=limits, TELEGRAM_BOT_TOKEN=TOKEN)

    def texts_of(chat: int) -> list[str]:
        sends = [c for c in double.find("/sendMessage") if c.payload["chat_id"] == chat]
        edits = [c for c in double.find("/editMessageText") if c.payload["chat_id"] == chat]
        return [c.payload["text"] for c in sends + edits]

    try:
        double.wait_for(lambda: double.find("/getUpdates"), 30, "the first poll")
        api.push(update(601, "first", chat=-1, thread=None, message_id=21))
        double.wait_for(lambda: texts_of(-1), 30, "the first placeholder")
        api.push(update(602, "second", chat=-2, thread=None, message_id=22))
        double.wait_for(lambda: [t for t in texts_of(-2) if "Queued (position 1)" in t], 30, "the queued placeholder")
        api.push(update(603, "third", chat=-3, thread=None, message_id=23))
        busy = double.wait_for(lambda: [t for t in texts_of(-3) if "Ongrid is busy right now" in t], 30,
                               "the busy reply")
        assert "Nothing was run" in busy[-1]
        for chat in (-1, -2):
            double.wait_for(lambda chat=chat: [t for t in texts_of(chat) if "the answer" in t], 60, "the answers")
        db = tmp_path / "state" / "ongrid.db"
        threads = {r["thread_id"]: r["id"] for r in rows(
            db, "select id, thread_id from chat_sessions where parent_session_id is null")}
        stored = rows(db, "select session_id, role, content from chat_messages")
        assert {"role": "user", "content": "second"} in [{k: m[k] for k in ("role", "content")} for m in stored]
        busy_sid = threads.get("telegram:-3")
        assert busy_sid is None or not [m for m in stored if m["session_id"] == busy_sid]
        assert not [o for o in rows(db, "select conversation from turn_origins") if o["conversation"] == "-3"]
    finally:
        stop(daemon)
        stop(llm)
        double.stop()


def test_a_failed_turn_shows_a_fixed_text_not_the_daemons_internals(tmp_path):
    """A model provider error ends the turn with a message for operators (the model's address,
    the session id); the chat gets a fixed text — a group must not learn them."""
    api = BotAPI()
    double = PlatformDouble(api).start()
    llm, llm_url = start_fake_llm(tmp_path, {"default": [{"http_status": 400}]})
    settings = {"ongrid_telegram": {"api_base_url": double.url, "users": {"42": "carol"}, "poll_timeout_s": 1,
                                    "edit_interval_s": 0.2}}
    daemon, _url = start_serve(tmp_path, llm_url, settings, more_config={"llm": {"max_retries": 0}},
                               TELEGRAM_BOT_TOKEN=TOKEN)
    try:
        double.wait_for(lambda: double.find("/getUpdates"), 30, "the first poll")
        api.push(update(701, "why is the disk full", chat=-7, thread=None, message_id=31))
        shown = double.wait_for(lambda: [c.payload["text"] for c in double.find("/editMessageText")
                                         if "could not answer" in c.payload["text"]], 60, "the failure")
        assert "provider failed" in shown[-1]
        every = " ".join(c.payload["text"] for c in double.find("/sendMessage") + double.find("/editMessageText"))
        port = llm_url.split(":")[2].split("/")[0]
        assert port not in every and "127.0.0.1" not in every and "session" not in every.lower()
    finally:
        stop(daemon)
        stop(llm)
        double.stop()


class ImpatientBotAPI(BotAPI):
    """A Bot API (or a proxy in front of it) that answers every getUpdates at once, holding nothing:
    with ``junk`` as the result every time."""

    def __init__(self, junk: list):
        super().__init__()
        self.junk = junk

    def __call__(self, call: Call):
        if call.path.endswith("/getUpdates") and call.path.startswith(f"/bot{TOKEN}/"):
            return 200, {}, {"ok": True, "result": self.junk}
        return super().__call__(call)


@pytest.mark.parametrize("junk", [[], [{}], [{"update_id": True}], [{"update_id": 5}], [{"update_id": 10**30}]],
                         ids=["empty", "no id", "id true", "the same old update", "an id past 64 bits"])
def test_polling_a_server_that_does_not_hold_the_poll_does_not_spin(tmp_path, junk):
    api = ImpatientBotAPI(junk)
    double = PlatformDouble(api).start()
    llm, llm_url = start_fake_llm(tmp_path, {"default": [{"content": "hi"}]})
    settings = {"ongrid_telegram": {"api_base_url": double.url, "users": {"42": "carol"}, "poll_timeout_s": 25}}
    daemon, _url = start_serve(tmp_path, llm_url, settings, TELEGRAM_BOT_TOKEN=TOKEN)
    try:
        double.wait_for(lambda: double.find("/getUpdates"), 30, "the first poll")
        first = len(double.find("/getUpdates"))
        time.sleep(3.0)
        polls = len(double.find("/getUpdates")) - first
        assert 1 <= polls <= 5, polls  # about one a second (it was thousands)
    finally:
        stop(daemon)
        stop(llm)
        double.stop()
