"""Skill files and the skill registry."""

from __future__ import annotations

from ongridd.personas import (
    Persona,
    Skill,
    SkillRegistry,
    active_skills,
    compose_system_prompt,
    parse_skill_file,
    parse_skill_text,
)


def test_sample_skill_parses(repo):
    skill, warnings = parse_skill_file(repo / "etc" / "skills" / "cite-runbooks.md")
    assert warnings == []
    assert skill.name == "cite-runbooks"
    assert skill.body.startswith("When an answer or a recommendation relies on a runbook")


def test_skill_positional_construction():
    assert Skill("a", "b", "c", "d") == Skill(name="a", description="b", body="c", source="d")


def test_bad_skills_are_skipped_with_located_warnings():
    cases = {
        "---\nname: 5\ndescription: d\n---\nb\n": "s.md:2: 'name' must be a string, got integer; file skipped",
        "---\nname: s\n---\nb\n": "s.md: missing required key 'description'; file skipped",
        "---\nname: a b\ndescription: d\n---\nb\n": "s.md:2: 'name' 'a b' may contain only letters",
        "no frontmatter": "s.md:1: missing frontmatter (file must start with ---); file skipped",
        b"---\nname: s\ndescription: caf\xe9\n---\n": "s.md:3: not valid UTF-8 (byte 0xE9 at offset 28)",
    }
    for text, expected in cases.items():
        skill, warnings = parse_skill_text(text, "s.md")
        assert skill is None
        assert any(w.startswith(expected) for w in warnings), (text, warnings)


def test_skill_unknown_key_is_ignored_with_warning():
    skill, warnings = parse_skill_text("---\nname: s\ndescription: d\nactivation: always\n---\nb\n", "s.md")
    assert skill is not None
    assert warnings == ["s.md:4: unknown key 'activation' (ignored)"]


def test_skill_registry_semantics(tmp_path, make_file):
    make_file(tmp_path / "one" / "a.md", "---\nname: alpha\ndescription: d1\n---\nA1\n")
    make_file(tmp_path / "one" / "z" / "dup.md", "---\nname: alpha\ndescription: dup\n---\nA2\n")
    make_file(tmp_path / "two" / "a.md", "---\nname: alpha\ndescription: override\n---\nA3\n")
    registry = SkillRegistry()
    report = registry.load([tmp_path / "one", tmp_path / "missing"])
    assert registry.by_name("alpha").body == "A1"
    assert (report.loaded, report.skipped) == (1, 1)
    assert "duplicate skill name 'alpha'" in report.warnings[0]
    registry.load([tmp_path / "one", tmp_path / "two"])
    assert registry.by_name("alpha").body == "A3"
    # reload keeps the last good skill of a file that broke
    make_file(tmp_path / "two" / "a.md", "---\nname: [alpha\n---\n")
    report = registry.reload([tmp_path / "one", tmp_path / "two"])
    assert registry.by_name("alpha").body == "A3"
    assert any("keeping the skill 'alpha'" in w for w in report.warnings)
    snap = registry.snapshot()
    assert registry.remove("alpha") is True and registry.by_name("alpha") is None
    assert snap["alpha"].body == "A3"


def test_active_skills_and_compose(tmp_path, make_file):
    make_file(tmp_path / "s.md", "---\nname: cite-runbooks\ndescription: d\n---\nCite them.\n")
    registry = SkillRegistry()
    registry.load([tmp_path])
    persona = Persona(name="p", description="d", skills=("cite-runbooks", "missing"), body="Body.")
    found, missing = active_skills(persona, registry.snapshot())
    assert [s.name for s in found] == ["cite-runbooks"] and missing == ["missing"]
    assert compose_system_prompt(base="", persona=persona, skills=found) == "Body.\n\n[能力: cite-runbooks]\nCite them."
