"""The load fast paths change nothing but cost: libyaml events composed into the
same nodes and lines, and reloads that trust ``stat`` only for settled files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ongridd import yamlbounds
from ongridd.personas import AgentRegistry
from ongridd.personas import frontmatter as frontmatter_mod
from ongridd.personas import registry as registry_mod
from ongridd.personas.frontmatter import Frontmatter, parse

CORPUS = Path(__file__).parent / "corpus"
REPO = Path(__file__).resolve().parents[2]

PERSONA = """---
name: p-{n}
description: "Specialist {n}: one narrow family of problems."
when_to_use: >-
  Dispatch for subsystem {n}.
tools:
  - query_knowledge
  - query_devices
permission_mode: read-only
max_turns: {turns}
metadata: {{team: ops, tags: [a, b], since: 2024-01-01}}
---
You are specialist {n}.
"""


def _files() -> list[Path]:
    return sorted([*CORPUS.rglob("*.md"), *(REPO / "agents").rglob("*.md")])


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(REPO)))
def test_fast_and_pure_paths_give_the_same_frontmatter_for_every_corpus_file(path, monkeypatch):
    raw = path.read_bytes()
    fast = parse(raw)
    monkeypatch.setattr(yamlbounds, "_CParser", None)
    pure = parse(raw)
    if isinstance(pure, Frontmatter) and isinstance(fast, Frontmatter):
        assert (fast.data, fast.key_lines, fast.item_lines, fast.body, fast.body_line) == \
               (pure.data, pure.key_lines, pure.item_lines, pure.body, pure.body_line)
    else:
        assert fast == pure


@pytest.mark.parametrize("text", [
    "a: &x {k: [1, 2]}\nb: *x\nc: *x\n",
    "- &a a\n- *a\n- &a b\n- *a\n",
    "base: &b {x: 1}\nderived:\n  <<: *b\n  y: 2\n",
    "a: 0o17\nb: 1_000\nc: .inf\nd: 0x1F\ne: 1e3\nf: ~\ng: True\nh: 2001-12-14t21:59:43.10-05:00\ni: '1'\n",
    "a: !!str 1\nb: ! 12\nc: !!int '7'\n",
    "? [k, 1]\n: v\n",
    "name: a\ntools: [x, y]\nmetadata: {k: 1, t: 2024-01-01}\n",
    "a: &x [1, 2]\nb: *x\n",
    "when_to_use: >-\n  one\n  two\nn: null\nflag: yes\n",
])
def test_fast_path_data_and_alias_sharing_match_the_pure_path(text, monkeypatch):
    fast_loader, fast_node = yamlbounds.compose_bounded(text, yamlbounds.FRONTMATTER_LIMITS)
    fast = fast_loader.constructor.construct_document(fast_node)
    monkeypatch.setattr(yamlbounds, "_CParser", None)
    pure_loader, pure_node = yamlbounds.compose_bounded(text, yamlbounds.FRONTMATTER_LIMITS)
    pure = pure_loader.constructor.construct_document(pure_node)
    assert repr(fast) == repr(pure)


def _composed(text: str):
    """What composing and constructing give (the path :func:`yamlbounds.load_plain` stands in for):
    (type name, repr) of the data, or the error's type."""
    try:
        loader, node = yamlbounds.compose_bounded(text, yamlbounds.FRONTMATTER_LIMITS)
        data = loader.constructor.construct_document(node) if node is not None else None
    except Exception as exc:  # noqa: BLE001 — compared, not hidden
        return ("error", type(exc).__name__)
    return (type(data).__name__, repr(data))


_SCALARS = ["1", "+1", "-1", "-0", "01", "007", "0.5", "-0.0", "+2.25", "1.", ".5", "1e3", "1.5e3", "0x1F",
            "0o7", "0b1", "1_0", "1_0.5", "true", "TRUE", "True", "tRue", "false", "yes", "no", "on", "off",
            "null", "Null", "NULL", "nUll", "~", "", "2024-01-01", "2001-12-14 21:59:43.10 -5", "<<", "=",
            "12:30", "inf", ".inf", "-.Inf", ".nan", "NaN", "x", "a b", "'1'", '"true"', "'~'", '""',
            "99999999999999999999999", "1.0000000000000000000001", "１", "٣", "²", "1 ", "-", "+", "."]


@pytest.mark.parametrize("scalar", _SCALARS)
@pytest.mark.parametrize("shape", ["k: {s}\n", "- {s}\n", "{{k: [{s}], {s}: v}}\n", "{s}\n", "a:\n  b:\n    - {s}\n"])
def test_plain_load_gives_what_composing_and_constructing_give(scalar, shape):
    text = shape.format(s=scalar)
    plain = yamlbounds.load_plain(text, yamlbounds.FRONTMATTER_LIMITS)
    if plain is not None:  # otherwise left to the composer: nothing to compare
        assert (type(plain.data).__name__, repr(plain.data)) == _composed(text), text


