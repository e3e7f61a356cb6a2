"""System prompt composition and the per-call reminder (docs/architecture.md §7).

Pure functions of their arguments (the host's time zone aside): the runtime
calls :func:`compose_system_prompt` once per run and the kernel calls a
closure over :func:`system_reminder` before every model call, so its time
line is the time of that call (the reminder is sent as the last, user-role
message and is never persisted).  The layout, with one full request, is in
``docs/prompts.md``:

- the system prompt: base, persona body, critical reminder, (coordinator)
  the agent catalog of :func:`catalog_line` items within
  ``CATALOG_BUDGET_CHARS``, then the skills;
- the reminder: the UTC time and the host's time zone, the critical
  reminder, and for the coordinator the valid ``subagent_type`` names, the
  host inventory (:func:`config_inventory`) and the configured backends
  (:func:`config_backends`), then the answer language and notices.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from ongridd.logs import get_logger

from ongridd.personas.parse import RESERVED_NAMES, Persona
from ongridd.personas.skills import Skill

log = get_logger(__name__)

__all__ = [
    "CATALOG_BUDGET_CHARS",
    "CATALOG_INTRO",
    "WHEN_TO_USE_MAX_CHARS",
    "agent_catalog",
    "backends_line",
    "catalog_line",
    "config_backends",
    "config_inventory",
    "cut_at_space",
    "host_time_zone",
    "inventory_line",
    "time_line",
    "compose_system_prompt",
    "critical_block",
    "first_line",
    "language_line",
    "normalize_locale",
    "system_reminder",
]

#: The line put before the catalog in the coordinator's system prompt.
CATALOG_INTRO = "Specialists you can dispatch with AgentTool (subagent_type is the name in bold):"
#: Said after the valid names in the coordinator's reminder.
CATALOG_INTRO_TAIL = ("The agent catalog in the system prompt says what each is for. A worker sees nothing of "
                      "this conversation: its prompt must carry every detail it needs.")

_LANGUAGES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "en": "English",
    "es": "Spanish", "fi": "Finnish", "fr": "French", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian",
    "id": "Indonesian", "it": "Italian", "ja": "Japanese", "ko": "Korean", "nb": "Norwegian", "nl": "Dutch",
    "no": "Norwegian", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sv": "Swedish",
    "th": "Thai", "tr": "Turkish", "uk": "Ukrainian", "vi": "Vietnamese", "zh": "Chinese",
}
_CHINESE_SCRIPTS = {"hans": "Simplified Chinese", "cn": "Simplified Chinese", "sg": "Simplified Chinese",
                    "hant": "Traditional Chinese", "tw": "Traditional Chinese", "hk": "Traditional Chinese",
                    "mo": "Traditional Chinese"}
_LOCALE_RE = re.compile(r"^[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8}){0,3}\Z")


def first_line(text: str | None) -> str:
    """The first non-empty line of ``text``, stripped (``""`` when none)."""
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


#: ``when_to_use`` in a catalog line is cut to this many characters (§7).
WHEN_TO_USE_MAX_CHARS = 300
#: The catalog's total budget in characters; past it personas are listed by name only.
CATALOG_BUDGET_CHARS = 16_000

_warned_ids: dict[int, Any] = {}
_WARNED_IDS_MAX = 64


def cut_at_space(text: str, limit: int = WHEN_TO_USE_MAX_CHARS) -> str:
    """``text`` unchanged when it has at most ``limit`` characters, else cut
    at the last space at or before ``limit`` (the whole prefix when it has
    no space) with ``…`` appended."""
    if len(text) <= limit:
        return text
    head = text[:limit + 1]
    space = head.rfind(" ")
    head = head[:space] if space > 0 else text[:limit]
    return head.rstrip() + "…"


def catalog_line(persona: Persona) -> str:
    """One catalog item: ``- **<name>** — <description> When to use: <guidance>``
    (``When to use`` left out when the persona has no guidance)."""
    line = f"- **{persona.name}** — {_one_line(persona.description)}"
    hint = cut_at_space(_one_line(persona.when_to_use or ""))
    if hint:
        line += f" When to use: {hint}"
    return line


def _warn_once(snapshot_key: Any, message: str, **fields: Any) -> None:
    """Log ``message`` once per ``snapshot_key`` (held by identity; a small
    bounded table, so a long-lived daemon never grows it)."""
    if snapshot_key is None:
        log.warning(message, **fields)
        return
    key = id(snapshot_key)
    if _warned_ids.get(key) is snapshot_key:
        return
    if len(_warned_ids) >= _WARNED_IDS_MAX:
        _warned_ids.pop(next(iter(_warned_ids)))
    _warned_ids[key] = snapshot_key  # the reference keeps the id from being reused
    log.warning(message, **fields)


def agent_catalog(personas: Iterable[Persona], *, budget: int = CATALOG_BUDGET_CHARS,
                  snapshot_key: Any = None) -> str:
    """The agent catalog of §7: one markdown bullet per spawnable persona.

    Items (see :func:`catalog_line`) sorted by name, without ``default``
    and ``reviewer``; the guidance is the whole ``when_to_use`` with its
    lines joined by spaces, cut by :func:`cut_at_space` at 300 characters.
    When the next full item would take the catalog past ``budget``
    characters, the remaining personas are listed as ``- **<name>**`` while
    they fit, then ``… and N more`` for the rest; a warning is logged once
    per ``snapshot_key`` (pass the registry snapshot; ``None`` logs every
    time).  Returns ``""`` when there is no spawnable persona.
    """
    ordered = sorted((p for p in personas if p.name not in RESERVED_NAMES), key=lambda p: p.name)
    lines: list[str] = []
    used = 0
    short_from: int | None = None
    for i, p in enumerate(ordered):
        sep = 1 if lines else 0
        line = ""
        if short_from is None:
            line = catalog_line(p)
            after = len(ordered) - i - 1
            reserve = len(f"\n… and {after} more") if after else 0  # room for the tail, should it come
            if used + sep + len(line) + reserve > budget:
                short_from = i
        if short_from is not None:
            line = f"- **{p.name}**"
            after = len(ordered) - i - 1
            reserve = len(f"\n… and {after} more") if after else 0
            if used + sep + len(line) + reserve > budget:
                rest = len(ordered) - i
                tail = f"… and {rest} more"
                while lines and used + 1 + len(tail) > budget:  # the last full item may have used the room
                    dropped = lines.pop()
                    used -= len(dropped) + (1 if lines else 0)
                    rest += 1
                    tail = f"… and {rest} more"
                short_from = min(short_from, len(lines))
                lines.append(tail)
                break
        lines.append(line)
        used += sep + len(line)
    if short_from is not None:
        _warn_once(snapshot_key, "agent_catalog_over_budget", budget=budget, personas=len(ordered),
                   full_entries=short_from)
    return "\n".join(lines)


def critical_block(persona: Persona) -> str:
    """``<critical-reminder>…</critical-reminder>`` or ``""`` when the persona has none."""
    text = (persona.critical_reminder or "").strip()
    return f"<critical-reminder>{text}</critical-reminder>" if text else ""


def compose_system_prompt(*, base: str, persona: Persona, catalog: str | None = None,
                          skills: Sequence[Skill] = ()) -> str:
    """The system prompt of one run (§7).

    Parts, in order, joined by a blank line, empty parts skipped: ``base``
    (config ``prompt.base``); the persona body; the critical reminder block;
    ``catalog`` (pass it for the coordinator only, see :func:`agent_catalog`);
    then for each skill the line ``[能力: <name>]`` followed by its body.
    Surrounding whitespace of each part is trimmed.
    """
    parts = [base or "", persona.body or "", critical_block(persona), catalog or ""]
    for skill in skills:
        body = (skill.body or "").strip()
        parts.append(f"[能力: {skill.name}]\n{body}" if body else f"[能力: {skill.name}]")
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


def normalize_locale(locale: str | None) -> str | None:
    """A locale tag such as ``fr``, ``zh-CN`` or ``pt_BR`` with ``_`` → ``-``;
    ``None`` for anything that is not a plausible tag (it comes from clients
    and must not smuggle text into a prompt)."""
    if not isinstance(locale, str):
        return None
    locale = locale.strip()
    if not _LOCALE_RE.match(locale):
        return None
    return locale.replace("_", "-")


def language_line(locale: str) -> str | None:
    """``Answer in French (locale fr).`` for a valid tag, else ``None``."""
    tag = normalize_locale(locale)
    if tag is None:
        return None
    parts = tag.lower().split("-")
    lang = _LANGUAGES.get(parts[0])
    if parts[0] == "zh":
        for sub in parts[1:]:
            lang = _CHINESE_SCRIPTS.get(sub, lang)
    if lang:
        return f"Answer in {lang} (locale {tag}), whatever language the tools and workers use."
    return f"Answer in the language of locale {tag}, whatever language the tools and workers use."


#: hosts listed in the coordinator's reminder before ``… and N more``
REMINDER_MAX_HOSTS = 100
#: label pairs shown per host, and the characters kept of each key and value
REMINDER_MAX_LABELS = 12
_LABEL_MAX_CHARS = 64
BACKENDS = ("prometheus", "loki", "tempo", "topology")


#: how long :func:`host_time_zone` reuses its answer while ``TZ`` is unchanged (an offset
#: change, daylight saving time or a new ``/etc/localtime``, shows within this)
TIME_ZONE_KEPT_S = 10.0
_time_zone_kept: tuple[float, str | None, str] = (float("-inf"), None, "")


def host_time_zone() -> str:
    """The daemon host's time zone as ``<name> (UTC±HH:MM)``: the IANA name
    from ``TZ`` or the ``/etc/localtime`` link when there is one, else the
    abbreviation Python reports; never raises.  Kept for up to
    :data:`TIME_ZONE_KEPT_S` seconds while ``TZ`` is unchanged (every turn
    asks; the answer costs a ``readlink`` and a local-time conversion)."""
    global _time_zone_kept
    import os

    at, tz, name = _time_zone_kept
    now = time.monotonic()
    if tz == os.environ.get("TZ") and 0 <= now - at < TIME_ZONE_KEPT_S:
        return name
    name = _host_time_zone()
    _time_zone_kept = (now, os.environ.get("TZ"), name)
    return name


def _host_time_zone() -> str:
    import os

    local = datetime.now(timezone.utc).astimezone()
    name = ""
    tz_env = os.environ.get("TZ", "").lstrip(":")
    if "zoneinfo/" in tz_env:  # TZ=:/usr/share/zoneinfo/Europe/Paris
        tz_env = tz_env.split("zoneinfo/", 1)[1]
    if tz_env and not tz_env.startswith("/") and re.fullmatch(r"[A-Za-z0-9_+\-/]{1,64}", tz_env):
        name = tz_env
    else:
        try:
            target = os.readlink("/etc/localtime")
            if "zoneinfo/" in target:
                name = target.split("zoneinfo/", 1)[1][:64]
        except OSError:
            pass
    name = name or (local.tzname() or "UTC")
    return f"{name} ({format_offset(local.utcoffset())})"


def format_offset(offset: Any) -> str:
    """``UTC+01:00`` for a ``timedelta`` (``UTC+00:00`` for ``None``)."""
    seconds = int(offset.total_seconds()) if offset is not None else 0
    sign = "+" if seconds >= 0 else "-"
    seconds = abs(seconds)
    return f"UTC{sign}{seconds // 3600:02d}:{seconds % 3600 // 60:02d}"


def time_line(now: datetime, tz_name: str) -> str:
    """``Current time: 2026-12-01T10:22:47Z (UTC). This host's time zone: …``.

    ``now``: an aware datetime (a naive one is taken as UTC); shown in UTC
    to the second."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    stamp = now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (f"Current time: {stamp} (UTC). This host's time zone: {tz_name}. "
            "Give times and query windows in UTC.")


