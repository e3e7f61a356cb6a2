"""Persona files (docs/architecture.md §5): the :class:`Persona` value and its parser.

A persona file is markdown: YAML frontmatter between a first line ``---`` and
the next line ``---``, then the body (the persona's system prompt).  The
parser is tolerant where users differ harmlessly (UTF-8 BOM, CRLF, a
comma-separated ``tools`` string) and strict about meaning: a value of the
wrong type or an unknown ``permission_mode`` skips the file with a warning;
nothing is ever coerced and nothing is raised for bad content.

Null values: a key whose unset value is empty (``when_to_use``, ``tools``,
``disallowed_tools``, ``tool_budget``, ``critical_reminder``, ``skills``,
``model``, ``metadata``) may be written with no value (``null``), which
counts as unset.  ``name``, ``description``, ``permission_mode`` and
``max_turns`` refuse ``null``.
"""

from __future__ import annotations

import difflib
import os
import unicodedata
from collections.abc import Collection, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from ongridd.personas import frontmatter as fm
from ongridd.personas.frontmatter import (FrontmatterProblem, NotJSONValue, ValueTooLarge, describe, plain, quote,
                                          where)
from ongridd.tools.spec import CONTROL_TOOL_NAMES, TOOL_NAME_RE

__all__ = [
    "CONTROL_TOOLS",
    "COORDINATOR",
    "KNOWN_KEYS",
    "PERMISSION_MODES",
    "RESERVED_NAMES",
    "REVIEWER",
    "Persona",
    "name_problem",
    "parse_persona_file",
    "parse_persona_text",
    "persona_to_text",
]