@pytest.mark.parametrize("text", [
    "a: 1\na: 2\n",            # a duplicate key: the constructor's error
    "1: x\ntrue: y\n",         # 1 and true are one key to a dict
    "1: x\n1.0: y\n",
    "? [a]\n: v\n",             # a collection as a key
    "a: &x 1\nb: *x\n",         # anchors and aliases
    "a: !!str 1\n",             # a tag
    "<<: {a: 1}\n",             # a merge key
    "%YAML 1.1\n---\na: yes\n",  # a directive
    "a: 1\n---\nb: 2\n",        # two documents
    "a: [1, 2\n",               # bad YAML
    "a: " + "[" * 70 + "]" * 70 + "\n",  # deeper than max_depth
    "[" + ", ".join(["1"] * 6000) + "]\n",  # more nodes than max_nodes
])
def test_plain_load_leaves_every_other_document_to_the_composer(text):
    assert yamlbounds.load_plain(text, yamlbounds.FRONTMATTER_LIMITS) is None


@pytest.mark.parametrize("text", [
    "name: x\ntools:\n  - a\n  - {b: 1}\n  - [c]\ndescription: >-\n  one\n  two\nempty:\nlist: []\n",
    "'1': [x]\n1: y\nz: [a, b]\n",
    "a: [x]\na2: v\nb:\n- 1\n- 2\nc: {d: [1]}\n",
    "",
    "# only a comment\n",
])
def test_frontmatter_lines_are_the_same_on_the_plain_path(text, monkeypatch):
    raw = f"---\n{text}---\nbody\n"
    fast = parse(raw)
    assert isinstance(fast, Frontmatter)
    monkeypatch.setattr(frontmatter_mod, "load_plain", lambda *_: None)
    slow = parse(raw)
    assert (fast.data, fast.key_lines, fast.item_lines, fast.body, fast.body_line) == \
           (slow.data, slow.key_lines, slow.item_lines, slow.body, slow.body_line)


def test_a_yaml_directive_is_honoured_as_on_the_pure_path(monkeypatch):
    text = "%YAML 1.1\n--- !!map\nflag: yes\n"
    loader, node = yamlbounds.compose_bounded(text, yamlbounds.FRONTMATTER_LIMITS)
    fast = loader.constructor.construct_document(node)
    monkeypatch.setattr(yamlbounds, "_CParser", None)
    loader, node = yamlbounds.compose_bounded(text, yamlbounds.FRONTMATTER_LIMITS)
    assert fast == loader.constructor.construct_document(node)


def _write(root: Path, n: int, turns: int = 10) -> Path:
    path = root / f"p-{n}.md"
    path.write_text(PERSONA.format(n=n, turns=turns), encoding="utf-8")
    return path


def _count_reads(monkeypatch) -> list[str]:
    reads: list[str] = []
    real = registry_mod.read_file_stat

    def counting(path):
        reads.append(str(path))
        return real(path)

    monkeypatch.setattr(registry_mod, "read_file_stat", counting)
    return reads


def test_reload_does_not_read_settled_unchanged_files(tmp_path, monkeypatch):
    monkeypatch.setattr(registry_mod, "_SETTLED_NS", -10**18)  # every file counts as settled
    for n in range(5):
        _write(tmp_path, n)
    registry = AgentRegistry()
    registry.load([tmp_path])
    before = registry.by_name("p-3")
    reads = _count_reads(monkeypatch)
    report = registry.reload([tmp_path])
    assert reads == [] and report.loaded == 5 and registry.by_name("p-3") is before
    _write(tmp_path, 3, turns=100)  # another size: seen from stat
    registry.reload([tmp_path])
    assert reads == [str(tmp_path / "p-3.md")] and registry.by_name("p-3").max_turns == 100
    registry.reload([tmp_path], known_tools={"query_knowledge"})  # other options: every file is read again
    assert len(reads) == 6


def test_same_size_edits_right_after_a_read_are_always_seen(tmp_path):
    _write(tmp_path, 1, turns=10)
    registry = AgentRegistry()
    registry.load([tmp_path])
    for turns in range(11, 40):  # same size, often the same timestamp tick: too fresh to trust stat
        _write(tmp_path, 1, turns=turns)
        registry.reload([tmp_path])
        assert registry.by_name("p-1").max_turns == turns


def test_a_replaced_file_of_the_same_size_and_times_is_read_again(tmp_path, monkeypatch):
    monkeypatch.setattr(registry_mod, "_SETTLED_NS", -10**18)
    path = _write(tmp_path, 1, turns=10)
    registry = AgentRegistry()
    registry.load([tmp_path])
    st = path.stat()
    other = tmp_path / "new.tmp"
    other.write_text(PERSONA.format(n=1, turns=20), encoding="utf-8")
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, path)  # a new inode
    registry.reload([tmp_path])
    assert registry.by_name("p-1").max_turns == 20


def test_real_paths_match_os_realpath(tmp_path):
    (tmp_path / "real" / "sub").mkdir(parents=True)
    target = _write(tmp_path / "real" / "sub", 1)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "sub" / "alias.md").symlink_to(target)
    memo: dict[str, str] = {}
    for path in [tmp_path / "link" / "sub" / "p-1.md", tmp_path / "link" / "sub" / "alias.md",
                 tmp_path / "real" / "sub" / "missing.md", Path("relative.md")]:
        assert registry_mod._realpath(str(path), memo) == os.path.realpath(path)


def test_overlapping_roots_through_a_symlink_count_a_file_once(tmp_path):
    (tmp_path / "real").mkdir()
    _write(tmp_path / "real", 1)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    registry = AgentRegistry()
    report = registry.load([tmp_path / "real", tmp_path / "link"])
    assert report.loaded == 1 and report.skipped == 0
