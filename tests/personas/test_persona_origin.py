"""Where a persona came from (builtin, plugin:<name>, user) and the warnings about its file."""

from __future__ import annotations

from types import SimpleNamespace

from ongridd.personas.origin import persona_origin, persona_warnings


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
