"""The Feishu bridge against a local double of the Open API, with a real
``ongridd serve`` whose scripted coordinator dispatches a worker running the
real ``host_du_summary``; events encrypted and signed as Feishu does."""

from __future__ import annotations

import itertools
import json
import os
import time

import httpx2
import pytest

from ongrid_feishu.crypto import decrypt, encrypt, signature
from tests.channels.doubles import Call, PlatformDouble
from tests.channels.helpers import disk_script, start_fake_llm, start_serve, stop
from tests.e2e.e2e_helpers import rows

pytestmark = pytest.mark.slow

APP_ID, APP_SECRET = "cli_a1b2c3d4e5", "app-secret-0123456789abcdef"
VTOKEN, EKEY = "vtoken-0123456789abcdef", "ekey-0123456789abcdefghij"
TENANT = "t-tenant-token-0123456789abcdef"
BOT = "ou_bot0123456789"
LONG = "Report:\n\n```\n" + "\n".join(f"/var/x{i:05d} {i} KiB <{i}>" for i in range(1800)) + "\n```\nEnd <at id=all></at>."


def open_api():
    ids = itertools.count(1)

    def respond(call: Call):
        if call.path.endswith("/auth/v3/tenant_access_token/internal"):
            ok = call.payload == {"app_id": APP_ID, "app_secret": APP_SECRET}
            return 200, {}, ({"code": 0, "tenant_access_token": TENANT, "expire": 7200} if ok
                             else {"code": 10014, "msg": "app secret invalid"})
        if call.headers.get("authorization") != f"Bearer {TENANT}":
            return 200, {}, {"code": 99991663, "msg": "tenant token invalid"}
        if call.method == "GET" and call.path.endswith("/bot/v3/info"):  # the answer is in "bot", not "data"
            return 200, {}, {"code": 0, "msg": "ok", "bot": {"activate_status": 2, "app_name": "ongrid",
                                                            "ip_white_list": [], "open_id": BOT}}
        if call.method == "POST" and call.path.endswith("/reply"):
            return 200, {}, {"code": 0, "data": {"message_id": f"om_reply{next(ids)}"}}
        if call.method == "PUT" and "/im/v1/messages/" in call.path:
            return 200, {}, {"code": 0, "data": {}}
        return 404, {}, {"code": 404, "msg": "not found"}

    return respond


def mention(key: str, open_id: str, name: str) -> dict:
    return {"key": key, "id": {"open_id": open_id, "union_id": "on_x", "user_id": ""}, "name": name,
            "tenant_key": "t1"}


BOT_MENTION = [mention("@_user_1", BOT, "Ongrid")]


def wrap(event_id: str, text: str, *, open_id: str = "ou_alice", root: str | None = None,
         message_id: str = "om_root1", chat: str = "oc_chat1", chat_type: str = "group",
         mentions: list | None = None) -> dict:
    """An ``im.message.receive_v1`` event; by default a group message that @-mentions the bot."""
    msg = {"message_id": message_id, "chat_id": chat, "chat_type": chat_type, "message_type": "text",
           "content": json.dumps({"text": f"@_user_1 {text}" if mentions is None else text}),
           "mentions": BOT_MENTION if mentions is None else mentions}
    if root:
        msg["root_id"] = root
    return {"schema": "2.0", "header": {"event_id": event_id, "event_type": "im.message.receive_v1",
                                        "token": VTOKEN, "app_id": APP_ID, "create_time": "1"},
            "event": {"sender": {"sender_id": {"open_id": open_id}, "sender_type": "user"}, "message": msg}}


def sealed(payload: dict, *, key: str = EKEY, ts: int | None = None, sign: bool = True) -> tuple[bytes, dict]:
    body = json.dumps({"encrypt": encrypt(json.dumps(payload), key, os.urandom(16))}).encode()
    headers = {"Content-Type": "application/json"}
    if sign:
        stamp, nonce = str(int(time.time()) if ts is None else ts), "n0nce"
        headers.update({"X-Lark-Request-Timestamp": stamp, "X-Lark-Request-Nonce": nonce,
                        "X-Lark-Signature": signature(stamp, nonce, key, body)})
    return body, headers


def test_crypto_round_trip_and_wrong_key():
    token = encrypt('{"a": 1}', EKEY, b"0123456789abcdef")
    assert decrypt(token, EKEY) == '{"a": 1}'
    with pytest.raises(ValueError):
        decrypt(token, "another key")
    with pytest.raises(ValueError):
        decrypt("not base64!!", EKEY)


