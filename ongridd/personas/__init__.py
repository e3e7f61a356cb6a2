"""The persona layer: persona and skill files, their registries, and the
system prompt composition (docs/architecture.md §5, §6, §7).

Public API::

    Persona, parse_persona_text, parse_persona_file          # ongridd.personas.parse
    LoadReport, AgentRegistry, builtin_agents_dir            # ongridd.personas.registry
    Skill, parse_skill_file, SkillRegistry, active_skills    # ongridd.personas.skills
    compose_system_prompt, agent_catalog, system_reminder    # ongridd.personas.prompt
"""

from __future__ import annotations

from ongridd.personas.parse import (
    CONTROL_TOOLS,
    COORDINATOR,
    KNOWN_KEYS,
    PERMISSION_MODES,
    RESERVED_NAMES,
    REVIEWER,
    Persona,
    name_problem,
    parse_persona_file,
    parse_persona_text,
    persona_to_text,
)
from ongridd.personas.prompt import (
    agent_catalog,
    compose_system_prompt,
    first_line,
    language_line,
    normalize_locale,
    system_reminder,
)
from ongridd.personas.registry import AgentRegistry, LoadReport, builtin_agents_dir
from ongridd.personas.skills import (
    Skill,
    SkillRegistry,
    active_skills,
    parse_skill_file,
    parse_skill_text,
)

__all__ = [
    "CONTROL_TOOLS",
    "COORDINATOR",
    "KNOWN_KEYS",
    "PERMISSION_MODES",
    "RESERVED_NAMES",
    "REVIEWER",
    "AgentRegistry",
    "LoadReport",
    "Persona",
    "Skill",
    "SkillRegistry",
    "active_skills",
    "agent_catalog",
    "builtin_agents_dir",
    "compose_system_prompt",
    "first_line",
    "language_line",
    "name_problem",
    "normalize_locale",
    "parse_persona_file",
    "parse_persona_text",
    "parse_skill_file",
    "parse_skill_text",
    "persona_to_text",
    "system_reminder",
]
