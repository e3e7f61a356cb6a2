"""System prompt composition and the per-call reminder (DESIGN.md §7).

Pure functions of their arguments: the kernel calls
:func:`compose_system_prompt` once per run and :func:`system_reminder` before
every model call (the reminder is sent as the last, user-role message and is
never persisted).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ongridd.personas.parse import RESERVED_NAMES, Persona
from ongridd.personas.skills import Skill

__all__ = [
    "CATALOG_INTRO",
    "agent_catalog",
    "compose_system_prompt",
    "critical_block",
    "first_line",
    "language_line",
    "normalize_locale",
    "system_reminder",
]

#: The line put before the catalog inside the system reminder.
CATALOG_INTRO = (
    "Specialists you can dispatch with AgentTool (subagent_type is the name in bold). "
    "A worker sees nothing of this conversation: its prompt must carry every detail it needs."
)

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
_LOCALE_RE = re.compile(r"^[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8}){0,3}$")


def first_line(text: str | None) -> str:
    """The first non-empty line of ``text``, stripped (``""`` when none)."""
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def agent_catalog(personas: Iterable[Persona]) -> str:
    """The agent catalog of §7: one markdown bullet per spawnable persona.

    ``- **<name>** — <description> When to use: <first non-empty line of
    when_to_use>``, sorted by name, without ``default`` and ``reviewer``;
    `` When to use: …`` is left out when ``when_to_use`` is empty.  Returns
    ``""`` when there is no spawnable persona.
    """
    lines = []
    for p in sorted((p for p in personas if p.name not in RESERVED_NAMES), key=lambda p: p.name):
        line = f"- **{p.name}** — {_one_line(p.description)}"
        hint = first_line(p.when_to_use)
        if hint:
            line += f" When to use: {hint}"
        lines.append(line)
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


def system_reminder(*, persona: Persona, catalog: str | None = None, locale: str | None = None,
                    extra: Sequence[str] = ()) -> str | None:
    """The ``<system-reminder>`` block the kernel sends as the last message of
    every model request (§7), or ``None`` when there is nothing to say.

    Holds, one item per line: the persona's critical reminder (in
    ``<critical-reminder>`` tags); for the coordinator (pass ``catalog``), an
    intro line and the agent catalog; the answer-language line when
    ``locale`` is a valid tag (an invalid one is left out); then every
    non-empty line of ``extra`` (e.g. budget notices).
    """
    lines: list[str] = []
    crit = critical_block(persona)
    if crit:
        lines.append(crit)
    if catalog and catalog.strip():
        lines.append(CATALOG_INTRO)
        lines.append(catalog.strip())
    if locale:
        lang = language_line(locale)
        if lang:
            lines.append(lang)
    for item in extra:
        if item and item.strip():
            lines.append(item.strip())
    if not lines:
        return None
    return "<system-reminder>\n" + "\n".join(lines) + "\n</system-reminder>"