COORDINATOR = "default"
REVIEWER = "reviewer"
#: Reserved roles: the coordinator and the review gate's worker (not spawnable).
RESERVED_NAMES = frozenset({COORDINATOR, REVIEWER})
#: Tools of class ``control``: only the coordinator has them, always.
CONTROL_TOOLS = frozenset(CONTROL_TOOL_NAMES)
PERMISSION_MODES = ("read-only", "default")
#: Every top-level key of the §5 table, in table order.
KNOWN_KEYS = (
    "name",
    "description",
    "when_to_use",
    "tools",
    "disallowed_tools",
    "permission_mode",
    "max_turns",
    "tool_budget",
    "critical_reminder",
    "skills",
    "model",
    "metadata",
)
#: keys that take tools away from a persona: a key spelt close to one of these is an error, not a
#: warning (the persona would silently keep what the key was meant to remove)
NARROWING_KEYS = frozenset({"permission_mode", "disallowed_tools"})
MAX_NAME_CHARS = 128
DEFAULT_MAX_TURNS = 15
#: ``max_turns`` and ``tool_budget`` above this are refused (a typo or an
#: attack, never a plan; huge integers also break JSON readers).
MAX_COUNT = 1_000_000
#: Warnings kept per file; the rest are counted in one last warning, so a
#: file cannot make its report (or a PUT's answer) grow without bound.
MAX_WARNINGS_PER_FILE = 50


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid persona or skill name, or ``None`` if it is.

    Valid: 1..128 characters, each a letter of any script or a digit
    (``str.isalnum``), ``-`` or ``_``; combining marks (needed by scripts
    such as Devanagari or Thai) are allowed on a letter or digit.
    """
    if not name:
        return "is empty"
    if len(name) > MAX_NAME_CHARS:
        return f"is longer than {MAX_NAME_CHARS} characters"
    for i, ch in enumerate(name):
        if ch.isalnum() or ch in "-_":
            continue
        if i > 0 and unicodedata.category(ch).startswith("M") and (
                name[i - 1].isalnum() or unicodedata.category(name[i - 1]).startswith("M")):
            continue  # a combining mark on a letter
        return f"may contain only letters, digits, '-' and '_' (found {quote(ch)})"
    return None


def _check_name(_inst: Any, _attr: Any, value: str) -> None:
    if not isinstance(value, str) or name_problem(value):
        raise ValueError(f"invalid persona name {describe(value)}: "
                         f"{name_problem(value) if isinstance(value, str) else 'not a string'}")


def _check_positive(_inst: Any, attr: Any, value: int | None) -> None:
    if value is None and attr.name == "tool_budget":
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_COUNT:
        raise ValueError(f"{attr.name} must be an integer from 1 to {MAX_COUNT:,}, got {describe(value)}")


def _freeze_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(value or {}))


def _str_tuple(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(items)


@attrs.frozen(kw_only=True)
class Persona:
    """One persona (docs/architecture.md §5), immutable.

    ``tools``/``disallowed_tools``/``skills`` are tuples in file order without
    duplicates; ``metadata`` is a read-only mapping of JSON-safe values (the
    file's ``metadata`` plus unknown top-level keys); ``body`` is the system
    prompt; ``source`` the file it came from (``""`` when built in code).
    Constructing one directly with an invalid name, permission mode or limit
    raises ``ValueError`` (files go through :func:`parse_persona_text`).
    """

    name: str = attrs.field(validator=_check_name)
    description: str
    when_to_use: str | None = None
    tools: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    disallowed_tools: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    permission_mode: str = attrs.field(default="default", validator=attrs.validators.in_(PERMISSION_MODES))
    max_turns: int = attrs.field(default=DEFAULT_MAX_TURNS, validator=_check_positive)
    tool_budget: int | None = attrs.field(default=None, validator=_check_positive)
    critical_reminder: str | None = None
    skills: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    model: str | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict, converter=_freeze_mapping, hash=False)
    body: str = ""
    source: str = ""

    @property
    def read_only(self) -> bool:
        """True when ``permission_mode`` is ``read-only`` (no write/destructive tools at all)."""
        return self.permission_mode == "read-only"

    @property
    def is_coordinator(self) -> bool:
        return self.name == COORDINATOR

    @property
    def spawnable(self) -> bool:
        """True unless this is a reserved role (``default`` or ``reviewer``)."""
        return self.name not in RESERVED_NAMES

    def to_dict(self) -> dict[str, Any]:
        """Every key of the §5 table plus ``source``, JSON-ready.

        Unset optional scalars are ``None``; lists are lists; ``metadata`` is a
        plain ``dict``.  This is one item of ``ongrid agents list --json`` and
        of ``GET /api/agents``.  The body is not included.
        """
        return {
            "name": self.name,
            "description": self.description,
            "when_to_use": self.when_to_use,
            "tools": list(self.tools),
            "disallowed_tools": list(self.disallowed_tools),
            "permission_mode": self.permission_mode,
            "max_turns": self.max_turns,
            "tool_budget": self.tool_budget,
            "critical_reminder": self.critical_reminder,
            "skills": list(self.skills),
            "model": self.model,
            "metadata": plain(dict(self.metadata)),
            "source": self.source,
        }


class _Collector:
    """Warnings (kept file) and errors (skipped file) for one file.

    Keeps at most ``MAX_WARNINGS_PER_FILE`` errors and as many plain
    warnings (so a flood of harmless warnings cannot hide why a file was
    skipped) and counts the rest in one last warning.
    """

    def __init__(self, path: str, key_lines: Mapping[str, int]):
        self.path = path
        self.key_lines = key_lines
        # is_error → (line, order of arrival, message)
        self._kept: dict[bool, list[tuple[int, int, str]]] = {False: [], True: []}
        self._dropped = 0
        self.errors = 0

    @property
    def warnings(self) -> list[str]:
        """Warnings in file-line order (those without a line first)."""
        out = [msg for _, _, msg in sorted(self._kept[True] + self._kept[False])]
        if self._dropped:
            out.append(f"{self.path}: {self._dropped:,} more warnings not shown")
        return out

    def _add(self, msg: str, key: str | None, line: int | None, is_error: bool) -> None:
        if line is None and key is not None:
            line = self.key_lines.get(key)
        kept = self._kept[is_error]
        if len(kept) >= MAX_WARNINGS_PER_FILE:
            self._dropped += 1
            return
        kept.append((line or 0, len(self._kept[True]) + len(self._kept[False]), f"{where(self.path, line)}: {msg}"))

    def warn(self, msg: str, *, key: str | None = None, line: int | None = None) -> None:
        self._add(msg, key, line, False)

    def error(self, msg: str, *, key: str | None = None, line: int | None = None) -> None:
        self.errors += 1
        self._add(f"{msg}; file skipped", key, line, True)


def _opt_str(data: Mapping[str, Any], key: str, out: _Collector) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        out.error(f"'{key}' must be a string, got {describe(value)}", key=key)
        return None
    value = value.strip()
    return value or None


def _str_list(data: Mapping[str, Any], key: str, out: _Collector, item_lines: tuple[int, ...]) -> list[tuple[str, int | None]]:
    """A list of strings, or a comma-separated string (split, stripped, empties dropped).

    Returns (item, file line) pairs without duplicates.
    """
    value = data.get(key)
    key_line = out.key_lines.get(key)
    items: list[tuple[str, int | None]] = []
    if value is None:
        return items
    if isinstance(value, str):
        items = [(part.strip(), key_line) for part in value.split(",")]
    elif isinstance(value, list):
        for i, item in enumerate(value):
            line = item_lines[i] if i < len(item_lines) else key_line
            if not isinstance(item, str):
                out.error(f"'{key}' item {i + 1} must be a string, got {describe(item)}", line=line)
                continue
            items.append((item.strip(), line))
    else:
        out.error(f"'{key}' must be an array of strings or a comma-separated string, got {describe(value)}", key=key)
        return []
    seen: set[str] = set()
    result = []
    for item, line in items:
        if not item:
            continue
        if item in seen:
            out.warn(f"'{key}' lists {quote(item)} twice; the duplicate is ignored", line=line)
            continue
        seen.add(item)
        result.append((item, line))
    return result


def _positive_int(data: Mapping[str, Any], key: str, out: _Collector, *, default: int | None, nullable: bool) -> int | None:
    if key not in data:
        return default
    value = data[key]
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        out.error(f"'{key}' must be an integer > 0, got {describe(value)}", key=key)
        return default
    if value > MAX_COUNT:
        out.error(f"'{key}' must be at most {MAX_COUNT:,}, got {describe(value)}", key=key)
        return default
    return value


def _name(data: Mapping[str, Any], out: _Collector) -> str | None:
    """``name``: a YAML string (NFC-normalised, never coerced) that is a valid persona name."""
    if "name" not in data:
        out.error("missing required key 'name'")
        return None
    if not isinstance(data["name"], str):
        out.error(f"'name' must be a string, got {describe(data['name'])}", key="name")
        return None
    name = unicodedata.normalize("NFC", data["name"])
    problem = name_problem(name)
    posed = next((r for r in sorted(RESERVED_NAMES) if r != name and r.casefold() == name.casefold()), None)
    if problem:
        out.error(f"'name' {quote(name)} {problem}", key="name")
    elif posed is not None:  # a tile or a tree node reading "Reviewer" beside the real one
        out.error(f"'name' {quote(name)} is the reserved role {quote(posed)} in other letters' case; a persona "
                  "may not pose as it", key="name")
    elif (stem := _misspelt_stem(name, out.path)) is not None:
        out.warn(f"'name' {quote(name)} is nearly the file's name {quote(stem)}: is one of them misspelt? The "
                 f"persona is known by its 'name', {quote(name)}", key="name")
    return name


def _misspelt_stem(name: str, path: str) -> str | None:
    """``path``'s file name (without ``.md``) when ``name`` differs from it by what a typo
    makes: both at least 5 characters, lengths within one, 80 % alike (difflib); else None.
    A name chosen unlike its file (``磁盘专家`` in ``cjk.md``, ``specialist-disk`` in
    ``specialist-disk.local.md``) is not flagged."""
    stem = os.path.splitext(os.path.basename(path))[0]
    if stem == name or min(len(stem), len(name)) < 5 or abs(len(stem) - len(name)) > 1:
        return None
    return stem if difflib.SequenceMatcher(None, name, stem).ratio() >= 0.8 else None


def _description(data: Mapping[str, Any], out: _Collector) -> str | None:
    """``description``: a required, non-empty string (stripped; a warning when it spans lines)."""
    if "description" not in data or data["description"] is None:
        out.error("missing required key 'description'", key="description")
        return None
    if not isinstance(data["description"], str):
        out.error(f"'description' must be a string, got {describe(data['description'])}", key="description")
        return None
    if not data["description"].strip():
        out.error("'description' is empty", key="description")
        return None
    description = data["description"].strip()
    if "\n" in description:
        out.warn("'description' should be one line; the catalog joins its lines", key="description")
    return description


def _metadata(data: Mapping[str, Any], key_lines: Mapping[str, int], out: _Collector) -> dict[str, Any]:
    """``metadata`` (an object) plus every unknown top-level key, as plain bounded values."""
    metadata: dict[str, Any] = {}
    meta_value = data.get("metadata")
    if meta_value is not None and not isinstance(meta_value, Mapping):
        out.error(f"'metadata' must be an object, got {describe(meta_value)}", key="metadata")
    elif meta_value is not None:
        try:
            metadata = plain(meta_value)
        except ValueTooLarge as exc:
            out.error(f"'metadata' is too large ({exc})", key="metadata")
        except NotJSONValue as exc:
            out.error(f"'metadata' holds {exc}", key="metadata")
    for key, value in data.items():
        if isinstance(key, str) and key in KNOWN_KEYS:
            continue
        skey = str(key)
        line = key_lines.get(skey)
        if skey in metadata:
            out.warn(f"unknown key {quote(skey)} is also in 'metadata'; the metadata value is kept", line=line)
            continue
        try:
            metadata[skey] = plain(value)
        except ValueTooLarge as exc:
            out.error(f"unknown key {quote(skey)} has a value too large to keep ({exc})", line=line)
            continue
        except NotJSONValue as exc:
            out.error(f"unknown key {quote(skey)} holds {exc}", line=line)
            continue
        close = difflib.get_close_matches(skey, sorted(KNOWN_KEYS), n=1, cutoff=0.8)
        if close and close[0] in NARROWING_KEYS:
            # fail closed: a misspelt permission key would leave the persona more than it asked for
            out.error(f"unknown key {quote(skey)} (did you mean {quote(close[0])}? a misspelt {quote(close[0])} "
                      "would leave this persona every tool it lists)", line=line)
            continue
        out.warn(f"unknown key {quote(skey)} (kept under metadata){did_you_mean(skey, KNOWN_KEYS)}", line=line)
    return metadata


def _check_references(name: str | None, mode: str, tools: list[tuple[str, int | None]],
                      skills: list[tuple[str, int | None]], known_tools: Collection[str] | None,
                      known_skills: Collection[str] | None, out: _Collector) -> None:
    """Checks that keep the file: tool and skill names against what exists, control tools, the reviewer's mode."""
    for tool, line in tools:
        if not TOOL_NAME_RE.match(tool):
            hint = " (is a comma missing?)" if any(ch.isspace() for ch in tool) else ""
            out.warn(f"{quote(tool)} is not a valid tool name{hint}", line=line)
        elif known_tools is not None and tool not in known_tools and tool not in CONTROL_TOOLS:
            out.warn(f"unknown tool {quote(tool)}{did_you_mean(tool, known_tools)}", line=line)
        if tool in CONTROL_TOOLS and name is not None and name != COORDINATOR:
            out.warn(f"{quote(tool)} is a control tool: workers never get it", line=line)
    if known_skills is not None:
        for skill, line in skills:
            if skill not in known_skills:
                out.warn(f"unknown skill {quote(skill)}", line=line)
    if name == REVIEWER and mode != "read-only":
        out.warn("the reviewer should be 'permission_mode: read-only' (its write tools would need review themselves)",
                 key="permission_mode")


def _build(raw: str | bytes, path: str, known_tools: Collection[str] | None,
           known_skills: Collection[str] | None) -> tuple[Persona | None, list[str]]:
    parsed = fm.parse(raw)
    if isinstance(parsed, FrontmatterProblem):
        return None, [f"{where(path, parsed.line)}: {parsed.message}; file skipped"]
    data = parsed.data
    out = _Collector(path, parsed.key_lines)

    name = _name(data, out)
    description = _description(data, out)

    when_to_use = _opt_str(data, "when_to_use", out)
    tools = _str_list(data, "tools", out, parsed.item_lines.get("tools", ()))
    disallowed = _str_list(data, "disallowed_tools", out, parsed.item_lines.get("disallowed_tools", ()))
    skills = _str_list(data, "skills", out, parsed.item_lines.get("skills", ()))

    mode = data.get("permission_mode", "default")
    if not isinstance(mode, str) or mode not in PERMISSION_MODES:
        out.error(f"unknown permission_mode {describe(mode)} (expected 'read-only' or 'default')",
                  key="permission_mode")
        mode = "default"

    max_turns = _positive_int(data, "max_turns", out, default=DEFAULT_MAX_TURNS, nullable=False)
    tool_budget = _positive_int(data, "tool_budget", out, default=None, nullable=True)
    critical = _opt_str(data, "critical_reminder", out)
    model = _opt_str(data, "model", out)

    metadata = _metadata(data, parsed.key_lines, out)
    _check_references(name, mode, tools, skills, known_tools, known_skills, out)
    if not parsed.body:
        out.warn("the body is empty: this persona has no system prompt of its own", line=parsed.body_line)

    if out.errors or name is None or description is None or max_turns is None:  # max_turns: never None here
        return None, out.warnings
    persona = Persona(
        name=name,
        description=description,
        when_to_use=when_to_use,
        tools=tuple(t for t, _ in tools),
        disallowed_tools=tuple(t for t, _ in disallowed),
        permission_mode=mode,
        max_turns=max_turns,
        tool_budget=tool_budget,
        critical_reminder=critical,
        skills=tuple(s for s, _ in skills),
        model=model,
        metadata=metadata,
        body=parsed.body,
        source=path,
    )
    return persona, out.warnings


def did_you_mean(name: str, known: Collection[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known`` (difflib,
    cutoff 0.8), or ``""``.  Bounded: ``known`` is the registered tool set."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
    return f" (did you mean {quote(close[0])}?)" if close else ""


def parse_persona_text(
    text: str | bytes,
    path: str | os.PathLike,
    *,
    known_tools: Collection[str] | None = None,
    known_skills: Collection[str] | None = None,
) -> tuple[Persona | None, list[str]]:
    """Parse a persona file's content.

    ``path`` names the file in warnings and becomes ``Persona.source``.
    ``known_tools``/``known_skills``: when given, names not in them are
    warned about (and kept); ``None`` skips that check.  Returns
    ``(persona, warnings)``; ``persona`` is ``None`` when the file cannot be
    used, and then at least one warning says why (ending ``; file skipped``).
    Every warning starts with ``path`` and, where known, ``:line``.  Never
    raises for bad content.
    """
    spath = os.fspath(path)
    try:
        return _build(text, spath, known_tools, known_skills)
    except Exception as exc:  # noqa: BLE001 — a last resort: a loader must never raise for content
        return None, [f"{spath}: cannot parse persona ({type(exc).__name__}: {quote(str(exc), 200)}); file skipped"]


def parse_persona_file(
    path: str | os.PathLike,
    *,
    known_tools: Collection[str] | None = None,
    known_skills: Collection[str] | None = None,
) -> tuple[Persona | None, list[str]]:
    """Read and parse one persona file (see :func:`parse_persona_text`).

    Unreadable, non-regular or oversized files give ``(None, [warning])``.
    """
    spath = os.fspath(path)
    raw = fm.read_file_bytes(spath)
    if isinstance(raw, FrontmatterProblem):
        return None, [f"{where(spath, raw.line)}: {raw.message}; file skipped"]
    return parse_persona_text(raw, spath, known_tools=known_tools, known_skills=known_skills)


def persona_to_text(persona: Persona) -> str:
    """Render ``persona`` as a persona file (frontmatter + body).

    Keys in §5 table order; unset optional keys and empty lists are left out;
    multi-line strings use YAML literal blocks.  Parsing the result gives the
    same persona (apart from ``source``).  Used by ``ongrid agents show`` and
    handy for writing a user agent that overrides a built-in one.
    """
    import io

    from ruamel.yaml import YAML
    from ruamel.yaml.scalarstring import LiteralScalarString

    def scalar(v: Any) -> Any:
        if isinstance(v, str) and "\n" in v:
            return LiteralScalarString(v if v.endswith("\n") else v + "\n")
        return v

    data = persona.to_dict()
    data.pop("source")
    out: dict[str, Any] = {}
    for key in KNOWN_KEYS:
        value = data[key]
        if value is None or value == [] or value == {}:
            continue
        if key == "permission_mode" and value == "default":
            continue
        if key == "max_turns" and value == DEFAULT_MAX_TURNS:
            continue
        out[key] = scalar(value)
    yaml = YAML(typ="rt", pure=True)
    yaml.default_flow_style = False
    yaml.allow_unicode = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    buf = io.StringIO()
    yaml.dump(out, buf)
    return f"---\n{buf.getvalue()}---\n{persona.body}\n"
