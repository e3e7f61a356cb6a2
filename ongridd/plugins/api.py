"""The public plugin API: everything a plugin may import from Ongrid.

A plugin is a module (or object) with functions decorated by ``hookimpl``.
See docs/plugins.md for a guide with a minimal plugin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from ongridd import jsontext
from ongridd.auditargs import AuditCommand, audit_records
from ongridd.config import Config, HostConfig, read_secret, read_yaml_file
from ongridd.credfilter import REDACTED_NOTE, redact_credentials
from ongridd.errors import ConfigError, OngridError, StoreError, ToolError, ToolTimeout
from ongridd.logs import StructuredLogger, Throttle, get_logger
from ongridd.plugins.bridgekit import (
    REFUSAL,
    BotIdentity,
    BridgeSettings,
    MarkupStyle,
    MessageOutlet,
    PlatformError,
    PlatformHTTP,
    Progress,
    heading_text,
    is_stop,
    say_active,
    say_once,
    inline_spans,
    markdown_blocks,
    relay_turn,
    run_bridge_turn,
    say_safely,
    split_rendered,
    stop_thread,
    split_text,
)
from ongridd.plugins.chat import ChatAPI, ChatTurn, Origin
from ongridd.plugins.hookspecs import hookimpl
from ongridd.plugins.httpjson import HttpAnswer, get_json
from ongridd.plugins.settings import numeric_settings
from ongridd.secretset import (
    FILE_SCAN_BYTES,
    MIN_PIECE_CHARS,
    bytes_hold_secret,
    file_holds_secret,
    holds_any_secret,
    redact,
    scrubbed_env,
)
from ongridd.timeparse import format_duration, iso_utc, parse_duration, parse_time
from ongridd.unicodetext import ascii_digits
from ongridd.tools.classify import call_key, classify_off_thread
from ongridd.tools.spec import Approval, Classification, Outcome, Proposal, Tool, ToolCallContext
from ongridd.yamlbounds import FRONTMATTER_LIMITS, yaml_loader

__all__ = [
    "hookimpl",
    "Tool",
    "ToolCallContext",
    "Proposal",
    "Outcome",
    "Classification",
    "Approval",
    "call_key",
    "classify_off_thread",
    "OngridError",
    "ToolError",
    "ToolTimeout",
    "StoreError",
    "ConfigError",
    "HostConfig",
    "StructuredLogger",
    "load_front_matter",
    "PluginContext",
    "PluginRequest",
    "PluginResponse",
    "PluginStore",
    "scrubbed_env",
    "redact",
    "redact_credentials",
    "file_holds_secret",
    "holds_any_secret",
    "bytes_hold_secret",
    "FILE_SCAN_BYTES",
    "MIN_PIECE_CHARS",
    "audit_records",
    "AuditCommand",
    "ascii_digits",
    "REDACTED_NOTE",
    "ChatAPI",
    "ChatTurn",
    "Origin",
    "get_logger",
    "Throttle",
    "PlatformError",
    "PlatformHTTP",
    "BotIdentity",
    "Progress",
    "heading_text",
    "inline_spans",
    "markdown_blocks",
    "relay_turn",
    "split_rendered",
    "split_text",
    "REFUSAL",
    "BridgeSettings",
    "is_stop",
    "say_once",
    "say_active",
    "MessageOutlet",
    "MarkupStyle",
    "run_bridge_turn",
    "say_safely",
    "stop_thread",
    "parse_time",
    "parse_duration",
    "read_yaml_file",
    "HttpAnswer",
    "get_json",
    "numeric_settings",
    "iso_utc",
    "format_duration",
    "database_file",
]


def database_file(config: Config) -> str | None:
    """The absolute path of the daemon's SQLite database file (``config.database_url``; a
    ``file:`` URI included), or None when the database is not a SQLite file.  Never raises."""
    from ongridd.store.engine import sqlite_file

    return sqlite_file(config.database_url)


def load_front_matter(text: str) -> Any:
    """The YAML document ``text`` (a file's front matter, without its ``---``
    lines) parsed with the front-matter bounds: alias bombs, recursive aliases
    and deep nesting are refused.  Raises ``ruamel.yaml.YAMLError`` (with
    ``problem_mark`` counted from 0 in ``text``), ``ValueError`` or
    ``RecursionError`` for text that is not acceptable YAML."""
    return yaml_loader("safe", FRONTMATTER_LIMITS).load(text)


class PluginStore(Protocol):
    """The narrow store API plugins get (incidents and change events only).

    All methods are async (they run the database call in a worker thread)
    and raise :class:`ongridd.errors.StoreError` when the database fails.
    Incident dicts have keys ``id, fingerprint, alertname, status, severity,
    labels, annotations, starts_at, ends_at, updated_at`` (times ISO 8601 UTC).
    Change-event dicts: ``id, kind, subject, actor, detail, created_at,
    occurred_at, recorded_by`` (``recorded_by``: who reported a change made
    outside Ongrid, None for Ongrid's own); lists are newest ``occurred_at`` first.
    """

    async def upsert_incident(self, *, fingerprint: str, alertname: str, status: str, severity: str | None,
                              labels: Mapping[str, Any], annotations: Mapping[str, Any],
                              starts_at: str | None, ends_at: str | None) -> dict[str, Any]: ...

    async def list_incidents(self, *, status: str | None = None, severity: str | None = None,
                             since: str | None = None, alertname: str | None = None,
                             limit: int = 50) -> list[dict[str, Any]]: ...

    async def get_incident(self, incident_id: str) -> dict[str, Any] | None: ...

    async def set_incident_status(self, incident_id: str, status: str) -> dict[str, Any] | None: ...

    async def record_change_event(self, *, kind: str, subject: str, actor: str,
                                  detail: Mapping[str, Any], occurred_at: str | None = None,
                                  recorded_by: str | None = None) -> dict[str, Any]: ...

    async def list_change_events(self, *, kind: str | None = None, since: str | None = None,
                                 until: str | None = None, limit: int = 50,
                                 subject: str | None = None) -> list[dict[str, Any]]: ...


@attrs.frozen(kw_only=True)
class PluginContext:
    """What a plugin may use.

    ``config``: the whole configuration (read-only).  ``settings``: this
    plugin's own mapping (``plugins.settings.<name>``).  ``hosts``: the host
    inventory (``local`` always first).  ``http``: a shared ``httpx2.AsyncClient``
    (Trio-compatible) or ``None`` before the daemon starts.  ``store``: a
    :class:`PluginStore` or ``None`` when no database is open (e.g. CLI
    listing).  ``plugin_name``: the plugin's registered name.  ``chat``: a
    :class:`ChatAPI` (start turns, read their frames, stop them; for
    channel bridges) or ``None`` outside the daemon.  Secrets:
    :meth:`secret`.  A plugin that starts programs gives them
    :func:`scrubbed_env` (never the daemon's own environment).
    """

    config: Config
    plugin_name: str
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    hosts: tuple[HostConfig, ...] = ()
    http: Any = None
    store: PluginStore | None = None
    chat: Any = None
    #: why the plugin registered nothing, in the order it said so (:meth:`inactive`)
    inactive_reasons: list[str] = attrs.field(factory=list)
    #: what the plugin's registrations still need before they work (:meth:`unconfigured`)
    unconfigured_reasons: list[str] = attrs.field(factory=list)
    #: what is weaker than it should be in how the plugin was configured (:meth:`warn`)
    warnings: list[str] = attrs.field(factory=list)

    def inactive(self, reason: str) -> None:
        """Say why this plugin registers nothing with the configuration it was given (a bridge
        whose settings or secrets are missing).  ``ongrid plugins list`` and
        ``GET /api/plugins`` show the last reason (field ``inactive``); ``bridge_inactive`` is
        logged once per process and reason."""
        self.inactive_reasons.append(reason)
        say_once(self.plugin_name, reason)

    def unconfigured(self, reason: str) -> None:
        """Say what this plugin's registrations need before they work with the configuration it
        was given (a query tool whose server URL is not set).  They stay registered and answer
        with the same reason when called; ``ongrid plugins list`` and ``GET /api/plugins`` show
        the last reason (field ``unconfigured``), so the gap is seen before a turn runs into it."""
        self.unconfigured_reasons.append(reason)

    def warn(self, warning: str) -> None:
        """Say what is weaker than it should be in how this plugin was configured, though it works
        (a bridge whose platform signs nothing without a key that was not given).  ``ongrid plugins
        list`` shows it ("ok, with a warning") and ``GET /api/plugins`` gives the warnings joined
        (field ``warning``); the plugin logs its own line."""
        self.warnings.append(warning)

    def secret(self, key: str, default_env: str | None = None) -> str | None:
        """The secret held in the environment variable named by this plugin's
        setting ``key`` (a key ending in ``_env``, e.g. ``bot_token_env:
        TELEGRAM_TOKEN``), or None when the setting or the variable is unset.

        The daemon reads every such variable at start-up, removes it from its
        environment (children never inherit it) and redacts its value from
        tool results, stored messages, model requests and logs; this is how
        a plugin still gets the value.  Raises ValueError for a key that does
        not end in ``_env`` (only those are treated as secrets).

        ``default_env``: the variable to read when the setting is absent (a
        bridge's documented default such as ``SLACK_BOT_TOKEN``); a value
        found that way is taken out of the environment and redacted like
        the others (:func:`ongridd.plugins.secrets.adopt_secret`).
        """
        if not key.endswith("_env"):
            raise ValueError(f"setting {key!r}: secrets are named by settings ending in _env")
        name = self.settings.get(key)
        if name is None and default_env:
            from ongridd.plugins.secrets import adopt_secret

            return adopt_secret(default_env)
        if not isinstance(name, str) or not name:
            return None
        return read_secret(name)

    def secret_variable(self, key: str, default_env: str) -> str:
        """The name of the environment variable :meth:`secret` reads for ``key`` (for
        messages: ``TELEGRAM_BOT_TOKEN is not set``)."""
        name = self.settings.get(key)
        return name if isinstance(name, str) and name else default_env

    def host(self, name: str | None) -> HostConfig:
        """The host called ``name`` (``None``/``"local"`` → the local host).

        Raises ToolError listing the known hosts.
        """
        name = name or "local"
        for h in self.hosts:
            if h.name == name:
                return h
        known = ", ".join(h.name for h in self.hosts)
        raise ToolError(f"unknown host {name!r}; known hosts: {known}")


#: ``PluginRequest(json=...)`` not given: the body is parsed when ``json`` is first read
_UNPARSED: Any = object()


def _body_json(raw: bytes) -> Any:
    """``raw`` as JSON, or None when it is empty or not JSON (not UTF-8, not JSON, absurd
    nesting, a number JSON does not have such as ``NaN``)."""
    try:
        return jsontext.loads_or_none(raw)
    except jsontext.NonFiniteNumber:
        return None


@attrs.frozen(kw_only=True)
class PluginRequest:
    """An HTTP request to a plugin route. ``json``: the parsed body or None.
    ``body``: the raw body bytes (what a route with ``auth="none"`` verifies
    a signature over).  ``user``: the authenticated user, ``""`` on an
    ``auth="none"`` route.  ``headers``: a case-insensitive mapping.

    On an ``auth="none"`` route the body is parsed only when ``json`` is first
    read, so a route that verifies its sender first never spends time on an
    unverified body (a 1 MiB array of numbers takes about 0.1 s); such a body
    that is not JSON, or holds ``NaN``, ``Infinity`` or ``1e999``, reads as None."""

    method: str
    path: str
    headers: Mapping[str, str]
    query: Mapping[str, str]
    user: str
    body: bytes = b""
    _json: Any = attrs.field(default=_UNPARSED, alias="json")

    @property
    def json(self) -> Any:
        """The parsed body or None (parsed here, once, when not given at construction)."""
        if self._json is _UNPARSED:
            object.__setattr__(self, "_json", _body_json(self.body))  # a cache: the request stays as it came
        return self._json


@attrs.frozen(kw_only=True)
class PluginResponse:
    """``body``: JSON-serialisable, or ``str`` / ``bytes`` sent as is with
    ``content_type`` (default ``application/json`` for JSON bodies)."""

    status: int = 200
    body: Any = None
    content_type: str | None = None

    @classmethod
    def error(cls, status: int, code: str, message: str, **extra: Any) -> PluginResponse:
        """An error answer in the daemon's shape: ``{"error": {"code", "message", …extra}}``."""
        return cls(status=status, body={"error": {"code": code, "message": message, **extra}})
