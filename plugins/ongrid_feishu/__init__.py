"""Ongrid plugin ``ongrid_feishu``: the Feishu (Lark) bridge (see :mod:`ongrid_feishu.bridge`).

Active when ``plugins.settings.ongrid_feishu`` is present and the app id,
app secret and verification token variables are set (``app_id_env`` →
``FEISHU_APP_ID``, ``app_secret_env`` → ``FEISHU_APP_SECRET``,
``verification_token_env`` → ``FEISHU_VERIFICATION_TOKEN``; ``encrypt_key_env``
→ ``FEISHU_ENCRYPT_KEY`` is optional); otherwise it registers nothing and
logs ``bridge_inactive`` once.  Registers ``POST /api/channels/feishu/events``
with ``auth="none"``.
"""

from __future__ import annotations

from typing import Any

from ongrid_feishu.bridge import DEFAULT_API, ROUTE, FeishuBridge, log
from ongridd.plugins.api import BridgeSettings, PluginContext, hookimpl, say_active

PLUGIN_NAME = "ongrid_feishu"


def make_bridge(context: PluginContext) -> FeishuBridge | None:
    if PLUGIN_NAME not in context.config.plugins.settings:
        context.inactive("not configured: no plugins.settings.ongrid_feishu (add it and set FEISHU_APP_ID, "
                         "FEISHU_APP_SECRET, FEISHU_VERIFICATION_TOKEN and FEISHU_ENCRYPT_KEY)")
        return None
    app_id = context.secret("app_id_env", "FEISHU_APP_ID")
    app_secret = context.secret("app_secret_env", "FEISHU_APP_SECRET")
    vtoken = context.secret("verification_token_env", "FEISHU_VERIFICATION_TOKEN")
    if not (app_id and app_secret and vtoken):
        missing = [context.secret_variable(key, default) for key, default, value in (
            ("app_id_env", "FEISHU_APP_ID", app_id), ("app_secret_env", "FEISHU_APP_SECRET", app_secret),
            ("verification_token_env", "FEISHU_VERIFICATION_TOKEN", vtoken)) if not value]
        context.inactive(f"{', '.join(missing)} not set")
        return None
    encrypt_key = context.secret("encrypt_key_env", "FEISHU_ENCRYPT_KEY")
    if not encrypt_key:
        # without the key Feishu signs nothing: only the static verification token in the body is checked
        hint = (f"{context.secret_variable('encrypt_key_env', 'FEISHU_ENCRYPT_KEY')} not set: Feishu signs "
                "nothing without the app's Encrypt Key, so anyone holding the verification token can forge or "
                "replay events")
        log.warning("feishu_no_encrypt_key", hint=hint)
        context.warn(hint)
    settings = BridgeSettings.parse(context.settings, default_api=DEFAULT_API, allowed_key="chats",
                                    default_interval_s=1.0)
    return FeishuBridge(context=context, settings=settings, app_id=app_id, app_secret=app_secret,
                        verification_token=vtoken, encrypt_key=encrypt_key)


@hookimpl
def ongrid_register_routes(register: Any, context: PluginContext) -> None:
    bridge = make_bridge(context)
    if bridge is not None:
        register("POST", ROUTE, bridge.handle, auth="none")
        say_active(PLUGIN_NAME, route=f"POST {ROUTE}")
