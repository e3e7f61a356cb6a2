"""The Feishu (Lark) bridge: event subscription in, IM v1 messages out.

Inbound (``POST /api/channels/feishu/events``, ``auth="none"``), in order:
with an encrypt key, a request carrying ``X-Lark-Signature`` must match
(:func:`ongrid_feishu.crypto.signature_ok`, timestamp within 5 minutes) and
an ``{"encrypt": …}`` body is decrypted; without an encrypt key an
encrypted body is refused.  Then the verification token (``token`` of a
``url_verification``, ``header.token`` of a 2.0 event) must match, in
constant time.  Only a ``url_verification`` may come unsigned when an
encrypt key is set (Feishu does not sign the challenge); any failure is
401 and nothing starts.  ``im.message.receive_v1`` events are claimed by
``header.event_id`` (10 minutes, in the database) and answered at once.

Handled: text messages from users (``sender_type: user``) in allowed
chats: every direct message (``chat_type: p2p``), and a group message only
when its ``mentions`` name the bot's own ``open_id`` (``GET /bot/v3/info``,
asked once and kept; while it cannot be learnt no group message is
answered).  The bot's mention key is removed from the text, another
person's becomes ``@name``; ``stop`` stops the running turn.
Thread: ``feishu:<chat_id>/<root message id>``.  Outbound:
``tenant_access_token`` (``/auth/v3/tenant_access_token/internal``, cached
until shortly before it expires), replies to the root message
(``POST /im/v1/messages/{root}/reply``) as ``post`` messages, edits with
``PUT /im/v1/messages/{id}``; split at 30,000 characters.
"""

from __future__ import annotations

import hmac
import json
import re
import time
from typing import Any

import trio

from ongrid_feishu.crypto import decrypt, signature_ok
from ongrid_feishu.markup import LIMIT, post_content, to_md
from ongridd.plugins.api import (
    ascii_digits,
    REFUSAL,
    BotIdentity,
    BridgeSettings,
    PlatformError,
    PlatformHTTP,
    PluginContext,
    PluginRequest,
    PluginResponse,
    Throttle,
    get_logger,
    is_stop,
    run_bridge_turn,
    say_safely,
    stop_thread,
)

log = get_logger("ongrid_feishu")
#: the refused-request lines: at most one a second (any sender can make them)
REFUSALS = Throttle(1.0, "feishu_request_refused")

PLATFORM = "feishu"
ROUTE = "/api/channels/feishu/events"
DEFAULT_API = "https://open.feishu.cn/open-apis"
SIGNATURE_WINDOW_S = 300
MENTION_KEY_RE = re.compile(r"@_user_\d{1,4}")
ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,100}\Z")
MAX_TEXT_CHARS = 32 * 1024
MAX_NAME_CHARS = 64
TOKEN_CODES_EXPIRED = frozenset({99991661, 99991663, 99991668})


class Refused(Exception):
    """The request failed verification (answered 401)."""


