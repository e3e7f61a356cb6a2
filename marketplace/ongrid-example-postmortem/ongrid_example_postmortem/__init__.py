"""Ongrid marketplace example: the ``postmortem-summary`` skill.

A skill is a markdown file (frontmatter ``name`` and ``description``, body =
the prompt block).  This plugin registers its ``skills/`` folder; a persona
activates the skill with ``skills: [postmortem-summary]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ongridd.plugins.api import hookimpl

__version__ = "0.1.0"
SKILLS_DIR = Path(__file__).resolve().parent / "skills"


@hookimpl
def ongrid_register_skills(register: Any) -> None:
    register(SKILLS_DIR)
