"""Ongrid plugin ``ongrid_slack``: the Slack bridge (see :mod:`ongrid_slack.bridge`).

Active when ``plugins.settings.ongrid_slack`` is present and both secrets
are set (``bot_token_env`` → ``SLACK_BOT_TOKEN``, ``signing_secret_env`` →
``SLACK_SIGNING_SECRET`` by default); otherwise it registers nothing, says why
(``ongrid plugins list``) and logs ``bridge_inactive`` once.  Registers ``POST /api/channels/slack/events``
with ``auth="none"`` (the Slack signature is the authentication).
"""

from __future__ import annotations

from typing import Any

from ongrid_slack.bridge import DEFAULT_API, ROUTE, SlackBridge
from ongridd.plugins.api import BridgeSettings, PluginContext, hookimpl, say_active

PLUGIN_NAME = "ongrid_slack"


def make_bridge(context: PluginContext) -> SlackBridge | None:
    """The bridge, or None (logged once) when it is not configured."""
    if PLUGIN_NAME not in context.config.plugins.settings:
        context.inactive("not configured: no plugins.settings.ongrid_slack (add it and set SLACK_BOT_TOKEN and "
                         "SLACK_SIGNING_SECRET)")
        return None
    token = context.secret("bot_token_env", "SLACK_BOT_TOKEN")
    secret = context.secret("signing_secret_env", "SLACK_SIGNING_SECRET")
    if not token or not secret:
        missing = [context.secret_variable(key, default) for key, default, value in (
            ("bot_token_env", "SLACK_BOT_TOKEN", token), ("signing_secret_env", "SLACK_SIGNING_SECRET", secret))
            if not value]
        context.inactive(f"{' and '.join(missing)} not set")
        return None
    settings = BridgeSettings.parse(context.settings, default_api=DEFAULT_API, allowed_key="channels",
                                    default_interval_s=1.2)
    return SlackBridge(context=context, settings=settings, bot_token=token, signing_secret=secret)


@hookimpl
def ongrid_register_routes(register: Any, context: PluginContext) -> None:
    bridge = make_bridge(context)
    if bridge is not None:
        register("POST", ROUTE, bridge.handle, auth="none")
        say_active(PLUGIN_NAME, route=f"POST {ROUTE}")
