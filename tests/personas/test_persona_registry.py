"""AgentRegistry (docs/architecture.md §6): comma-separated
``tools`` and broken files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ongridd.personas import AgentRegistry, LoadReport, Persona, builtin_agents_dir

C1_FILE = """---
name: specialist-disk
description: Investigates hosts whose disks are full or filling up.
when_to_use: A "no space left on device" error or a disk-usage alert.
tools: {tools}
permission_mode: default
max_turns: 8
---
You are a disk triage specialist. Report the largest directories and growth rate.
"""

C1_KNOWN = {"host_du_summary", "query_devices", "df_report"}


# ---- `tools` as a comma-separated string ----------------------------------------------


def test_c1_comma_string_splits_like_a_list(corpus, monkeypatch):
    monkeypatch.chdir(corpus / "c1")
    registry = AgentRegistry()
    report = registry.load([Path("agents")], C1_KNOWN)
    assert report == LoadReport(loaded=1, skipped=0, warnings=())
    persona = registry.by_name("specialist-disk")
    assert list(persona.tools) == ["host_du_summary", "query_devices", "df_report"]
    assert "host_du_summary, query_devices ,  df_report" not in persona.tools
    assert persona.permission_mode == "default" and persona.max_turns == 8
    assert persona.source == "agents/ops/specialist-disk.md"


def test_c1_list_form_is_identical(tmp_path, make_file):
    registry = AgentRegistry()
    make_file(tmp_path / "a" / "ops" / "specialist-disk.md",
              C1_FILE.format(tools="host_du_summary, query_devices ,  df_report"))
    make_file(tmp_path / "b" / "ops" / "specialist-disk.md",
              C1_FILE.format(tools="[host_du_summary, query_devices, df_report]"))
    registry.load([tmp_path / "a"], C1_KNOWN)
    as_string = registry.by_name("specialist-disk")
    registry.load([tmp_path / "b"], C1_KNOWN)
    as_list = registry.by_name("specialist-disk")
    assert as_string.tools == as_list.tools == ("host_du_summary", "query_devices", "df_report")
    assert as_string.to_dict() | {"source": None} == as_list.to_dict() | {"source": None}


def test_c1_empty_item_is_dropped(tmp_path, make_file):
    make_file(tmp_path / "agents" / "ops" / "specialist-disk.md",
              C1_FILE.format(tools="host_du_summary,,query_devices"))
    registry = AgentRegistry()
    report = registry.load([tmp_path / "agents"], C1_KNOWN)
    assert report.warnings == () and report.loaded == 1
    assert registry.by_name("specialist-disk").tools == ("host_du_summary", "query_devices")


def test_c1_typo_warns_names_file_and_tool_and_keeps_it(tmp_path, make_file, monkeypatch):
    make_file(tmp_path / "agents" / "ops" / "specialist-disk.md",
              C1_FILE.format(tools="host_du_summary, query_devicest"))
    make_file(tmp_path / "agents" / "other.md", "---\nname: other\ndescription: d\n---\nb\n")
    monkeypatch.chdir(tmp_path)
    registry = AgentRegistry()
    report = registry.load([Path("agents")], C1_KNOWN)
    assert report.loaded == 2 and report.skipped == 0  # loaded == number of valid files
    assert report.warnings == ("agents/ops/specialist-disk.md:5: unknown tool 'query_devicest' "
                               "(did you mean 'query_devices'?)",)
    assert registry.by_name("specialist-disk").tools == ("host_du_summary", "query_devicest")


def test_unknown_tools_not_checked_without_known_tools(tmp_path, make_file):
    make_file(tmp_path / "p.md", C1_FILE.format(tools="nonsense_tool"))
    report = AgentRegistry().load([tmp_path])
    assert report.warnings == ()


# ---- one broken file neither takes the registry down nor vanishes silently ---------


def _c3_expected(root: Path) -> list[str]:
    latin1 = root / "bad" / "latin1.md"
    raw = latin1.read_bytes()
    offset = raw.index(b"\xe9")
    line = raw[:offset].count(b"\n") + 1
    return [
        f"{latin1}:{line}: not valid UTF-8 (byte 0xE9 at offset {offset}); file skipped",
        f"{root / 'bad' / 'nofm.md'}:1: missing frontmatter (file must start with ---); file skipped",
        (f"{root / 'bad' / 'rollout.md'}:5: invalid YAML in frontmatter: found character '\\t' that cannot "
         "start any token (YAML does not allow tabs for indentation; use spaces); file skipped"),
    ]


def test_c3_load(corpus):
    root = corpus / "c3"
    registry = AgentRegistry()
    report = registry.load([root])
    assert (report.loaded, report.skipped) == (1, 3)
    assert list(report.warnings) == _c3_expected(root)
    assert list(registry.snapshot()) == ["specialist-sre"]
    assert registry.last_report == report


def test_c3_latin1_offset_is_the_real_byte(corpus):
    raw = (corpus / "c3" / "bad" / "latin1.md").read_bytes()
    assert raw.count(b"\xe9") == 1 and raw.startswith(b"---\nname: latin1-helper\n")


def test_c3_during_reload_with_known_tools(corpus, known_tools):
    root = corpus / "c3"
    registry = AgentRegistry()
    registry.load([root])
    report = registry.reload([root], known_tools)  # as a marketplace install would
    assert (report.loaded, report.skipped) == (1, 3)
    for expected in _c3_expected(root):
        assert expected in report.warnings
    assert registry.by_name("specialist-sre") is not None


# ---- roots, duplicates, overrides ------------------------------------------------------------


def test_duplicates_within_a_root_first_in_sorted_path_order_wins(corpus):
    root1 = corpus / "dups" / "root1"
    registry = AgentRegistry()
    report = registry.load([root1])
    assert registry.by_name("twin").description == "from root1/a.md"
    dup = [w for w in report.warnings if "duplicate" in w]
    assert dup == [(f"{root1 / 'sub' / 'z.md'}: duplicate persona name 'twin' (also in {root1 / 'a.md'}); "
                    f"{root1 / 'a.md'} is used, being first in sorted path order")]
    assert (report.loaded, report.skipped) == (2, 1)


def test_later_root_overrides_earlier_by_name(corpus):
    registry = AgentRegistry()
    report = registry.load([corpus / "dups" / "root1", corpus / "dups" / "root2"])
    assert registry.by_name("only-in-root1").description == "overridden by root2"
    assert registry.by_name("twin").description == "from root1/a.md"
    assert not any("only-in-root1" in w for w in report.warnings)  # an override is not a problem
    assert report.loaded == 3 and report.skipped == 1


def test_missing_root_gives_empty_registry(tmp_path):
    registry = AgentRegistry(tmp_path / "no-builtin")
    report = registry.load([tmp_path / "nope", tmp_path / "nor-this"])
    assert report == LoadReport(loaded=0, skipped=0, warnings=())
    assert dict(registry.snapshot()) == {}
    assert registry.by_name("default") is None


def test_root_may_be_a_single_file(corpus):
    registry = AgentRegistry()
    report = registry.load([corpus / "good" / "cjk.md", corpus / "c3" / "good"])
    assert report.skipped == 0
    assert sorted(registry.snapshot()) == sorted(["磁盘专家", "specialist-sre"])


def test_hidden_and_non_markdown_files_are_ignored(tmp_path, make_file):
    make_file(tmp_path / ".git" / "x.md", "garbage")
    make_file(tmp_path / ".#editor-lock.md", "garbage")
    make_file(tmp_path / "notes.txt", "garbage")
    make_file(tmp_path / "ok.md", "---\nname: ok\ndescription: d\n---\nb\n")
    report = AgentRegistry().load([tmp_path])
    assert report == LoadReport(loaded=1, skipped=0, warnings=())


def test_overlapping_roots_count_a_file_once(corpus):
    report = AgentRegistry().load([corpus / "c3", corpus / "c3" / "good"])
    assert (report.loaded, report.skipped) == (1, 3)


def test_builtin_root_then_extra_paths_then_roots(tmp_path, make_file):
    make_file(tmp_path / "builtin" / "default.md", "---\nname: default\ndescription: builtin\n---\nb\n")
    make_file(tmp_path / "plugin" / "p.md", "---\nname: plug\ndescription: plugin\n---\nb\n")
    make_file(tmp_path / "user" / "default.md", "---\nname: default\ndescription: user\n---\nb\n")
    make_file(tmp_path / "user" / "plug.md", "---\nname: plug\ndescription: user plug\n---\nb\n")
    registry = AgentRegistry(tmp_path / "builtin", extra_paths=[tmp_path / "plugin" / "p.md"])
    registry.load([])
    assert registry.by_name("default").description == "builtin"
    assert registry.by_name("plug").description == "plugin"
    registry.load([tmp_path / "user"])
    assert registry.by_name("default").description == "user"
    assert registry.by_name("plug").description == "user plug"
    assert registry.builtin("default").description == "builtin"
    registry.load([], extra_paths=[])
    assert registry.by_name("plug") is None


# ---- reload keeps what a now-broken file produced --------------------------------------------


def test_reload_keeps_last_good_persona_by_path(tmp_path, make_file):
    path = make_file(tmp_path / "a.md", "---\nname: alpha\ndescription: first\n---\nb\n")
    registry = AgentRegistry()
    registry.load([tmp_path])
    before = registry.by_name("alpha")
    make_file(path, "---\nname: alpha\ndescription: [broken\n---\nb\n")
    report = registry.reload([tmp_path])
    assert registry.by_name("alpha") is before
    assert (report.loaded, report.skipped) == (0, 1)
    assert report.warnings[-1] == f"{path}: keeping the persona 'alpha' it produced last time"
    assert any(w.startswith(f"{path}:3: invalid YAML") for w in report.warnings)
    # A fresh load does not keep it; a fixed file replaces it.
    registry.load([tmp_path])
    assert registry.by_name("alpha") is None
    make_file(path, "---\nname: alpha\ndescription: fixed\n---\nb\n")
    registry.reload([tmp_path])
    assert registry.by_name("alpha").description == "fixed"


def test_reload_drops_persona_of_deleted_file(tmp_path, make_file):
    path = make_file(tmp_path / "a.md", "---\nname: alpha\ndescription: d\n---\nb\n")
    registry = AgentRegistry()
    registry.load([tmp_path])
    path.unlink()
    registry.reload([tmp_path])
    assert registry.by_name("alpha") is None


# ---- live edits -----------------------------------------------------------------------------


def test_replace_and_remove(tmp_path, make_file):
    make_file(tmp_path / "builtin" / "default.md", "---\nname: default\ndescription: builtin\n---\nb\n")
    registry = AgentRegistry(tmp_path / "builtin")
    registry.load([])
    before = registry.snapshot()
    registry.replace(Persona(name="x-agent", description="live"))
    registry.replace(Persona(name="default", description="override"))
    assert registry.by_name("x-agent").description == "live"
    assert registry.by_name("default").description == "override"
    assert "x-agent" not in before and before["default"].description == "builtin"  # snapshots never change
    assert registry.remove("x-agent") is True
    assert registry.remove("x-agent") is False
    assert registry.by_name("x-agent") is None
    # A built-in can only be overridden: removing the override restores it, and it stays.
    assert registry.remove("default") is True
    assert registry.by_name("default").description == "builtin"
    assert registry.remove("default") is False
    assert registry.by_name("default").description == "builtin"
    with pytest.raises(TypeError):
        registry.replace({"name": "x"})  # type: ignore[arg-type]


def test_snapshot_is_immutable_and_sorted(corpus):
    registry = AgentRegistry()
    registry.load([corpus / "dups" / "root1", corpus / "good"])
    snap = registry.snapshot()
    assert list(snap) == sorted(snap)
    with pytest.raises(TypeError):
        snap["new"] = None  # type: ignore[index]


def test_spawnable_excludes_reserved_roles(tmp_path, make_file):
    for name in ("default", "reviewer", "zeta", "alpha"):
        make_file(tmp_path / f"{name}.md", f"---\nname: {name}\ndescription: d\npermission_mode: read-only\n---\nb\n")
    registry = AgentRegistry()
    registry.load([tmp_path])
    snap = registry.snapshot()
    registry.remove("alpha")
    assert [p.name for p in registry.spawnable(snap)] == ["alpha", "zeta"]
    assert [p.name for p in registry.spawnable()] == ["zeta"]


def test_by_name_normalizes_unicode(tmp_path, make_file):
    make_file(tmp_path / "e.md", "---\nname: caf\u00e9\ndescription: d\n---\nb\n")
    registry = AgentRegistry()
    registry.load([tmp_path])
    assert registry.by_name("cafe\u0301") is registry.by_name("caf\u00e9") is not None
    assert registry.by_name(None) is None  # type: ignore[arg-type]


# ---- the built-in folder ----------------------------------------------------------------------


def test_builtin_agents_dir_in_a_checkout(repo):
    assert builtin_agents_dir() == repo / "agents"
    assert (builtin_agents_dir() / "default.md").is_file()


def test_builtin_agents_dir_prefers_packaged_copy(tmp_path, monkeypatch, repo):
    pkg = tmp_path / "ongridd"
    shutil.copytree(repo / "agents", pkg / "builtin_agents")
    import importlib.resources

    monkeypatch.setattr(importlib.resources, "files", lambda name: pkg if name == "ongridd" else None)
    assert builtin_agents_dir() == pkg / "builtin_agents"


async def test_special_and_oversized_files_never_hang_or_stop_a_load(tmp_path, make_file):
    import os

    import trio

    os.mkfifo(tmp_path / "pipe.md")
    make_file(tmp_path / "huge.md", b"---\n" + b"x" * 600_000)
    make_file(tmp_path / "ok.md", "---\nname: ok\ndescription: d\n---\nb\n")
    registry = AgentRegistry()
    with trio.fail_after(20):
        report = await trio.to_thread.run_sync(registry.load, [tmp_path], abandon_on_cancel=True)
    assert (report.loaded, report.skipped) == (1, 2)
    assert f"{tmp_path / 'pipe.md'}: not a regular file; file skipped" in report.warnings
    assert f"{tmp_path / 'huge.md'}: file too large (600004 bytes; the limit is 262144); file skipped" in report.warnings