def test_encrypted_signed_event_turn_edits_final_split_retry_forgeries(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.bin").write_bytes(b"x" * 100_000)
    double = PlatformDouble(open_api()).start()
    llm, llm_url = start_fake_llm(tmp_path, disk_script(folder, LONG))
    settings = {"ongrid_feishu": {"api_base_url": double.url + "/open-apis", "users": {"ou_alice": "erin"},
                                  "edit_interval_s": 0.2, "locales": {"oc_chat1": "zh-CN"}}}
    daemon, url = start_serve(tmp_path, llm_url, settings, FEISHU_APP_ID=APP_ID, FEISHU_APP_SECRET=APP_SECRET,
                              FEISHU_VERIFICATION_TOKEN=VTOKEN, FEISHU_ENCRYPT_KEY=EKEY)
    hook = url + "/api/channels/feishu/events"
    try:
        body, headers = sealed({"type": "url_verification", "challenge": "ch-1", "token": VTOKEN}, sign=False)
        res = httpx2.post(hook, content=body, headers=headers, timeout=10)
        assert res.status_code == 200 and res.json() == {"challenge": "ch-1"}
        body, headers = sealed({"type": "url_verification", "challenge": "ch-2", "token": "wrong"}, sign=False)
        assert httpx2.post(hook, content=body, headers=headers, timeout=10).status_code == 401

        ev = wrap("ev-1", "@_user_1 what fills the data folder? cc @_user_2",
                  mentions=[*BOT_MENTION, mention("@_user_2", "ou_bob", "Bob  Li")])
        # forged: wrong signature key, stale timestamp, unsigned event, wrong verification token
        for b, h in (sealed(ev, key="not-the-key"), sealed(ev, ts=int(time.time()) - 400), sealed(ev, sign=False),
                     sealed({**ev, "header": {**ev["header"], "token": "nope"}})):
            assert httpx2.post(hook, content=b, headers=h, timeout=10).status_code == 401
        b, h = sealed(ev)  # a timestamp of digits int() does not take (latin-1 "²"): refused, never a 500
        odd = httpx2.post(hook, content=b, timeout=10, headers=[
            *((k.encode(), v.encode()) for k, v in h.items() if k != "X-Lark-Request-Timestamp"),
            (b"X-Lark-Request-Timestamp", b"\xb2")])
        assert odd.status_code == 401, odd.text
        time.sleep(0.5)
        assert not double.calls

        double.inject("/im/v1/messages/om_reply1", 500)  # the first edit fails once, then is retried
        body, headers = sealed(ev)
        assert httpx2.post(hook, content=body, headers=headers, timeout=10).status_code == 200
        body, headers = sealed(ev)  # Feishu redelivers the same event_id
        assert httpx2.post(hook, content=body, headers=headers, timeout=10).status_code == 200

        def md(c: Call) -> str:
            return json.loads(c.payload["content"])["zh_cn"]["content"][0][0]["text"]

        double.wait_for(lambda: any(md(c).endswith("End ＜at id=all>＜/at>.") for c in double.find("/reply")),
                        120, "the final answer")
        replies = double.find("/reply")
        updates = [c for c in double.find("/im/v1/messages/om_reply1") if c.method == "PUT"]
        assert all(c.path == "/open-apis/im/v1/messages/om_root1/reply" for c in replies)
        assert "Working on it" in md(replies[0])
        texts = [md(u) for u in updates]
        assert any("Looking at the disk usage now." in t for t in texts)
        assert any("**specialist-disk**" in t and "completed" in t for t in texts)
        answer = [texts[-1]] + [md(r) for r in replies[1:]]
        assert answer[0].startswith("Report:") and len(answer) == 2
        assert all(len(a) <= 30_000 and a.count("```") % 2 == 0 for a in answer)
        assert [c.status for c in double.calls if c.status >= 500] == [500]
        db = tmp_path / "state" / "ongrid.db"
        [coord] = rows(db, "select user_id, thread_id from chat_sessions where parent_session_id is null")
        assert coord == {"user_id": "erin", "thread_id": "feishu:oc_chat1/om_root1"}
        assert len(rows(db, "select id from turn_origins")) == 1  # the redelivery started nothing
        assert {"tool_name": "host_du_summary", "status": "ok"} in rows(db, "select tool_name, status from audit_logs")
        log = (tmp_path / "daemon.log").read_text()
        assert all(s not in log for s in (APP_SECRET, VTOKEN, EKEY, TENANT))

        # an unmapped user gets the refusal under their message; nothing runs
        body, headers = sealed(wrap("ev-2", "hi", open_id="ou_mallory", message_id="om_root9"))
        assert httpx2.post(hook, content=body, headers=headers, timeout=10).status_code == 200
        refusal = double.wait_for(lambda: [c for c in double.find("/im/v1/messages/om_root9/reply")], 20, "refusal")
        assert "not mapped to an Ongrid user" in md(refusal[0])
        assert len(rows(db, "select id from turn_origins")) == 1
        # the bot's mention key is taken out of the text, another person's becomes @name
        users = rows(db, "select content from chat_messages where role = 'user' and session_id in "
                         "(select id from chat_sessions where parent_session_id is null)")
        assert users == [{"content": "what fills the data folder? cc @Bob Li"}]

        def post(event: dict) -> None:
            body, headers = sealed(event)
            assert httpx2.post(hook, content=body, headers=headers, timeout=10).status_code == 200

        # group messages that do not @-mention the bot start nothing and get no answer, not even the
        # refusal; a direct message needs no mention; the bot's open_id was asked for once
        post(wrap("ev-3", "hi all", open_id="ou_mallory", message_id="om_root10", mentions=[]))
        post(wrap("ev-4", "@_user_1 look", message_id="om_root11", mentions=[mention("@_user_1", "ou_bob", "Bob")]))
        post(wrap("ev-5", "what fills it", message_id="om_root12", chat_type="topic_group", mentions=[]))
        post(wrap("ev-6", "stop", message_id="om_root13", chat_type="p2p", mentions=[]))
        double.wait_for(lambda: double.find("/im/v1/messages/om_root13/reply"), 20, "the direct message's answer")
        # a direct message that @s the bot anyway: the mention goes, "stop" is a stop
        post(wrap("ev-7", "stop", message_id="om_root14", chat_type="p2p"))
        stop_reply = double.wait_for(lambda: double.find("/im/v1/messages/om_root14/reply"), 20, "its answer")
        assert "Nothing is running" in md(stop_reply[0])
        assert not any(double.find(f"/im/v1/messages/om_root1{i}/reply") for i in range(3))
        assert len(rows(db, "select id from turn_origins")) == 1
        assert len(double.find("/bot/v3/info")) == 1
    finally:
        stop(daemon)
        stop(llm)
        double.stop()


def test_a_signed_request_is_verified_before_its_body_is_parsed(monkeypatch):
    # the signature covers the raw body: a forged one is refused without a parse (a 1 MiB array of
    # numbers took 65-80 ms of the event loop to parse before its 401)
    import types

    from ongrid_feishu.bridge import FeishuBridge, Refused

    from ongridd.plugins import api

    parsed = []
    real = api.jsontext.loads
    monkeypatch.setattr(api.jsontext, "loads", lambda raw: parsed.append(len(raw)) or real(raw))
    context = types.SimpleNamespace(http=None)
    monkeypatch.setattr("ongrid_feishu.bridge.PlatformHTTP", lambda *a: None)
    bridge = FeishuBridge(context=context, settings=None, app_id="a", app_secret="s", verification_token="vt-0123456789",
                          encrypt_key="ek-0123456789abcdef")
    body = b"[" + b",".join([b"1.0"] * 1000) + b"]"
    ts = str(int(time.time()))
    headers = {"X-Lark-Signature": "0" * 64, "X-Lark-Request-Timestamp": ts, "X-Lark-Request-Nonce": "n"}
    forged = api.PluginRequest(method="POST", path="/api/channels/feishu/events", headers=headers, query={}, user="",
                               body=body)
    with pytest.raises(Refused, match="bad signature"):
        bridge.open_body(forged)
    assert parsed == []
    headers["X-Lark-Signature"] = signature(ts, "n", "ek-0123456789abcdef", body)
    signed = api.PluginRequest(method="POST", path="/api/channels/feishu/events", headers=headers, query={}, user="",
                               body=body)
    with pytest.raises(Refused, match="not a JSON object"):  # verified, then parsed: a list, not an event
        bridge.open_body(signed)
    assert parsed == [len(body)]