class FeishuBridge:
    """Secrets: ``app_id``/``app_secret`` (the tenant token), ``verification_token``,
    ``encrypt_key`` (optional).  None of them is ever logged."""

    def __init__(self, *, context: PluginContext, settings: BridgeSettings, app_id: str, app_secret: str,
                 verification_token: str, encrypt_key: str | None):
        self.context = context
        self.settings = settings
        self._app_id, self._app_secret = app_id, app_secret
        self._vtoken, self._ekey = verification_token, encrypt_key
        self.http = PlatformHTTP(context.http, PLATFORM)
        self._tenant: tuple[str, float] | None = None
        self._token_lock = trio.Lock()
        #: the bot's own open_id (``GET /bot/v3/info``), learnt at the first group message
        self.bot = BotIdentity(fetch=self._bot_open_id, what="feishu bot open_id")

    # ---- Open API ----------------------------------------------------------------
    async def tenant_token(self) -> str:
        async with self._token_lock:
            if self._tenant and self._tenant[1] > time.monotonic():
                return self._tenant[0]
            resp = await self.http.call("POST", f"{self.settings.api_base_url}/auth/v3/tenant_access_token/internal",
                                        what="tenant_access_token", json={"app_id": self._app_id,
                                                                          "app_secret": self._app_secret})
            data = _json(resp)
            token, expire = data.get("tenant_access_token"), data.get("expire", 0)
            if data.get("code") != 0 or not isinstance(token, str) or not token:
                raise PlatformError(f"feishu tenant_access_token: code {data.get('code')!r}")
            ttl = float(expire) if isinstance(expire, (int, float)) and not isinstance(expire, bool) else 0.0
            self._tenant = (token, time.monotonic() + max(ttl - 300, 60))
            return token

    async def api(self, method: str, path: str, payload: dict[str, Any] | None, what: str,
                  key: str = "data") -> dict[str, Any]:
        """An authenticated call; the answer's ``key`` member (``data``; the
        bot info puts its answer in ``bot``) or PlatformError (an expired
        tenant token is fetched again once)."""
        for attempt in (1, 2):
            token = await self.tenant_token()
            extra: dict[str, Any] = {} if payload is None else {"json": payload}
            resp = await self.http.call(method, f"{self.settings.api_base_url}{path}", what=what,
                                        headers={"Authorization": f"Bearer {token}"}, **extra)
            data = _json(resp)
            code = data.get("code")
            if code == 0:
                out = data.get(key)
                return out if isinstance(out, dict) else {}
            if code in TOKEN_CODES_EXPIRED and attempt == 1:
                self._tenant = None
                continue
            raise PlatformError(f"feishu {what}: code {code!r} {str(data.get('msg'))[:100]}")
        raise PlatformError(f"feishu {what}: the tenant token was refused")

    async def reply(self, root_id: str, md_text: str) -> str | None:
        data = await self.api("POST", f"/im/v1/messages/{root_id}/reply",
                              {"msg_type": "post", "content": post_content(md_text)}, "reply")
        mid = data.get("message_id")
        return mid if isinstance(mid, str) else None

    async def update(self, message_id: str, md_text: str) -> None:
        await self.api("PUT", f"/im/v1/messages/{message_id}", {"msg_type": "post", "content": post_content(md_text)},
                       "update")

    async def _bot_open_id(self) -> str | None:
        """``GET /bot/v3/info``'s ``bot.open_id`` (None when it has none); PlatformError."""
        oid = (await self.api("GET", "/bot/v3/info", None, "bot info", key="bot")).get("open_id")
        return oid if isinstance(oid, str) and ID_RE.match(oid) else None

    # ---- inbound ---------------------------------------------------------------
    def open_body(self, req: PluginRequest) -> dict[str, Any]:
        """The verified, decrypted event body; Refused otherwise.  A signed request's
        signature is checked over the raw body before the body is parsed (an unverified
        body costs no parse); an unsigned one carries its verification token inside."""
        signed = req.headers.get("X-Lark-Signature")
        if self._ekey and signed is not None:
            ts = req.headers.get("X-Lark-Request-Timestamp") or ""
            nonce = req.headers.get("X-Lark-Request-Nonce") or ""
            if not ascii_digits(ts) or len(ts) > 12 or abs(time.time() - int(ts)) > SIGNATURE_WINDOW_S:
                raise Refused("stale or missing timestamp")
            if len(nonce) > 200 or not signature_ok(ts, nonce, self._ekey, req.body, signed[:200]):
                raise Refused("bad signature")
        body = req.json
        if not isinstance(body, dict):
            raise Refused("not a JSON object")
        if self._ekey:
            if "encrypt" in body:
                try:
                    body = json.loads(decrypt(body["encrypt"], self._ekey))
                except (ValueError, RecursionError):
                    raise Refused("payload does not decrypt") from None
                if not isinstance(body, dict):
                    raise Refused("decrypted payload is not an object")
            if signed is None and body.get("type") != "url_verification":
                raise Refused("unsigned event")
        elif "encrypt" in body:
            raise Refused("encrypted payload but no encrypt key configured")
        token = body.get("token") if body.get("type") == "url_verification" else _member(body, "header").get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self._vtoken.encode()):
            raise Refused("bad verification token")
        return body

    async def handle(self, req: PluginRequest) -> PluginResponse:
        try:
            body = self.open_body(req)
        except Refused as exc:
            if (fields := REFUSALS.fields(reason=str(exc))) is not None:
                log.warning("feishu_request_refused", **fields)
            return PluginResponse.error(401, "unauthorized", "verification failed")
        if body.get("type") == "url_verification":
            challenge = body.get("challenge")
            return PluginResponse(body={"challenge": challenge if isinstance(challenge, str) else ""})
        header = _member(body, "header")
        event_id = header.get("event_id")
        if not isinstance(event_id, str) or not ID_RE.match(event_id):
            return PluginResponse.error(400, "bad_request", "event without header.event_id")
        if not await self.context.chat.claim_event(PLATFORM, event_id):
            log.info("feishu_event_repeated", event_id=event_id)
            return PluginResponse(body={"ok": True})
        if header.get("event_type") == "im.message.receive_v1" and isinstance(body.get("event"), dict):
            self.dispatch(body["event"])
        return PluginResponse(body={"ok": True})

    def dispatch(self, event: dict[str, Any]) -> None:
        sender, msg = event.get("sender") or {}, event.get("message") or {}
        if not isinstance(sender, dict) or not isinstance(msg, dict) or sender.get("sender_type") != "user":
            return
        sender_id = sender.get("sender_id")
        open_id = sender_id.get("open_id") if isinstance(sender_id, dict) else None
        chat_id, message_id = msg.get("chat_id"), msg.get("message_id")
        root_id = msg.get("root_id") or message_id
        open_id, chat_id, message_id, root_id = (v if isinstance(v, str) and ID_RE.match(v) else None
                                                 for v in (open_id, chat_id, message_id, root_id))
        if open_id is None or chat_id is None or message_id is None or root_id is None:
            return
        if msg.get("message_type") != "text" or not isinstance(msg.get("content"), str):
            return
        try:
            content = json.loads(msg["content"][:MAX_TEXT_CHARS * 2])
        except (ValueError, RecursionError):
            return
        text = content.get("text") if isinstance(content, dict) else None
        if not isinstance(text, str):
            return
        if not self.settings.allows(chat_id):
            log.info("feishu_chat_not_allowed", chat=chat_id, im_user=open_id)
            return
        mentions = _mentions(msg.get("mentions"))
        group = msg.get("chat_type") != "p2p"  # group, topic group, or anything new: only when mentioned
        self.context.chat.spawn(lambda: self.answer(open_id, chat_id, root_id, text, mentions, group),
                                name="feishu message")

    async def answer(self, open_id: str, chat_id: str, root_id: str, text: str,
                     mentions: dict[str, tuple[str, str]], group: bool) -> None:
        """One user's message, after the webhook has answered: in a group,
        nothing unless it mentions the bot; then the refusal, ``stop`` or a
        turn.  ``mentions``: mention key → (open_id, name)."""
        own = await self.bot.get() if group or mentions else None
        if group and (own is None or all(oid != own for oid, _ in mentions.values())):
            log.info("feishu_not_mentioned", chat=chat_id)
            return

        def spoken(m: re.Match[str]) -> str:  # the bot's own mention goes (any, when it is not known)
            oid, name = mentions.get(m.group(0), (None, ""))
            return "" if oid is None or own is None or oid == own or not name else f"@{name}"

        text = MENTION_KEY_RE.sub(spoken, text).strip()[:MAX_TEXT_CHARS]
        if not text:
            return

        async def say(markdown: str) -> None:
            await self.reply(root_id, to_md(markdown))

        ongrid_user = self.settings.ongrid_user(open_id)
        if ongrid_user is None:
            log.info("feishu_user_refused", im_user=open_id, chat=chat_id)
            await say_safely(say, REFUSAL)
            return
        conversation = f"{chat_id}/{root_id}"
        thread = f"feishu:{conversation}"
        if is_stop(text):
            await stop_thread(self.context.chat, user=ongrid_user, thread=thread, say=say)
            return
        origin = {"platform": PLATFORM, "im_user": open_id, "conversation": conversation}

        async def post(md_text: str) -> str | None:
            return await self.reply(root_id, md_text)

        await run_bridge_turn(self.context.chat, user=ongrid_user, thread=thread, text=text,
                              locale=self.settings.locale(chat_id), origin=origin, post=post, edit=self.update,
                              render=to_md, limit=LIMIT, interval_s=self.settings.edit_interval_s)


def _mentions(raw: Any) -> dict[str, tuple[str, str]]:
    """An event's ``message.mentions`` → {key: (open_id, name)}; malformed
    entries are dropped, names cut to MAX_NAME_CHARS."""
    out: dict[str, tuple[str, str]] = {}
    for m in raw[:50] if isinstance(raw, list) else ():
        if not isinstance(m, dict) or not isinstance(m.get("key"), str) or not MENTION_KEY_RE.fullmatch(m["key"]):
            continue
        oid = m["id"].get("open_id") if isinstance(m.get("id"), dict) else None
        name = m["name"] if isinstance(m.get("name"), str) else ""
        if isinstance(oid, str) and ID_RE.match(oid):
            out[m["key"]] = (oid, " ".join(name.split())[:MAX_NAME_CHARS])
    return out


def _member(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]`` when it is an object, else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _json(resp: Any) -> dict[str, Any]:
    try:
        data = resp.json()
    except (ValueError, RecursionError):
        raise PlatformError(f"feishu: HTTP {resp.status_code}, not JSON") from None
    if not isinstance(data, dict):
        raise PlatformError(f"feishu: HTTP {resp.status_code}, unexpected answer")
    return data
