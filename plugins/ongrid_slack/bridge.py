"""The Slack bridge: Events API in, Web API (``chat.postMessage``,
``chat.update``, ``auth.test``) out.

Inbound (``POST /api/channels/slack/events``, ``auth="none"``): the v0
signature (HMAC-SHA256 of ``v0:<timestamp>:<raw body>`` with the signing
secret, timestamps older or newer than 5 minutes refused, constant-time
compare — ``slack_sdk``'s :class:`SignatureVerifier`) or 401 and nothing
starts; ``url_verification`` answers the challenge; ``event_callback``
answers 200 at once after claiming the ``event_id`` (a retry —
``X-Slack-Retry-Num`` — of a claimed event starts nothing) and runs the
turn in a daemon task.

Handled events: ``app_mention``; ``message`` in a DM (``channel_type: im``)
or in a thread the bridge already answers in (without a mention, which
``app_mention`` covers).  Ignored: messages with a ``subtype`` or a
``bot_id``, and the bot's own user.  ``stop`` (or ⏹) stops the thread's
running turn, as does a ⏹ (``black_square_for_stop``) reaction on the
bridge's placeholder.

Outbound: plain HTTP (the daemon's shared ``httpx2`` client, Trio-native;
``slack_sdk``'s web clients are sync or asyncio-only) through
:class:`PlatformHTTP` (429 ``Retry-After``, bounded 5xx retries).
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from typing import Any

from slack_sdk.signature import SignatureVerifier

from ongrid_slack.mrkdwn import LIMIT, to_mrkdwn
from ongridd.plugins.api import (
    ascii_digits,
    REFUSAL,
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

log = get_logger("ongrid_slack")
#: the refused-request lines: at most one a second (any sender can make them)
REFUSALS = Throttle(1.0, "slack_request_refused")

PLATFORM = "slack"
ROUTE = "/api/channels/slack/events"
DEFAULT_API = "https://slack.com/api"
STOP_REACTIONS = frozenset({"black_square_for_stop", "octagonal_sign"})
MENTION_RE = re.compile(r"<@([A-Z0-9]{1,32})>")
MAX_TEXT_CHARS = 32 * 1024
MAX_REMEMBERED = 5000
ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}\Z")
#: Slack's request signature: ``v0=`` and the HMAC-SHA256 in lowercase hex
SIGNATURE_RE = re.compile(r"v0=[0-9a-f]{64}")
_THREADS: OrderedDict[str, str] = OrderedDict()
_PLACEHOLDERS: OrderedDict[str, str] = OrderedDict()


class SlackBridge:
    """One bridge per plugin context.  ``bot_token``/``signing_secret``: the
    secrets (never logged); ``settings``: :class:`BridgeSettings`."""

    def __init__(self, *, context: PluginContext, settings: BridgeSettings, bot_token: str, signing_secret: str):
        self.context = context
        self.settings = settings
        self._token = bot_token
        self._verifier = SignatureVerifier(signing_secret)
        self.http = PlatformHTTP(context.http, PLATFORM)
        self.bot_user_id: str | None = None
        self._asking = False
        # conversations the bridge answers in → thread; placeholders → session id (kept
        # in the module: a registry rebuild makes a new bridge, the conversations stay)
        self.threads = _THREADS
        self.placeholders = _PLACEHOLDERS

    # ---- Web API ---------------------------------------------------------------
    async def api(self, method: str, payload: dict[str, Any]) -> dict[str, Any]:
        """``POST {api_base_url}/<method>``; the JSON answer (``ok`` true) or PlatformError."""
        resp = await self.http.call("POST", f"{self.settings.api_base_url}/{method}", what=method,
                                    headers={"Authorization": f"Bearer {self._token}",
                                             "Content-Type": "application/json; charset=utf-8"},
                                    content=json.dumps(payload).encode())
        try:
            data = resp.json()
        except (ValueError, RecursionError):
            raise PlatformError(f"slack {method}: HTTP {resp.status_code}, not JSON") from None
        if not isinstance(data, dict) or not data.get("ok"):
            err = data.get("error") if isinstance(data, dict) else None
            raise PlatformError(f"slack {method}: {str(err)[:100] or f'HTTP {resp.status_code}'}")
        return data

    async def post(self, channel: str, thread_ts: str, text: str) -> str | None:
        data = await self.api("chat.postMessage", {"channel": channel, "thread_ts": thread_ts, "text": text,
                                                   "unfurl_links": False, "unfurl_media": False})
        ts = data.get("ts")
        return ts if isinstance(ts, str) else None

    async def update(self, channel: str, ts: str, text: str) -> None:
        await self.api("chat.update", {"channel": channel, "ts": ts, "text": text})

    def _learn_bot_id(self, authorizations: Any) -> None:
        """The bot's user id from the event's ``authorizations`` (no API call
        in the request path); otherwise ``auth.test`` runs in the background."""
        if self.bot_user_id is not None:
            return
        if isinstance(authorizations, list) and authorizations and isinstance(authorizations[0], dict):
            uid = authorizations[0].get("user_id")
            if isinstance(uid, str) and ID_RE.match(uid):
                self.bot_user_id = uid
                return
        if not self._asking:
            self._asking = True
            self.context.chat.spawn(self._auth_test, name="slack auth.test")

    async def _auth_test(self) -> None:
        try:
            data = await self.api("auth.test", {})
            uid = data.get("user_id")
            self.bot_user_id = uid if isinstance(uid, str) and ID_RE.match(uid) else None
        except PlatformError as exc:
            log.warning("slack_auth_test_failed", error=str(exc))
        finally:
            self._asking = False

    # ---- inbound ---------------------------------------------------------------
    def verified(self, req: PluginRequest) -> bool:
        ts = req.headers.get("X-Slack-Request-Timestamp") or ""
        sig = req.headers.get("X-Slack-Signature") or ""
        if not ascii_digits(ts) or len(ts) > 12 or not SIGNATURE_RE.fullmatch(sig):
            return False  # (a non-ASCII signature made the verifier's compare raise: a 500, a traceback)
        try:
            body = req.body.decode("utf-8")  # Slack signs UTF-8 JSON; other bytes are not from Slack
        except UnicodeDecodeError:
            return False
        return self._verifier.is_valid(body=body, timestamp=ts, signature=sig)

    async def handle(self, req: PluginRequest) -> PluginResponse:
        if not self.verified(req):
            if (fields := REFUSALS.fields(reason="bad or stale signature")) is not None:
                log.warning("slack_request_refused", **fields)
            return PluginResponse.error(401, "unauthorized", "invalid signature")
        body = req.json
        if not isinstance(body, dict):
            return PluginResponse.error(400, "bad_request", "expected a JSON object")
        kind = body.get("type")
        if kind == "url_verification":
            challenge = body.get("challenge")
            return PluginResponse(body={"challenge": challenge if isinstance(challenge, str) else ""})
        if kind != "event_callback":
            return PluginResponse(body={"ok": True})
        event = body.get("event")
        event_id = body.get("event_id")
        if not isinstance(event, dict) or not isinstance(event_id, str) or not ID_RE.match(event_id):
            return PluginResponse.error(400, "bad_request", "event_callback without event or event_id")
        if not await self.context.chat.claim_event(PLATFORM, event_id):
            log.info("slack_event_repeated", event_id=event_id, retry=req.headers.get("X-Slack-Retry-Num"))
            return PluginResponse(body={"ok": True})
        self._learn_bot_id(body.get("authorizations"))
        await self.dispatch(event)
        return PluginResponse(body={"ok": True})

    async def dispatch(self, event: dict[str, Any]) -> None:
        """Route one event (never raises for the platform's input)."""
        etype = event.get("type")
        if etype == "reaction_added":
            await self._reaction(event)
            return
        if etype not in ("app_mention", "message"):
            return
        if event.get("subtype") or event.get("bot_id"):
            return
        user, channel, ts = (v if isinstance(v, str) and v else None
                             for v in (event.get("user"), event.get("channel"), event.get("ts")))
        text = event.get("text")
        if user is None or channel is None or ts is None or not isinstance(text, str):
            return
        if not (ID_RE.match(user) and ID_RE.match(channel) and ID_RE.match(ts)):
            return
        given = event.get("thread_ts")
        thread_ts = given if isinstance(given, str) else ts
        if not ID_RE.match(thread_ts):
            return
        own = self.bot_user_id  # messages of bots carry bot_id anyway; this also covers the bot's user
        if own and user == own:
            return
        conversation = f"{channel}/{thread_ts}"
        if etype == "message" and event.get("channel_type") != "im":
            # channel messages: only in threads the bridge answers in, and not
            # those that mention the bot (their app_mention event covers them)
            if conversation not in self.threads or (own and f"<@{own}>" in text):
                return
        if not self.settings.allows(channel):
            log.info("slack_channel_not_allowed", channel=channel, im_user=user)
            return
        if own is None and etype == "app_mention":  # the bot's id not learnt yet: its mention comes first
            first = MENTION_RE.search(text)
            own = first.group(1) if first else None
        text = MENTION_RE.sub(lambda m: "" if m.group(1) == own else m.group(0), text).strip()[:MAX_TEXT_CHARS]
        if not text:
            return
        ongrid_user = self.settings.ongrid_user(user)
        if ongrid_user is None:
            log.info("slack_user_refused", im_user=user, channel=channel)
            self.context.chat.spawn(self._refuse, channel, thread_ts, name="slack refusal")
            return
        thread = f"slack:{conversation}"
        if is_stop(text):
            self.context.chat.spawn(self._stop, ongrid_user, thread, channel, thread_ts, name="slack stop")
            return
        self._remember(self.threads, conversation, thread)
        origin = {"platform": PLATFORM, "im_user": user, "conversation": conversation}
        self.context.chat.spawn(self.run_turn, ongrid_user, thread, text, self.settings.locale(channel), origin,
                                channel, thread_ts, name="slack turn")

    async def _reaction(self, event: dict[str, Any]) -> None:
        item = event.get("item")
        if event.get("reaction") not in STOP_REACTIONS or not isinstance(item, dict):
            return
        channel = item.get("channel")
        if not isinstance(channel, str) or not self.settings.allows(channel):
            return  # (placeholders exist only in allowed channels: the same rule, said where it applies)
        session_id = self.placeholders.get(f"{channel}/{item.get('ts')}")
        user = event.get("user")
        ongrid_user = self.settings.ongrid_user(user) if isinstance(user, str) else None
        if session_id is None or ongrid_user is None:
            return
        # only the turn's own user stops it: another member's ⏹ (mapped to someone else) does nothing
        self.context.chat.spawn(lambda: self.context.chat.stop(session_id, user=ongrid_user),
                                name="slack stop reaction")

    def _say(self, channel: str, thread_ts: str) -> Any:
        async def say(markdown: str) -> None:
            await self.post(channel, thread_ts, to_mrkdwn(markdown))
        return say

    async def _refuse(self, channel: str, thread_ts: str) -> None:
        await say_safely(self._say(channel, thread_ts), REFUSAL)

    async def _stop(self, user: str, thread: str, channel: str, thread_ts: str) -> None:
        await stop_thread(self.context.chat, user=user, thread=thread, say=self._say(channel, thread_ts))

    @staticmethod
    def _remember(table: OrderedDict[str, str], key: str, value: str) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > MAX_REMEMBERED:
            table.popitem(last=False)

    # ---- one turn --------------------------------------------------------------
    async def run_turn(self, user: str, thread: str, text: str, locale: str | None, origin: dict,
                       channel: str, thread_ts: str) -> None:
        """Placeholder → start the turn → relay its frames into edits → final."""

        async def post(text: str) -> str | None:
            return await self.post(channel, thread_ts, text)

        async def edit(ts: str, text: str) -> None:
            await self.update(channel, ts, text)

        def remember(ts: str, session_id: str) -> None:
            self._remember(self.placeholders, f"{channel}/{ts}", session_id)

        await run_bridge_turn(self.context.chat, user=user, thread=thread, text=text, locale=locale, origin=origin,
                              post=post, edit=edit, render=to_mrkdwn, limit=LIMIT,
                              interval_s=self.settings.edit_interval_s, on_placeholder=remember)
