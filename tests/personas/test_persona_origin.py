"""Where a persona came from (builtin, plugin:<name>, user) and the warnings about its file."""

from __future__ import annotations

from types import SimpleNamespace

from ongridd.personas.origin import files_without_persona, persona_origin, persona_warnings, warning_path


def test_origin_of_builtin_plugin_and_user_files(tmp_path):
    builtin = tmp_path / "builtin"
    plugin_dir = tmp_path / "plugins" / "diskreport" / "agents"
    single = tmp_path / "plugins" / "other" / "one.md"
    plugins = [SimpleNamespace(name="ongrid_diskreport", registered={"personas": [str(plugin_dir)]}),
               SimpleNamespace(name="ongrid_other", registered={"personas": [str(single)]}),
               SimpleNamespace(name="broken", registered={})]
    assert persona_origin(str(builtin / "default.md"), builtin, plugins) == "builtin"
    assert persona_origin(str(plugin_dir / "sub" / "hunter.md"), builtin, plugins) == "plugin:ongrid_diskreport"
    assert persona_origin(str(single), builtin, plugins) == "plugin:ongrid_other"
    assert persona_origin(str(tmp_path / "plugins" / "other" / "two.md"), builtin, plugins) == "user"
    assert persona_origin(str(tmp_path / "builtinish" / "x.md"), builtin, plugins) == "user"  # a prefix is not a parent
    assert persona_origin(str(builtin / "default.md"), None) == "user"


def test_warnings_are_those_naming_the_file():
    warnings = ["/a/b.md:4: unknown tool 'x'", "/a/b.md.bak:1: other file", "/a/bb.md:2: other", "/a/b.md: skipped"]
    assert persona_warnings("/a/b.md", warnings) == ["/a/b.md:4: unknown tool 'x'", "/a/b.md: skipped"]
    assert len(persona_warnings("/a/b.md", ["/a/b.md: w"] * 500)) == 50


def test_files_without_persona_groups_the_warnings_of_files_that_gave_none():
    warnings = [
        "/a/x.md.d/bad.md:3: invalid YAML in frontmatter: …; file skipped",
        "/a/x.md.d/bad.md: a second note",
        "/a/good.md:4: unknown tool 'nope' (did you mean 'host_du'?)",
        "/a/dup.md: duplicate persona name 'good' (also in /a/good.md); /a/good.md is used, being first",
        "/locked: cannot read the folder: Permission denied",
    ]
    assert warning_path(warnings[0]) == "/a/x.md.d/bad.md" and warning_path(warnings[4]) == "/locked"
    assert files_without_persona(warnings, ["/a/good.md"]) == [
        {"path": "/a/dup.md", "warnings": [warnings[3]]},
        {"path": "/a/x.md.d/bad.md", "warnings": warnings[:2]},
        {"path": "/locked", "warnings": [warnings[4]]},
    ]
    assert files_without_persona([], ["/a/good.md"]) == []
