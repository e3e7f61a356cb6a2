"""Ongrid plugin ``ongrid_telegram``: the Telegram bridge (see :mod:`ongrid_telegram.bridge`).

Active when ``plugins.settings.ongrid_telegram`` is present and the bot
token variable (``bot_token_env`` → ``TELEGRAM_BOT_TOKEN``) is set — in
webhook mode also ``webhook_secret_env`` (``TELEGRAM_WEBHOOK_SECRET``);
otherwise it registers nothing and logs ``bridge_inactive`` once.
``mode: polling`` (default) registers the ``getUpdates`` service;
``mode: webhook`` registers ``POST /api/channels/telegram/webhook``
(``auth="none"``).  ``poll_timeout_s`` (default 25) is the long-poll wait.
"""

from __future__ import annotations

from typing import Any

from ongrid_telegram.bridge import DEFAULT_API, ROUTE, TelegramBridge
from ongridd.plugins.api import BridgeSettings, PluginContext, hookimpl, say_active

PLUGIN_NAME = "ongrid_telegram"
MODES = ("polling", "webhook")


def make_bridge(context: PluginContext) -> TelegramBridge | None:
    """The bridge, or None (logged once) when it is not configured.  Each
    mode uses one hook, so one load builds one bridge."""
    if PLUGIN_NAME not in context.config.plugins.settings:
        context.inactive("not configured: no plugins.settings.ongrid_telegram (add it and set TELEGRAM_BOT_TOKEN)")
        return None
    mode = context.settings.get("mode", "polling")
    if mode not in MODES:
        raise ValueError(f"plugins.settings.ongrid_telegram.mode: expected polling or webhook, got {mode!r}")
    token = context.secret("bot_token_env", "TELEGRAM_BOT_TOKEN")
    if not token:
        context.inactive(f"{context.secret_variable('bot_token_env', 'TELEGRAM_BOT_TOKEN')} not set")
        return None
    secret = context.secret("webhook_secret_env", "TELEGRAM_WEBHOOK_SECRET") if mode == "webhook" else None
    if mode == "webhook" and not secret:
        context.inactive(f"webhook mode needs {context.secret_variable('webhook_secret_env', 'TELEGRAM_WEBHOOK_SECRET')}, "
                         "which is not set")
        return None
    timeout = context.settings.get("poll_timeout_s", 25)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (1 <= timeout <= 50):
        raise ValueError("plugins.settings.ongrid_telegram.poll_timeout_s: expected 1..50 seconds")
    settings = BridgeSettings.parse(context.settings, default_api=DEFAULT_API, allowed_key="chats",
                                    default_interval_s=1.0)
    return TelegramBridge(context=context, settings=settings, token=token, webhook_secret=secret,
                          poll_timeout_s=float(timeout))


@hookimpl
def ongrid_register_routes(register: Any, context: PluginContext) -> None:
    bridge = make_bridge(context)
    if bridge is not None and context.settings.get("mode", "polling") == "webhook":
        register("POST", ROUTE, bridge.handle_webhook, auth="none")
        say_active(PLUGIN_NAME, mode="webhook", route=f"POST {ROUTE}")


@hookimpl
def ongrid_register_services(register: Any, context: PluginContext) -> None:
    bridge = make_bridge(context)
    if bridge is not None and context.settings.get("mode", "polling") == "polling":
        register("getUpdates", bridge.poll_forever)
        say_active(PLUGIN_NAME, mode="polling", service="getUpdates")
