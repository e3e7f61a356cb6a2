"""The Telegram bridge: Bot API ``getUpdates`` (long polling, a daemon
service) or a webhook in; ``sendMessage`` / ``editMessageText`` out.

Polling (``mode: polling``, default; no public URL needed): one loop asks
``getUpdates`` with ``offset`` = last ``update_id`` + 1 and ``timeout`` =
``poll_timeout_s``; when the API is unreachable or fails it backs off (1 s
doubling to 30 s), logs the outage once and its end once, and goes on —
it never ends the daemon.  An answer with nothing new in it (empty, or only
malformed or already handled updates) sooner than ``MIN_EMPTY_POLL_S`` (a
server or proxy that does not hold the long poll) is followed by a wait for
the rest of that second, so the loop never spins.  Webhook (``mode: webhook``,
``POST /api/channels/telegram/webhook``, ``auth="none"``): the
``X-Telegram-Bot-Api-Secret-Token`` header must equal the configured
secret (constant-time compare) or 401 and nothing starts.

Either way every ``update_id`` is claimed once in the database (10
minutes), so a redelivered update never starts a second turn.  Handled:
``message`` with ``text`` from a human (``from.is_bot`` false) in an
allowed chat: every message of a private chat, and in a group only one
addressed to the bot — its ``entities`` mention ``@<bot username>``
(``mention``, ``bot_command`` such as ``/stop@bot``, ``text_mention``) or
it replies to one of the bot's messages.  The bot's identity comes from
``getMe``, asked once and kept; while it cannot be learnt no group message
is answered.  ``@<bot username>`` is removed from the text.  ``stop`` /
``/stop`` stops the running turn.  Thread names:
``telegram:<chat id>`` or ``telegram:<chat id>/<message_thread_id>``
(forum topics).  Outbound HTML (``parse_mode: HTML``), split at 4,096.
Logs never carry the bot URL (it holds the token).
"""

from __future__ import annotations

import hmac
import json
import re
from typing import Any

import trio

