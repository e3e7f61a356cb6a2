"""Bounded parsing: alias bombs, deep nesting and huge values cost a bounded
amount everywhere a persona (or a config file) is read — the CLI, the parser,
the registry loads — and every message about a bad value is a short preview.

The report this answers: a 467-byte persona of nine levels of nine aliases
used as ``name: *a8`` made ``ongrid agents validate`` run for about 49 s and
3 GB before these bounds; it now takes milliseconds.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from ongridd.config import parse_yaml
from ongridd.errors import ConfigError
from ongridd.personas.frontmatter import MAX_FILE_BYTES
from ongridd.personas.parse import MAX_WARNINGS_PER_FILE, parse_persona_text
from ongridd.personas.registry import AgentRegistry
from ongridd.personas.skills import parse_skill_text
from ongridd.yamlbounds import FRONTMATTER_LIMITS, describe, quote
from tests.bombs import (FUZZ_CPU_BOUND_S, FUZZ_TRACED_BOUND, REASONS, TYPED_KEYS, all_bombs, bomb, the_bomb)

ROOT = Path(__file__).resolve().parents[2]
#: Seconds a whole ``ongrid agents validate`` run may take (start-up included).
CLI_BOUND_S = 20.0


def validate(*paths: Path) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", "from ongridd.cli import ongrid_main; ongrid_main()",
                           "agents", "validate", *map(str, paths)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - started


def test_the_reported_bomb_is_refused_at_once_by_validate(tmp_path):
    path = tmp_path / "bomb.md"
    path.write_text(the_bomb(), encoding="utf-8")
    assert len(the_bomb().encode()) < 500
    proc, elapsed = validate(path)
    assert proc.returncode == 1, proc.stderr
    assert elapsed < CLI_BOUND_S
    # a3 (line 5) is the first anchor whose expansion (7,381 nodes) passes the bound
    assert proc.stderr.strip() == (f"{path}:5: invalid YAML in frontmatter: YAML aliases expand to more than "
                                   f"{FRONTMATTER_LIMITS.max_nodes:,} nodes; file skipped")
    # stdout: the skipped file's row with why, then the summary
    assert proc.stdout.splitlines() == [
        f"skip  {path}", f"     line 5: invalid YAML in frontmatter: YAML aliases expand to more than "
        f"{FRONTMATTER_LIMITS.max_nodes:,} nodes; file skipped", "0 loaded, 1 skipped"]


@pytest.mark.parametrize("key", TYPED_KEYS)
def test_the_bomb_as_every_typed_key_is_refused_by_validate(tmp_path, key):
    path = tmp_path / f"bomb-{key}.md"
    path.write_text(bomb("laughs", key), encoding="utf-8")
    proc, elapsed = validate(path)
    assert proc.returncode == 1, proc.stderr
    assert elapsed < CLI_BOUND_S
    assert f"{path}:5: invalid YAML in frontmatter: YAML aliases expand to more than" in proc.stderr
    assert proc.stdout.strip().endswith("0 loaded, 1 skipped")


def test_every_bomb_variant_of_every_typed_key_in_one_validate_run(tmp_path):
    expected = {}
    for stem, variant, text in all_bombs():
        (tmp_path / f"{stem}.md").write_text(text, encoding="utf-8")
        expected[str(tmp_path / f"{stem}.md")] = REASONS[variant]
    (tmp_path / "good.md").write_text("---\nname: good\ndescription: fine\n---\nYou are fine.\n", encoding="utf-8")
    proc, elapsed = validate(tmp_path)
    assert proc.returncode == 1
    assert elapsed < CLI_BOUND_S
    assert proc.stdout.strip().endswith(f"1 loaded, {len(expected)} skipped")
    lines = proc.stderr.splitlines()
    for path, reason in expected.items():
        mine = [line for line in lines if line.startswith(path + ":")]
        assert mine, f"no warning names {path}"
        assert any(reason in line and line.endswith("; file skipped") for line in mine), mine
        # the line is known for every one of them
        assert all(line[len(path) + 1:].split(":", 1)[0].isdigit() for line in mine), mine


@pytest.mark.parametrize("variant", list(REASONS))
def test_each_variant_is_refused_by_the_parsers_in_bounded_time(variant):
    for key in TYPED_KEYS:
        text = bomb(variant, key)
        cpu = time.thread_time()
        persona, warnings = parse_persona_text(text, "b.md")
        skill, skill_warnings = parse_skill_text(text, "s.md")
        cpu = time.thread_time() - cpu
        assert persona is None and skill is None
        assert len(warnings) == 1 and REASONS[variant] in warnings[0] and warnings[0].endswith("; file skipped")
        assert REASONS[variant] in skill_warnings[0]
        assert cpu < FUZZ_CPU_BOUND_S


def test_small_legitimate_aliases_still_work():
    text = ("---\nname: shared\ndescription: &d Shared tools.\nwhen_to_use: *d\n"
            "tools: &t [get_host_load, query_promql]\nmetadata: {same: *t, m: {<<: {a: 1}, b: 2}}\n---\nbody\n")
    persona, warnings = parse_persona_text(text, "p.md")
    assert warnings == []
    assert persona.when_to_use == "Shared tools." and persona.tools == ("get_host_load", "query_promql")
    assert persona.metadata == {"same": ["get_host_load", "query_promql"], "m": {"a": 1, "b": 2}}


def test_a_shared_structure_is_described_without_expanding_it():
    leaf = ["lol"] * 9
    for _ in range(11):  # 9**12 leaves if expanded; its repr would be terabytes
        leaf = [leaf] * 9
    started = time.thread_time()
    text = describe(leaf)
    assert time.thread_time() - started < 0.05
    assert text.startswith("array of 9 items [[[[[[[[[[[['lol', 'lol'") and text.endswith("…")
    assert len(text) < 100
    assert describe("x" * 10**6) == "string " + repr("x" * 57)[:-1] + "…' (1,000,000 characters)"
    assert describe(16 ** 5000) == "integer <integer of 20,001 bits>"
    assert describe({"a": 1}) == "object of 1 key {'a': 1}"
    assert describe(True) == "boolean true" and describe(None) == "null"
    assert quote("it's " * 100, 8) == "\"it's it'…\""


def test_wrong_type_warnings_are_previews_not_reprs():
    big = "[" + ", ".join(f"item{i}" for i in range(2000)) + "]"
    persona, warnings = parse_persona_text(f"---\nname: {big}\ndescription: d\n---\nb\n", "p.md")
    assert persona is None
    assert warnings == ["p.md:2: 'name' must be a string, got array of 2,000 items "
                        "['item0', 'item1', 'item2', 'item3', 'item4', 'item5', 'it…'…; file skipped"]


def test_huge_numbers_are_refused_not_kept():
    text = "---\nname: n\ndescription: d\nmax_turns: 0x" + "f" * 5000 + "\n---\nb\n"
    persona, warnings = parse_persona_text(text, "p.md")
    assert persona is None
    assert warnings == ["p.md:4: 'max_turns' must be at most 1,000,000, got integer <integer of 20,000 bits>; "
                        "file skipped"]
    persona, warnings = parse_persona_text("---\nname: n\ndescription: d\nextra: {n: 0x" + "f" * 5000 + "}\n---\nb\n",
                                           "p.md")
    assert persona is None and "has a value too large to keep (an integer of 20,000 bits)" in warnings[0]


@pytest.mark.parametrize("value, shown", [(".nan", "nan"), (".inf", "inf"), ("-.Inf", "-inf")])
def test_numbers_json_has_not_are_refused_with_their_key(value, shown):
    """The persona's fields go out as JSON (GET /api/agents, the console): a metadata value
    JSON cannot carry would make every listing unreadable to a browser."""
    persona, warnings = parse_persona_text(f"---\nname: n\ndescription: d\nmetadata:\n  x: [1, {value}]\n---\nb\n",
                                           "p.md")
    assert persona is None
    assert warnings == [f"p.md:4: 'metadata' holds the number {shown} (JSON numbers are finite; quote it to keep "
                        "it as text); file skipped"], warnings
    persona, warnings = parse_persona_text(f"---\nname: n\ndescription: d\nextra: {value}\n---\nb\n", "p.md")
    assert persona is None and f"unknown key 'extra' holds the number {shown}" in warnings[0], warnings
    persona, _ = parse_persona_text(f"---\nname: n\ndescription: d\nmetadata: {{x: '{value}'}}\n---\nb\n", "p.md")
    assert persona is not None and persona.metadata["x"] == value


def test_a_flood_of_warnings_is_capped_and_keeps_the_errors():
    tools = ", ".join(f"not a tool {i}" for i in range(3000))
    text = f"---\nname: p\ndescription: d\ntools: [{tools}]\nmax_turns: zero\n---\nb\n"
    persona, warnings = parse_persona_text(text, "p.md")
    assert persona is None
    assert len(warnings) <= MAX_WARNINGS_PER_FILE + 2
    assert any("'max_turns' must be an integer > 0" in w for w in warnings)
    assert warnings[-1] == f"p.md: {3000 - MAX_WARNINGS_PER_FILE:,} more warnings not shown"


def test_oversized_text_is_refused_unparsed_by_every_entry_point():
    text = "---\nname: p\ndescription: d\n---\n" + "b" * MAX_FILE_BYTES
    persona, warnings = parse_persona_text(text, "p.md")
    assert persona is None and warnings == [f"p.md: file too large ({len(text)} characters; the limit is "
                                            f"{MAX_FILE_BYTES}); file skipped"]
    persona, warnings = parse_persona_text(text.encode(), "p.md")
    assert persona is None and warnings == [f"p.md: file too large ({len(text)} bytes; the limit is "
                                            f"{MAX_FILE_BYTES}); file skipped"]


@pytest.mark.parametrize("typ", ["safe", "rt"])
@pytest.mark.parametrize("variant", list(REASONS))
def test_config_files_get_the_same_alias_bounds(variant, typ):
    if variant == "string-laughs":  # 9,000,000 characters: past the configuration's larger text bound
        text = "s: &s " + "x" * 10_000 + "\nl: [" + ", ".join(["*s"] * 900) + "]\n"
    else:
        text = bomb(variant, "hosts").split("---\n")[1]
    started = time.thread_time()
    with pytest.raises(ConfigError, match=r"^ongrid\.yaml:\d+: invalid YAML: .*" + re.escape(REASONS[variant])):
        parse_yaml(text, "ongrid.yaml", typ=typ)
    assert time.thread_time() - started < FUZZ_CPU_BOUND_S


async def test_registry_loads_and_reloads_skip_bombs_with_file_and_line(tmp_path):
    expected = {}
    for stem, variant, text in all_bombs():
        (tmp_path / f"{stem}.md").write_text(text, encoding="utf-8")
        expected[str(tmp_path / f"{stem}.md")] = REASONS[variant]
    good = tmp_path / "zz-good.md"
    good.write_text("---\nname: good\ndescription: fine\n---\nYou are fine.\n", encoding="utf-8")
    registry = AgentRegistry()
    with trio.fail_after(60):
        report = await trio.to_thread.run_sync(registry.load, [tmp_path], abandon_on_cancel=True)
    assert (report.loaded, report.skipped) == (1, len(expected))
    for path, reason in expected.items():
        assert any(w.startswith(path + ":") and reason in w for w in report.warnings), path
    # the good file turns into a bomb: a reload keeps what it produced last time
    good.write_text(bomb("laughs", "description").replace("name: bomb", "name: good"), encoding="utf-8")
    with trio.fail_after(60):
        report = await trio.to_thread.run_sync(registry.reload, [tmp_path], abandon_on_cancel=True)
    assert registry.by_name("good").description == "fine"
    assert f"{good}: keeping the persona 'good' it produced last time" in report.warnings
    assert any(w.startswith(f"{good}:5: invalid YAML in frontmatter: YAML aliases expand") for w in report.warnings)


@pytest.mark.exclusive  # heavy: a timing bound that another worker beside it would break
def test_fuzz_5000_generated_files_each_parse_in_bounded_time_and_memory():
    """Runs in a fresh process, so its peak RSS belongs to the fuzz alone."""
    proc = subprocess.run([sys.executable, "-c", "from tests.bombs import fuzz_main; fuzz_main()", "5000", "20261201"],
                          cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["count"] == 5000
    assert out["problem_count"] == 0, out["problems"]
    assert out["max_cpu_s"] < FUZZ_CPU_BOUND_S
    assert set(out["kinds"]) == {"bomb", "structured", "deep", "laughs", "long", "numbers", "encoding", "fences",
                                 "mutated", "tags", "keys"}
    assert out["kinds"]["bomb"] >= len(REASONS) * len(TYPED_KEYS)
    assert 0 < out["loaded"] < out["count"]  # some files are usable, most are not
    assert out["traced"] >= len(REASONS) * len(TYPED_KEYS) and out["max_traced"] < FUZZ_TRACED_BOUND
    assert out["rss_peak_kb"] - out["rss_base_kb"] < 64 * 1024, out


@pytest.mark.parametrize("variant", list(REASONS))
def test_runbook_front_matter_gets_the_same_bounds(variant):
    from ongrid_knowledge.passages import split_markdown

    text = bomb(variant, "tags").replace("---\nYou are a bomb.", "---\n# Runbook\nRestart it.")
    started = time.thread_time()
    doc = split_markdown(text, "r.md", default_title="r")
    assert time.thread_time() - started < FUZZ_CPU_BOUND_S
    assert doc.title == "Runbook" and len(doc.notes) == 1
    assert doc.notes[0].startswith("r.md:") and doc.notes[0].endswith("front matter is not valid YAML; ignored")