def _clip(value: Any) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= _LABEL_MAX_CHARS else text[:_LABEL_MAX_CHARS - 1] + "…"


def inventory_line(hosts: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """``Hosts (name: labels): local; db-2: env=prod, role=db`` — at most
    REMINDER_MAX_HOSTS hosts (then ``… and N more``), labels sorted by key,
    at most REMINDER_MAX_LABELS per host, keys and values clipped."""
    items = []
    for name, labels in list(hosts)[:REMINDER_MAX_HOSTS]:
        pairs = sorted((labels or {}).items())[:REMINDER_MAX_LABELS]
        shown = ", ".join(f"{_clip(k)}={_clip(v)}" for k, v in pairs)
        items.append(f"{_clip(name)}: {shown}" if shown else _clip(name))
    more = len(hosts) - REMINDER_MAX_HOSTS
    if more > 0:
        items.append(f"… and {more} more")
    return "Hosts (name: labels): " + ("; ".join(items) if items else "none configured")


def backends_line(backends: Mapping[str, bool]) -> str:
    """``Backends configured: prometheus: yes, loki: no, tempo: no, topology: no. …``"""
    shown = ", ".join(f"{name}: {'yes' if backends.get(name) else 'no'}" for name in BACKENDS)
    return (f"Backends configured: {shown}. Never dispatch a specialist to query a backend that is "
            "not configured; say it is not configured instead.")


def config_inventory(config: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """``[(name, labels)]`` of the configured hosts, ``local`` first (read
    defensively: a config without ``hosts`` gives just ``local``)."""
    out: list[tuple[str, Mapping[str, Any]]] = [("local", {})]
    for host in getattr(config, "hosts", ()) or ():
        name = getattr(host, "name", None)
        if isinstance(name, str) and name and name != "local":
            labels = getattr(host, "labels", None)
            out.append((name, dict(labels) if isinstance(labels, Mapping) else {}))
    return out


def config_backends(config: Any) -> dict[str, bool]:
    """Which backends ``config`` configures: ``prometheus.url``, ``loki.url``,
    ``tempo.url`` set, ``topology.files`` non-empty.  Missing sections count
    as not configured."""
    def url(section: str) -> bool:
        value = getattr(getattr(config, section, None), "url", None)
        return isinstance(value, str) and bool(value.strip())

    files = getattr(getattr(config, "topology", None), "files", None)
    return {"prometheus": url("prometheus"), "loki": url("loki"), "tempo": url("tempo"),
            "topology": bool(files) and not isinstance(files, str | bytes)}


def system_reminder(*, persona: Persona, now: datetime | None = None, tz_name: str | None = None,
                    subagent_types: Sequence[str] | None = None,
                    inventory: Sequence[tuple[str, Mapping[str, Any]]] | None = None,
                    backends: Mapping[str, bool] | None = None, locale: str | None = None,
                    extra: Sequence[str] = ()) -> str | None:
    """The ``<system-reminder>`` block the kernel sends as the last message of
    every model request (§7), or ``None`` when there is nothing to say.

    Lines, in order: the time line (when ``now`` is given; ``tz_name``
    defaults to :func:`host_time_zone`); the persona's critical reminder (in
    ``<critical-reminder>`` tags); for the coordinator, the valid
    ``subagent_type`` names (``subagent_types``; the catalog itself is in
    the system prompt), the host inventory (``inventory``, see
    :func:`inventory_line`) and the configured backends (``backends``, see
    :func:`backends_line`) — each only when passed; the answer-language
    line when ``locale`` is a valid tag (an invalid one is left out); then
    every non-empty line of ``extra`` (e.g. budget notices).
    """
    render = reminder_renderer(persona=persona, tz_name=tz_name or (host_time_zone() if now is not None else ""),
                               subagent_types=subagent_types, inventory=inventory, backends=backends,
                               locale=locale, extra=extra)
    return render(now)


def reminder_renderer(*, persona: Persona, tz_name: str,
                      subagent_types: Sequence[str] | None = None,
                      inventory: Sequence[tuple[str, Mapping[str, Any]]] | None = None,
                      backends: Mapping[str, bool] | None = None, locale: str | None = None,
                      extra: Sequence[str] = ()) -> Callable[[datetime | None], str | None]:
    """:func:`system_reminder` split in two: every line but the time line is
    composed here, once; the returned ``render(now)`` adds the time line for
    ``now`` (none when ``now`` is None) and returns the same text
    :func:`system_reminder` would (``None`` when there is nothing to say).
    A run's reminder is rendered on every model call, and only its time line
    changes between them."""
    lines: list[str] = []
    crit = critical_block(persona)
    if crit:
        lines.append(crit)
    if subagent_types is not None:
        names = ", ".join(subagent_types) if subagent_types else "(none: no specialist is loaded)"
        lines.append(f"Valid subagent_type values for AgentTool: {names}. {CATALOG_INTRO_TAIL}")
    if inventory is not None:
        lines.append(inventory_line(inventory))
    if backends is not None:
        lines.append(backends_line(backends))
    if locale:
        lang = language_line(locale)
        if lang:
            lines.append(lang)
    for item in extra:
        if item and item.strip():
            lines.append(item.strip())
    rest = "".join("\n" + line for line in lines)
    fixed = "<system-reminder>" + rest + "\n</system-reminder>" if lines else None

    def render(now: datetime | None) -> str | None:
        if now is None:
            return fixed
        return "<system-reminder>\n" + time_line(now, tz_name) + rest + "\n</system-reminder>"

    return render
