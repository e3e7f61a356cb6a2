"""Persona file parsing (docs/architecture.md §5) on the malformed corpus and beyond."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ongridd import yamlbounds
from ongridd.personas import KNOWN_KEYS, Persona, parse_persona_file, parse_persona_text
from ongridd.personas.parse import persona_to_text

# file → (line or None, a fragment of the reason)
MALFORMED = {
    "tab-indent.md": (5, "found character '\\t' that cannot start any token"),
    "unclosed-quote.md": (3, "while scanning a quoted scalar"),
    "no-frontmatter.md": (1, "missing frontmatter (file must start with ---)"),
    "empty.md": (1, "missing frontmatter (file must start with ---)"),
    "frontmatter-not-closed.md": (1, "frontmatter is not closed"),
    "name-number.md": (2, "'name' must be a string, got integer 42"),
    "name-bool.md": (2, "'name' must be a string, got boolean true"),
    "name-null.md": (2, "'name' must be a string, got null"),
    "name-list.md": (2, "'name' must be a string, got array"),
    "name-bad-chars.md": (2, "may contain only letters, digits, '-' and '_' (found ' ')"),
    "name-missing.md": (None, "missing required key 'name'"),
    "description-missing.md": (None, "missing required key 'description'"),
    "description-number.md": (3, "'description' must be a string, got integer 12"),
    "max-turns-string.md": (4, "'max_turns' must be an integer > 0, got string '15'"),
    "max-turns-float.md": (4, "'max_turns' must be an integer > 0, got number 15.7"),
    "max-turns-zero.md": (4, "'max_turns' must be an integer > 0, got integer 0"),
    "max-turns-bool.md": (4, "'max_turns' must be an integer > 0, got boolean true"),
    "tool-budget-negative.md": (4, "'tool_budget' must be an integer > 0, got integer -3"),
    "permission-unknown.md": (4, "unknown permission_mode string 'admin'"),
    "permission-null.md": (4, "unknown permission_mode null"),
    "tools-mapping.md": (4, "'tools' must be an array of strings or a comma-separated string, got object"),
    "tools-item-number.md": (6, "'tools' item 2 must be a string, got integer 7"),
    "metadata-list.md": (4, "'metadata' must be an object, got array"),
    "top-level-list.md": (2, "frontmatter must be a YAML object (a mapping of keys), got array"),
    "duplicate-key.md": (4, 'found duplicate key "description"'),
    "critical-reminder-list.md": (4, "'critical_reminder' must be a string, got array"),
    "nul-byte.md": (5, "contains a NUL character"),
    "latin1-frontmatter.md": (3, "not valid UTF-8 (byte 0xE9 at offset 32)"),
}


def test_corpus_lists_every_malformed_file(corpus):
    assert sorted(p.name for p in (corpus / "malformed").glob("*.md")) == sorted(MALFORMED)


@pytest.mark.parametrize("fname", sorted(MALFORMED))
def test_malformed_file_is_skipped_with_located_warning(corpus, fname):
    path = corpus / "malformed" / fname
    line, fragment = MALFORMED[fname]
    persona, warnings = parse_persona_file(path)
    assert persona is None
    prefix = f"{path}:{line}: " if line is not None else f"{path}: "
    matching = [w for w in warnings if fragment in w]
    assert matching, warnings
    assert matching[0].startswith(prefix), matching[0]
    assert matching[0].endswith("; file skipped")


def test_values_are_never_coerced():
    base = "---\nname: n\ndescription: d\nmax_turns: {}\n---\nbody\n"
    for bad in ('"15"', "15.0", "true", "[15]", "-1"):
        persona, warnings = parse_persona_text(base.format(bad), "p.md")
        assert persona is None, bad
        assert any("'max_turns' must be an integer > 0" in w for w in warnings)
    persona, _ = parse_persona_text(base.format("15"), "p.md")
    assert persona is not None and persona.max_turns == 15 and type(persona.max_turns) is int


@pytest.mark.parametrize("brk", ["\u2028", "\u2029", "\x85"])
@pytest.mark.parametrize("where", ["description: Read-only helper.{b}permission_mode: default{b}tools: host_bash",
                                   "description: x  # no tools{b}tools: host_bash",
                                   "description: 'quoted{b}text'"])
def test_a_line_break_that_only_some_parsers_see_is_refused_with_its_line(brk, where, monkeypatch):
    # editors show one line; libyaml (YAML 1.1) breaks it, the pure-Python parser does not: a key
    # written after it would load on one install and not on another, unseen
    text = "---\nname: peek\n" + where.format(b=brk) + "\n---\nbody\n"
    for libyaml in (True, False):
        if not libyaml:
            monkeypatch.setattr(yamlbounds, "_CParser", None)
        persona, warnings = parse_persona_text(text, "peek.md")
        assert persona is None, (libyaml, persona)
        assert any(w.startswith("peek.md:3: ") and f"U+{ord(brk):04X}" in w and w.endswith("; file skipped")
                   for w in warnings), warnings


def test_a_line_separator_in_the_body_is_text():
    persona, warnings = parse_persona_text("---\nname: peek\ndescription: d\n---\nline\u2028two\n", "peek.md")
    assert persona is not None and persona.body == "line\u2028two", warnings


def test_bom_and_crlf_are_tolerated(corpus):
    path = corpus / "good" / "bom-crlf.md"
    raw = path.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and b"\r\n" in raw  # the corpus file really is BOM + CRLF
    persona, warnings = parse_persona_file(path)
    assert warnings == []
    assert persona.name == "bom-crlf"
    assert persona.description == "Saved by a Windows editor"
    assert persona.tools == ("query_devices", "get_host_load")
    assert persona.max_turns == 7
    assert persona.body == "Line one.\nLine two."
    assert "\r" not in persona.body


def test_same_content_as_str_and_bytes_gives_same_persona(corpus):
    raw = (corpus / "good" / "bom-crlf.md").read_bytes()
    from_bytes, _ = parse_persona_text(raw, "x.md")
    from_str, _ = parse_persona_text(raw.decode("utf-8"), "x.md")
    assert from_bytes == from_str


def test_cjk_name_and_description(corpus):
    persona, warnings = parse_persona_file(corpus / "good" / "cjk.md")
    assert warnings == []
    assert persona.name == "磁盘专家"
    assert persona.description == "文件系统与磁盘容量专家 — du / find / stat"
    assert persona.when_to_use.startswith("磁盘使用率告警")
    assert persona.read_only
    assert persona.body == "你是磁盘专家。"


def test_combining_marks_in_names(corpus):
    persona, warnings = parse_persona_file(corpus / "good" / "devanagari.md")
    assert warnings == [] and persona.name == "हिन्दी-सहायक"


@pytest.mark.parametrize("name", ["disk_helper-2", "Ops", "磁盘", "ディスク", "диск", "x"])
def test_valid_names(name):
    persona, warnings = parse_persona_text(f"---\nname: {name}\ndescription: d\n---\nb\n", "p.md")
    assert persona is not None and persona.name == name, warnings


@pytest.mark.parametrize("name", ['"a b"', '"a/b"', '"a.b"', '"-\u0301x"', '""', '"\u0301a"', '"a:b"'])
def test_invalid_names(name):
    persona, warnings = parse_persona_text(f"---\nname: {name}\ndescription: d\n---\nb\n", "p.md")
    assert persona is None
    assert warnings[0].startswith("p.md:2: 'name'")


@pytest.mark.parametrize("name", ["Reviewer", "REVIEWER", "Default", "reviewer", "default"])
def test_a_name_may_not_pose_as_a_reserved_role_in_another_letter_case(name):
    """A persona named ``Reviewer`` would stand beside the real ``reviewer`` as a worker any turn
    may dispatch, its tiles and tree nodes reading as the gate's; the reserved roles themselves
    (a user's own ``reviewer.md`` replacing the built-in) are unchanged."""
    persona, warnings = parse_persona_text(f"---\nname: {name}\ndescription: d\n---\nb\n", "p.md")
    if name.islower():
        assert persona is not None and persona.name == name, warnings
    else:
        assert persona is None and "is the reserved role" in warnings[0], warnings


@pytest.mark.parametrize(("file", "name", "warned"), [
    ("specialist-mail.md", "specialist-mial", True),   # a typo in one of them
    ("specialist-disk.md", "specialist-dsk", True),
    ("agents/specialist-disk.md", "specialist-disk", False),  # the same
    ("specialist-disk.local.md", "specialist-disk", False),  # a name chosen unlike its file
    ("cjk.md", "磁盘专家", False),
    ("sre-1.md", "sre-2", True),
    ("ops.md", "opz", False),  # too short to tell a typo from a choice
])
def test_a_name_nearly_the_file_name_is_warned_about(file, name, warned):
    persona, warnings = parse_persona_text(f"---\nname: {name}\ndescription: d\n---\nb\n", file)
    assert persona is not None and persona.name == name  # kept, under its name: a warning, not a refusal
    stem = file.rsplit("/", 1)[-1].removesuffix(".md")
    expected = [f"{file}:2: 'name' '{name}' is nearly the file's name '{stem}': is one of them misspelt? "
                f"The persona is known by its 'name', '{name}'"]
    assert warnings == (expected if warned else []), warnings


def test_unknown_keys_warn_and_go_to_metadata(corpus):
    path = corpus / "good" / "unknown-keys.md"
    persona, warnings = parse_persona_file(path)
    assert persona is not None
    assert warnings == [
        f"{path}:4: unknown key 'color' (kept under metadata)",
        f"{path}:5: unknown key 'owner' (kept under metadata)",
    ]
    assert dict(persona.metadata) == {"tier": 2, "color": "blue", "owner": {"team": "storage"}}
    assert persona.tools == ("query_devices",)


def test_null_optional_keys_are_unset(corpus):
    persona, warnings = parse_persona_file(corpus / "good" / "nulls.md")
    assert warnings == []
    d = persona.to_dict()
    assert d["when_to_use"] is None and d["tool_budget"] is None and d["critical_reminder"] is None
    assert d["model"] is None and d["tools"] == [] and d["skills"] == [] and d["metadata"] == {}


def test_every_key_of_the_table_is_read():
    text = """---
name: full
description: Every key
when_to_use: |

  First line.
  Second line.
tools: [a, b]
disallowed_tools: ["host_*"]
permission_mode: read-only
max_turns: 9
tool_budget: 4
critical_reminder: Be brief.
skills: [cite-runbooks]
model: small-model
metadata: {owner: team-a}
---

The body.

Second paragraph.
"""
    persona, warnings = parse_persona_text(text, "full.md")
    assert warnings == []
    assert persona == Persona(
        name="full", description="Every key", when_to_use="First line.\nSecond line.", tools=("a", "b"),
        disallowed_tools=("host_*",), permission_mode="read-only", max_turns=9, tool_budget=4,
        critical_reminder="Be brief.", skills=("cite-runbooks",), model="small-model",
        metadata={"owner": "team-a"}, body="The body.\n\nSecond paragraph.", source="full.md",
    )
    d = persona.to_dict()
    assert list(d) == list(KNOWN_KEYS) + ["source"]
    json.dumps(d)  # JSON-ready


def test_to_dict_defaults():
    d = Persona(name="p", description="d").to_dict()
    assert d == {
        "name": "p", "description": "d", "when_to_use": None, "tools": [], "disallowed_tools": [],
        "permission_mode": "default", "max_turns": 15, "tool_budget": None, "critical_reminder": None,
        "skills": [], "model": None, "metadata": {}, "source": "",
    }


def test_metadata_is_json_safe_and_read_only():
    persona, _ = parse_persona_text("---\nname: p\ndescription: d\nsince: 2024-05-01\n---\nb\n", "p.md")
    assert persona.metadata["since"] == "2024-05-01"
    with pytest.raises(TypeError):
        persona.metadata["x"] = 1  # type: ignore[index]
    json.dumps(persona.to_dict())


def test_alias_bomb_in_metadata_is_refused_not_expanded():
    lines = ["---", "name: bomb", "description: d", "a: &a [x, x, x, x, x, x, x, x, x, x]"]
    prev = "a"
    for n in "bcdefghi":
        lines.append(f"{n}: &{n} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]")
        prev = n
    lines += ["---", "b"]
    persona, warnings = parse_persona_text("\n".join(lines), "bomb.md")
    assert persona is None
    # refused while loading, at the first anchor whose expansion is too large (d: 11,111 nodes)
    assert warnings == ["bomb.md:7: invalid YAML in frontmatter: YAML aliases expand to more than 5,000 nodes; "
                        "file skipped"]


def test_colon_in_plain_value_gets_a_hint():
    persona, warnings = parse_persona_text("---\nname: p\ndescription: Disks: what fills them\n---\nb\n", "p.md")
    assert persona is None
    assert warnings == [("p.md:3: invalid YAML in frontmatter: mapping values are not allowed here "
                         "(put a value that contains ': ' in quotes); file skipped")]


def test_description_should_be_one_line():
    persona, warnings = parse_persona_text("---\nname: p\ndescription: |\n  one\n  two\n---\nb\n", "p.md")
    assert persona is not None
    assert warnings == ["p.md:3: 'description' should be one line; the catalog joins its lines"]


def test_duplicate_tool_is_dropped_with_warning():
    persona, warnings = parse_persona_text("---\nname: p\ndescription: d\ntools: [a, b, a]\n---\nb\n", "p.md")
    assert persona.tools == ("a", "b")
    assert warnings == ["p.md:4: 'tools' lists 'a' twice; the duplicate is ignored"]


def test_unknown_tool_warns_with_item_line_and_is_kept(known_tools):
    text = "---\nname: p\ndescription: d\ntools:\n  - query_devices\n  - query_devicest\n---\nb\n"
    persona, warnings = parse_persona_text(text, "p.md", known_tools=known_tools)
    assert persona.tools == ("query_devices", "query_devicest")
    assert warnings == ["p.md:6: unknown tool 'query_devicest' (did you mean 'query_devices'?)"]


def test_control_tools_are_known_but_workers_are_told_they_never_get_them(known_tools):
    text = "---\nname: {}\ndescription: d\ntools: [query_devices, AgentTool]\n---\nb\n"
    persona, warnings = parse_persona_text(text.format("default"), "p.md", known_tools=known_tools)
    assert warnings == []
    persona, warnings = parse_persona_text(text.format("worker"), "p.md", known_tools=known_tools)
    assert persona is not None
    assert warnings == ["p.md:4: 'AgentTool' is a control tool: workers never get it"]


def test_tool_with_whitespace_is_flagged():
    persona, warnings = parse_persona_text("---\nname: p\ndescription: d\ntools: [a b]\n---\nb\n", "p.md")
    assert persona.tools == ("a b",)
    assert warnings == ["p.md:4: 'a b' is not a valid tool name (is a comma missing?)"]


def test_unknown_skill_warns_only_when_skills_are_known():
    text = "---\nname: p\ndescription: d\nskills: cite-runbooks, nope\n---\nb\n"
    _, warnings = parse_persona_text(text, "p.md")
    assert warnings == []
    persona, warnings = parse_persona_text(text, "p.md", known_skills={"cite-runbooks"})
    assert persona.skills == ("cite-runbooks", "nope")
    assert warnings == ["p.md:4: unknown skill 'nope'"]


def test_empty_body_warns():
    persona, warnings = parse_persona_text("---\nname: p\ndescription: d\n---\n\n", "p.md")
    assert persona is not None and persona.body == ""
    assert warnings == ["p.md:5: the body is empty: this persona has no system prompt of its own"]


def test_reviewer_should_be_read_only():
    _, warnings = parse_persona_text("---\nname: reviewer\ndescription: d\n---\nb\n", "r.md")
    assert warnings == [("r.md: the reviewer should be 'permission_mode: read-only' "
                         "(its write tools would need review themselves)")]


def test_several_problems_are_all_reported_in_line_order():
    text = "---\nname: 5\ndescription: d\npermission_mode: root\nmax_turns: x\n---\nb\n"
    persona, warnings = parse_persona_text(text, "p.md")
    assert persona is None
    assert [w.split(":")[1] for w in warnings] == ["2", "4", "5"]


def test_persona_constructor_validates():
    with pytest.raises(ValueError):
        Persona(name="a b", description="d")
    with pytest.raises(ValueError):
        Persona(name="a", description="d", max_turns=0)
    with pytest.raises(ValueError):
        Persona(name="a", description="d", permission_mode="root")


def test_round_trip_through_persona_to_text():
    persona = Persona(name="磁盘", description="a: b", when_to_use="l1\nl2", tools=("x", "y"),
                      critical_reminder="c", metadata={"k": {"z": [1, "2"]}}, body="hello\n\nworld",
                      tool_budget=3, model="yes", permission_mode="read-only", max_turns=4)
    again, warnings = parse_persona_text(persona_to_text(persona), "x.md")
    assert warnings == []
    assert again == attrs.evolve(persona, source="x.md")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_parser_never_raises_on_bytes(data):
    persona, warnings = parse_persona_text(data, "fuzz.md")
    assert persona is not None or warnings
    assert all(w.startswith("fuzz.md") for w in warnings)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_parser_never_raises_on_frontmatter_text(text):
    persona, warnings = parse_persona_text("---\n" + text + "\n---\nbody\n", "fuzz.md")
    assert persona is not None or warnings
    assert all(w.startswith("fuzz.md") for w in warnings)


def test_a_misspelt_key_gets_a_suggestion_and_a_misspelt_permission_key_is_refused():
    persona, warnings = parse_persona_text("---\nname: t\ndescription: d\nmax_turn: 3\n---\nb\n", "p.md")
    assert persona is not None and persona.metadata == {"max_turn": 3}
    assert warnings == ["p.md:4: unknown key 'max_turn' (kept under metadata) (did you mean 'max_turns'?)"]
    # fail closed: the persona would keep every tool the key was meant to take away
    for key in ("permision_mode", "permission_modes", "disalowed_tools"):
        persona, warnings = parse_persona_text(f"---\nname: t\ndescription: d\n{key}: read-only\n---\nb\n", "p.md")
        assert persona is None, key
        assert warnings[0].startswith(f"p.md:4: unknown key '{key}' (did you mean"), warnings
