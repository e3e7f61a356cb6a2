"""Skills: markdown files whose body is a prompt block a persona can switch on.

A skill file has the same shape as a persona file: YAML frontmatter with
``name`` and ``description`` (both required strings), then the body, which
is the skill's prompt.  A persona's ``skills:`` list activates skills by name;
:func:`compose_system_prompt <ongridd.personas.prompt.compose_system_prompt>`
adds each as a line ``[能力: <name>]`` followed by its body.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ongridd.personas import frontmatter as fm
from ongridd.personas.frontmatter import FrontmatterProblem, quote, where, yaml_type
from ongridd.personas.parse import Persona, name_problem
from ongridd.personas.registry import FileRegistry, LoadReport

__all__ = ["Skill", "SkillRegistry", "active_skills", "parse_skill_file", "parse_skill_text"]

_SKILL_KEYS = ("name", "description")
_MAX_UNKNOWN_KEY_WARNINGS = 50


@attrs.frozen
class Skill:
    """One skill: ``Skill(name, description, body, source)``.

    ``body`` is its prompt, ``source`` the file it came from (``""`` when
    built in code).
    """

    name: str
    description: str
    body: str
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "source": self.source}


def _build(raw: str | bytes, path: str) -> tuple[Skill | None, list[str]]:
    parsed = fm.parse(raw)
    if isinstance(parsed, FrontmatterProblem):
        return None, [f"{where(path, parsed.line)}: {parsed.message}; file skipped"]
    data = parsed.data
    warnings: list[str] = []
    failed = False

    def at(key: str) -> str:
        return where(path, parsed.key_lines.get(key))

    values: dict[str, str] = {}
    for key in _SKILL_KEYS:
        value = data.get(key)
        if value is None:
            warnings.append(f"{at(key)}: missing required key {key!r}; file skipped")
            failed = True
        elif not isinstance(value, str):
            warnings.append(f"{at(key)}: {key!r} must be a string, got {yaml_type(value)}; file skipped")
            failed = True
        elif not value.strip():
            warnings.append(f"{at(key)}: {key!r} is empty; file skipped")
            failed = True
        else:
            values[key] = value.strip()
    if "name" in values:
        values["name"] = unicodedata.normalize("NFC", values["name"])
        problem = name_problem(values["name"])
        if problem:
            warnings.append(f"{at('name')}: 'name' {quote(values['name'])} {problem}; file skipped")
            failed = True
    unknown = [key for key in data if key not in _SKILL_KEYS]
    for key in unknown[:_MAX_UNKNOWN_KEY_WARNINGS]:
        warnings.append(f"{where(path, parsed.key_lines.get(str(key)))}: unknown key {quote(str(key))} (ignored)")
    if len(unknown) > _MAX_UNKNOWN_KEY_WARNINGS:
        warnings.append(f"{path}: {len(unknown) - _MAX_UNKNOWN_KEY_WARNINGS:,} more unknown keys (ignored)")
    if not parsed.body:
        warnings.append(f"{where(path, parsed.body_line)}: the body is empty: this skill adds no prompt")
    if failed:
        return None, warnings
    return Skill(name=values["name"], description=values["description"], body=parsed.body, source=path), warnings


def parse_skill_text(text: str | bytes, path: str | os.PathLike) -> tuple[Skill | None, list[str]]:
    """Parse a skill file's content → ``(skill | None, warnings)``; never raises for bad content."""
    spath = os.fspath(path)
    try:
        return _build(text, spath)
    except Exception as exc:  # noqa: BLE001 — last resort, as for personas
        return None, [f"{spath}: cannot parse skill ({type(exc).__name__}: {quote(str(exc), 200)}); file skipped"]


def parse_skill_file(path: str | os.PathLike) -> tuple[Skill | None, list[str]]:
    """Read and parse one skill file → ``(skill | None, warnings)``; never raises."""
    spath = os.fspath(path)
    raw = fm.read_file_bytes(spath)
    if isinstance(raw, FrontmatterProblem):
        return None, [f"{where(spath, raw.line)}: {raw.message}; file skipped"]
    return parse_skill_text(raw, spath)


class SkillRegistry(FileRegistry[Skill]):
    """Skills by name, with the snapshot semantics of :class:`AgentRegistry`.

    ``load(roots)``/``reload(roots)`` read every ``**/*.md`` below each root
    (or the root itself when it is a file); a later root overrides an earlier
    one by name; duplicates inside one root warn and the first in sorted path
    order wins; a reload keeps what a now-broken file produced last time.
    """

    kind = "skill"

    def _parse_text(self, raw: bytes, path: str, **options: Any) -> tuple[Skill | None, list[str]]:
        return parse_skill_text(raw, path)

    def load(self, roots: Sequence[Path]) -> LoadReport:
        """Load every skill from scratch and swap the new snapshot in."""
        return self._swap_in([Path(r) for r in roots], keep_last=False, options={})

    def reload(self, roots: Sequence[Path]) -> LoadReport:
        """Load again; a file that now fails keeps its last skill (by path), with a warning."""
        return self._swap_in([Path(r) for r in roots], keep_last=True, options={})

    def replace(self, skill: Skill) -> None:
        """Insert or replace ``skill`` by name in the live registry."""
        if not isinstance(skill, Skill):
            raise TypeError(f"replace() needs a Skill, got {type(skill).__name__}")
        self._replace(skill)

    def remove(self, name: str) -> bool:
        """Remove the skill ``name``; True when it was there."""

        def fn(items: dict[str, Skill], _by_path: dict[str, Skill]) -> bool:
            return items.pop(name, None) is not None

        return self._edit(fn)


def active_skills(persona: Persona, skills: Mapping[str, Skill]) -> tuple[list[Skill], list[str]]:
    """The skills ``persona.skills`` names, in its order, from a skill snapshot.

    Returns ``(found, missing names)``; the caller warns about missing ones.
    """
    found: list[Skill] = []
    missing: list[str] = []
    for name in persona.skills:
        skill = skills.get(name)
        if skill is None:
            missing.append(name)
        else:
            found.append(skill)
    return found, missing