from ongrid_telegram.markup import LIMIT, to_html, visible_length
from ongridd.plugins.api import (
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

log = get_logger("ongrid_telegram")
#: the refused-request lines: at most one a second (any sender can make them)
REFUSALS = Throttle(1.0, "telegram_request_refused")

PLATFORM = "telegram"
ROUTE = "/api/channels/telegram/webhook"
DEFAULT_API = "https://api.telegram.org"
MAX_TEXT_CHARS = 32 * 1024
MAX_BACKOFF_S = 30.0
#: the least time between two polls whose answer held no update (the Bot API holds an empty poll
#: for ``timeout`` seconds; one that answers at once would otherwise be asked again at once)
MIN_EMPTY_POLL_S = 1.0
MAX_UPDATES = 100
MAX_ENTITIES = 100
USERNAME_RE = re.compile(r"^[A-Za-z0-9_]{1,64}\Z")


def _retry_after(resp: Any) -> float | None:
    try:
        value = resp.json().get("parameters", {}).get("retry_after")
    except (ValueError, AttributeError, RecursionError):
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


#: the largest ``update_id`` taken (the Bot API's ids are positive 32-bit numbers; a signed 64-bit
#: bound leaves room and keeps a 400-digit number from reaching the store)
MAX_UPDATE_ID = 2**63 - 1


def _update_id(update: Any) -> bool:
    """Whether ``update`` is an object with an integer ``update_id`` from 0 to
    :data:`MAX_UPDATE_ID` (a JSON ``true`` is no id)."""
    if not isinstance(update, dict):
        return False
    uid = update.get("update_id")
    return isinstance(uid, int) and not isinstance(uid, bool) and 0 <= uid <= MAX_UPDATE_ID

class TelegramBridge:
    """``token``: the bot token (never logged); ``webhook_secret``: the
    webhook header value (webhook mode); ``poll_timeout_s``: long-poll seconds."""

    def __init__(self, *, context: PluginContext, settings: BridgeSettings, token: str,
                 webhook_secret: str | None, poll_timeout_s: float):
        self.context = context
        self.settings = settings
        self._token = token
        self._secret = webhook_secret
        self.poll_timeout_s = poll_timeout_s
        self.http = PlatformHTTP(context.http, PLATFORM, retry_after=_retry_after)
        self.offset: int | None = None
        #: the bot's own (user id, username) from ``getMe``, learnt at the first group message
        self.me = BotIdentity(fetch=self._get_me, what="telegram getMe")

    # ---- Bot API ---------------------------------------------------------------
    async def api(self, method: str, payload: dict[str, Any], **kwargs: Any) -> Any:
        """``POST {api_base_url}/bot<token>/<method>``; ``result`` or PlatformError."""
        resp = await self.http.call("POST", f"{self.settings.api_base_url}/bot{self._token}/{method}", what=method,
                                    headers={"Content-Type": "application/json"},
                                    content=json.dumps(payload).encode(), **kwargs)
        try:
            data = resp.json()
        except (ValueError, RecursionError):
            raise PlatformError(f"telegram {method}: HTTP {resp.status_code}, not JSON") from None
        if not isinstance(data, dict) or not data.get("ok"):
            desc = str(data.get("description") if isinstance(data, dict) else "")[:200]
            raise PlatformError(f"telegram {method}: {desc or f'HTTP {resp.status_code}'}")
        return data.get("result")

    async def send(self, chat_id: int, thread_id: int | None, html_text: str,
                   reply_to: int | None = None) -> int | None:
        payload: dict[str, Any] = {"chat_id": chat_id, "text": html_text, "parse_mode": "HTML",
                                   "link_preview_options": {"is_disabled": True}}
        if thread_id is not None:
            payload["message_thread_id"] = thread_id
        if reply_to is not None:
            payload["reply_parameters"] = {"message_id": reply_to, "allow_sending_without_reply": True}
        result = await self.api("sendMessage", payload)
        mid = result.get("message_id") if isinstance(result, dict) else None
        return mid if isinstance(mid, int) else None

    async def edit(self, chat_id: int, message_id: int, html_text: str) -> None:
        try:
            await self.api("editMessageText", {"chat_id": chat_id, "message_id": message_id, "text": html_text,
                                               "parse_mode": "HTML", "link_preview_options": {"is_disabled": True}})
        except PlatformError as exc:
            if "message is not modified" not in str(exc):
                raise

    async def _get_me(self) -> tuple[int, str] | None:
        """``getMe``'s (id, username) (None when it lacks one); PlatformError."""
        me = await self.api("getMe", {})
        uid, name = (me.get("id"), me.get("username")) if isinstance(me, dict) else (None, None)
        if isinstance(uid, int) and isinstance(name, str) and USERNAME_RE.match(name):
            return uid, name
        return None

    # ---- inbound ---------------------------------------------------------------
    async def poll_forever(self) -> None:
        """The long-polling service (see the module doc); runs until cancelled."""
        backoff = 1.0
        down_since: float | None = None
        while True:
            payload: dict[str, Any] = {"timeout": int(self.poll_timeout_s), "allowed_updates": ["message"],
                                       "limit": MAX_UPDATES}
            if self.offset is not None:
                payload["offset"] = self.offset
            asked = trio.current_time()
            try:
                updates = await self.api("getUpdates", payload, attempts=1, timeout_s=self.poll_timeout_s + 15)
            except PlatformError as exc:
                if down_since is None:
                    down_since = trio.current_time()
                    log.warning("telegram_poll_failed", error=str(exc), retry_in_s=backoff)
                await trio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            if down_since is not None:
                log.info("telegram_poll_recovered", down_s=round(trio.current_time() - down_since, 1))
                down_since = None
            backoff = 1.0
            before = self.offset
            for update in updates if isinstance(updates, list) else []:
                if not _update_id(update) or (self.offset is not None and update["update_id"] < self.offset):
                    continue  # not an update, or one already handled
                self.offset = max(self.offset or 0, update["update_id"] + 1)
                try:
                    await self.on_update(update)
                except Exception:
                    log.exception("telegram_update_failed", update_id=update["update_id"])
            if self.offset == before:  # nothing new (empty, or only junk or old updates): never ask again at once
                await trio.sleep_until(asked + MIN_EMPTY_POLL_S)  # returns at once when the poll was held

    async def handle_webhook(self, req: PluginRequest) -> PluginResponse:
        given = req.headers.get("X-Telegram-Bot-Api-Secret-Token") or ""
        if not self._secret or not hmac.compare_digest(given.encode(), self._secret.encode()):
            if (fields := REFUSALS.fields(reason="bad secret token")) is not None:
                log.warning("telegram_request_refused", **fields)
            return PluginResponse.error(401, "unauthorized", "invalid secret token")
        update = req.json
        if not _update_id(update):
            return PluginResponse.error(400, "bad_request", "expected an Update object")
        await self.on_update(update)
        return PluginResponse(body={"ok": True})

    async def on_update(self, update: dict[str, Any]) -> None:
        """Claim the update id, then route its message (never raises for bad input)."""
        if not await self.context.chat.claim_event(PLATFORM, str(update["update_id"])):
            log.info("telegram_update_repeated", update_id=update["update_id"])
            return
        msg = update.get("message")
        if not isinstance(msg, dict):
            return
        chat, sender, text = msg.get("chat"), msg.get("from"), msg.get("text")
        if not isinstance(chat, dict) or not isinstance(sender, dict) or not isinstance(text, str):
            return
        chat_id, user_id, message_id = (v if isinstance(v, int) and not isinstance(v, bool) else None
                                        for v in (chat.get("id"), sender.get("id"), msg.get("message_id")))
        if chat_id is None or user_id is None or message_id is None:
            return
        if sender.get("is_bot"):
            return
        thread_id = msg.get("message_thread_id") if msg.get("is_topic_message") is True else None  # forum topics
        thread_id = thread_id if isinstance(thread_id, int) and not isinstance(thread_id, bool) else None
        if not self.settings.allows(str(chat_id)):
            log.info("telegram_chat_not_allowed", chat=chat_id, im_user=user_id)
            return
        group = chat.get("type") != "private"  # group, supergroup, or anything new: only when addressed
        self.context.chat.spawn(lambda: self.answer(msg, text, chat_id, user_id, message_id, thread_id, group),
                                name="telegram message")

    async def answer(self, msg: dict[str, Any], text: str, chat_id: int, user_id: int, message_id: int,
                     thread_id: int | None, group: bool) -> None:
        """One user's message, after it was claimed: in a group, nothing
        unless it is addressed to the bot; then the refusal, ``stop`` or a turn."""
        if group:
            me = await self.me.get()
            if me is None or not _addressed(msg, text, me):
                log.info("telegram_not_addressed", chat=chat_id)
                return
            text = re.sub(rf"@{me[1]}(?!\w)", "", text, flags=re.IGNORECASE)
        text = text.strip()[:MAX_TEXT_CHARS]
        if not text:
            return
        conversation = f"{chat_id}" + (f"/{thread_id}" if thread_id is not None else "")

        async def say(markdown: str) -> None:
            await self.send(chat_id, thread_id, to_html(markdown), reply_to=message_id)

        ongrid_user = self.settings.ongrid_user(str(user_id))
        if ongrid_user is None:
            log.info("telegram_user_refused", im_user=user_id, chat=chat_id)
            await say_safely(say, REFUSAL)
            return
        thread = f"telegram:{conversation}"
        if is_stop(text):
            await stop_thread(self.context.chat, user=ongrid_user, thread=thread, say=say)
            return
        origin = {"platform": PLATFORM, "im_user": str(user_id), "conversation": conversation}

        async def post(html_text: str) -> int | None:
            return await self.send(chat_id, thread_id, html_text, reply_to=message_id)

        async def edit(ref: int, html_text: str) -> None:
            await self.edit(chat_id, ref, html_text)

        await run_bridge_turn(self.context.chat, user=ongrid_user, thread=thread, text=text,
                              locale=self.settings.locale(str(chat_id)), origin=origin, post=post, edit=edit,
                              render=to_html, limit=LIMIT, interval_s=self.settings.edit_interval_s,
                              measure=visible_length)


def _addressed(msg: dict[str, Any], text: str, me: tuple[int, str]) -> bool:
    """Whether a group message is meant for the bot ``me`` = (user id,
    username): a ``mention`` or ``bot_command`` entity naming it, a
    ``text_mention`` of it, or a reply to one of its messages.  Entity
    offsets and lengths count UTF-16 code units, as the Bot API defines."""
    reply = msg.get("reply_to_message")
    replied = reply.get("from") if isinstance(reply, dict) else None
    if isinstance(replied, dict) and replied.get("id") == me[0]:
        return True
    entities = msg.get("entities")
    if not isinstance(entities, list):
        return False
    units = text.encode("utf-16-le")
    handle = "@" + me[1].lower()
    for entity in entities[:MAX_ENTITIES]:
        if not isinstance(entity, dict):
            continue
        kind, offset, length = entity.get("type"), entity.get("offset"), entity.get("length")
        if kind == "text_mention":
            user = entity.get("user")
            if isinstance(user, dict) and user.get("id") == me[0]:
                return True
            continue
        if kind not in ("mention", "bot_command") or not (isinstance(offset, int) and isinstance(length, int)):
            continue
        if offset < 0 or length <= 0 or length > 100:
            continue
        word = units[offset * 2:(offset + length) * 2].decode("utf-16-le", "replace").lower()
        if word == handle if kind == "mention" else word.endswith(handle):
            return True
    return False
