"""Validating a freshly installed plugin against a full registry build.

:func:`check_new_plugin` looks at a :class:`~ongridd.plugins.build.BuildResult`
built with the new plugin's folder and says what is wrong with the plugin:

* it must have loaded (``ok``) — not failed to import, raised in a hook,
  registered something invalid, or clashed by name with another plugin;
* every persona and skill file it registered must lie inside its folder and
  parse (a file that would be skipped fails the install), must not take a
  reserved role (``default``, ``reviewer``), and must not replace a
  built-in persona or another plugin's persona or skill;
* every redirect stub it registered must point at a persona that exists.

The marketplace runs this twice: first in a separate interpreter
(``python -m ongridd.marketplace.validate``, JSON on stdin and stdout) on
the staged package, so a broken package never reaches the daemon's module
cache, then in the daemon on the build that is about to be swapped in.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import attrs
import cattrs

from ongridd.personas.parse import RESERVED_NAMES, parse_persona_file
from ongridd.personas.registry import markdown_files
from ongridd.personas.skills import parse_skill_file
from ongridd.tools.spec import CONTROL_TOOL_NAMES

__all__ = ["PluginCheck", "check_new_plugin", "config_to_json", "main"]


@attrs.frozen(kw_only=True)
class PluginCheck:
    """``problems``: why the plugin cannot be installed (empty: it can).
    ``warnings``: non-fatal remarks about its files.  ``plugins``: its
    plugin (entry point) names.  ``registered``: what it registered, as in
    ``ongrid plugins list`` (kind → names or paths)."""

    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()
    registered: dict[str, list[str]] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"problems": list(self.problems), "warnings": list(self.warnings), "plugins": list(self.plugins),
                "registered": self.registered}


def _resolved(p: str | Path) -> Path:
    return Path(os.path.abspath(os.fspath(p)))


def _inside(path: Path, folder: Path) -> bool:
    return _resolved(path).is_relative_to(folder)


def _files(paths: list[str], warnings: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        out.extend(markdown_files(Path(p), warnings))
    return out


def _names(paths: list[Path], parse: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for path in paths:
        obj, _ = parse(path)
        if obj is not None:
            out.setdefault(obj.name, str(path))
    return out


def check_new_plugin(result: Any, plugin_dir: Path) -> PluginCheck:
    """What is wrong with the plugin(s) loaded from ``plugin_dir`` in ``result``.

    ``result``: a BuildResult whose build included ``plugin_dir``.  Never
    raises for the plugin's faults; they are in ``problems``.
    """
    folder = _resolved(plugin_dir)
    contributions = result.contributions
    registries = result.registries
    reports = [r for r in contributions.report if r.location and _resolved(r.location) == folder]
    problems: list[str] = []
    warnings: list[str] = []
    if not reports:
        return PluginCheck(problems=(f"no plugin was loaded from {folder}",))
    for r in reports:
        if not r.ok:
            problems.append(f"plugin {r.name}: {r.error}")
    ok_reports = [r for r in reports if r.ok]
    registered: dict[str, list[str]] = {}
    for r in ok_reports:
        for kind, names in r.registered.items():
            registered.setdefault(kind, []).extend(names)
    mine_personas = registered.get("personas", [])
    mine_skills = registered.get("skills", [])
    for kind, paths in (("persona", mine_personas), ("skill", mine_skills)):
        for p in paths:
            if not _inside(Path(p), folder):
                problems.append(f"{kind} path {p} lies outside the package folder {folder}; "
                                "a marketplace plugin may only register its own files")
    persona_files = _files(mine_personas, warnings)
    skill_files = _files(mine_skills, warnings)
    for kind, paths, files in (("persona", mine_personas, persona_files), ("skill", mine_skills, skill_files)):
        if paths and not files:
            problems.append(f"the {kind} paths it registered hold no .md file: {', '.join(paths)}")

    snapshot = registries.agents.snapshot()
    known_tools = set(registries.tools) | set(CONTROL_TOOL_NAMES)
    known_skills = set(registries.skills.names())
    other_persona_files = [p for p in _files([str(x) for x in contributions.persona_paths], [])
                           if not _inside(p, folder)]
    other_personas = _names(other_persona_files, parse_persona_file)
    other_skill_files = [p for p in _files([str(x) for x in contributions.skill_paths], [])
                         if not _inside(p, folder)]
    other_skills = _names(other_skill_files, parse_skill_file)

    seen: dict[str, str] = {}
    for path in persona_files:
        persona, file_warnings = parse_persona_file(path, known_tools=known_tools, known_skills=known_skills)
        if persona is None:
            problems.append("persona file rejected: " + "; ".join(file_warnings))
            continue
        warnings.extend(file_warnings)
        name = persona.name
        if name in seen:
            problems.append(f"{path}: persona {name!r} is defined twice in the package (also in {seen[name]})")
            continue
        seen[name] = str(path)
        if name in RESERVED_NAMES:
            problems.append(f"{path}: a plugin cannot provide the reserved persona {name!r}")
        elif registries.agents.builtin(name) is not None:
            problems.append(f"{path}: persona {name!r} would replace the built-in persona of that name "
                            "(only a user agent may override a built-in)")
        elif name in other_personas:
            problems.append(f"{path}: persona {name!r} is already provided by {other_personas[name]}")
        else:
            live = snapshot.get(name)
            if live is not None and not _inside(Path(live.source or "/"), folder):
                warnings.append(f"{path}: persona {name!r} is overridden by the user agent {live.source}")
    seen_skills: dict[str, str] = {}
    for path in skill_files:
        skill, file_warnings = parse_skill_file(path)
        if skill is None:
            problems.append("skill file rejected: " + "; ".join(file_warnings))
            continue
        warnings.extend(file_warnings)
        if skill.name in seen_skills:
            problems.append(f"{path}: skill {skill.name!r} is defined twice in the package "
                            f"(also in {seen_skills[skill.name]})")
        elif skill.name in other_skills:
            problems.append(f"{path}: skill {skill.name!r} is already provided by {other_skills[skill.name]}")
        seen_skills[skill.name] = str(path)

    names = {r.name for r in ok_reports}
    for stub in contributions.stubs:
        if stub.plugin in names and stub.persona not in snapshot:
            problems.append(f"redirect stub {stub.tool!r} points at persona {stub.persona!r}, which does not exist")
    return PluginCheck(problems=tuple(problems), warnings=tuple(warnings),
                       plugins=tuple(r.name for r in reports), registered=registered)


# ---- the separate interpreter -------------------------------------------------------


def config_to_json(config: Any) -> dict[str, Any]:
    """The configuration as plain data for the validating interpreter.

    The database URL is left out (it may hold a password, and validation
    opens no database)."""
    data = cattrs.Converter().unstructure(config)
    data.pop("source", None)
    data["database"] = {"url": None}
    return data


def _run(request: dict[str, Any]) -> dict[str, Any]:
    from ongridd.config import structure
    from ongridd.plugins.build import RegistryBuilder

    config = structure(request["config"])
    builder = RegistryBuilder(config=config)
    result = builder.build_sync(extra_paths=[Path(p) for p in request["extra_paths"]])
    return check_new_plugin(result, Path(request["plugin_dir"])).to_json()


def main() -> int:
    """``python -m ongridd.marketplace.validate``: a request on stdin
    (``{"config": {...}, "extra_paths": [...], "plugin_dir": "..."}``), the
    :class:`PluginCheck` as JSON on stdout.  Anything the plugin prints goes
    to stderr.  Exit 0 when the check ran (whatever it found)."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # a plugin's prints (even from C) must not corrupt the answer
    sys.stdout = sys.stderr
    try:
        request = json.load(sys.stdin)
        answer = _run(request)
    except Exception as exc:  # noqa: BLE001 - report it as a problem, never a bare traceback
        answer = {"problems": [f"validation failed: {type(exc).__name__}: {exc}"], "warnings": [],
                  "plugins": [], "registered": {}}
    out.write(json.dumps(answer, ensure_ascii=False))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
