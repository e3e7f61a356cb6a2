"""The plugin manager (docs/architecture.md §13): built-in, entry-point and path plugins
through one code path; a faulty plugin is reported and skipped entirely."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest

from ongridd.cli import ongrid_main
from ongridd.config import structure
from ongridd.plugins import manager
from ongridd.plugins.manager import BUILTIN_PLUGINS, collect, known_tool_names
from ongridd.tools.stubs import DEFAULT_STUBS

SAMPLES = Path(__file__).resolve().parent / "samples"


@pytest.fixture(autouse=True)
def samples_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(SAMPLES))


def config(tmp_path, **plugins):
    return structure({"state_dir": str(tmp_path / "state"), "plugins": plugins})


def run(tmp_path, names, **kw):
    kw.setdefault("entry_points", False)
    kw.setdefault("extra_paths", [])
    cfg = kw.pop("cfg", None) or config(tmp_path)
    return collect(cfg, builtins=names, **kw)


def by_name(contributions):
    return {r.name: r for r in contributions.report}


def test_good_plugin_contributes_everything(tmp_path):
    out = run(tmp_path, ["ongridtest_good"])
    [report] = out.report
    assert report.ok and report.source == "builtin" and report.error is None
    assert report.location.endswith("ongridtest_good.py")
    assert report.registered == {
        "tools": ["sample_echo", "sample_restart"],
        "redirect_stubs": ["sample_hallucinated"],
        "personas": [str(SAMPLES / "good_agents")],
        "skills": [str(SAMPLES / "good_skills")],
        "routes": ["GET /api/plugins/sample/status"],
    }
    assert set(out.tools) == {"sample_echo", "sample_restart"}
    assert out.tools["sample_echo"].plugin == "ongridtest_good"
    assert out.stubs[:len(DEFAULT_STUBS)] == DEFAULT_STUBS
    assert out.stubs[-1].tool == "sample_hallucinated" and out.stubs[-1].plugin == "ongridtest_good"
    assert out.persona_paths == (SAMPLES / "good_agents",)
    assert out.skill_paths == (SAMPLES / "good_skills",)
    [route] = out.routes
    assert (route.plugin, route.method, route.path) == ("ongridtest_good", "GET", "/api/plugins/sample/status")


def test_context_factory_gets_the_plugin_name_and_settings(tmp_path):
    import ongridtest_good

    cfg = config(tmp_path, settings={"ongridtest_good": {"greeting": "hi"}})
    run(tmp_path, ["ongridtest_good"], cfg=cfg)
    context = ongridtest_good.CONTEXTS[-1]
    assert context.plugin_name == "ongridtest_good"
    assert dict(context.settings) == {"greeting": "hi"}
    assert context.hosts[0].name == "local"
    seen = []

    def factory(name):
        seen.append(name)
        return manager.default_context_factory(cfg)(name)

    collect(cfg, factory, builtins=["ongridtest_good"], entry_points=False, extra_paths=[])
    assert seen == ["ongridtest_good"]  # once per plugin, shared by its hooks


@pytest.mark.parametrize("bad, expected", [
    ("ongridtest_import_error", "failed to import: RuntimeError: this plugin cannot be imported: missing libfoo"),
    ("ongridtest_hook_raises", "KeyError: 'settings.url'"),
    ("ongridtest_invalid_tool", "needs a 'reason' parameter"),
    ("ongridtest_misspelled", "unknown hook (misspelled?)"),
    ("ongridtest_bad_signature", "invalid hook implementation"),
    ("ongridtest_bad_registrations", "does not exist"),
    ("ongridtest_reserved", "'AgentTool' is reserved for the runtime"),
    ("ongridtest_not_there", "failed to import: ModuleNotFoundError"),
])
def test_faulty_plugin_is_reported_and_skipped_others_kept(tmp_path, bad, expected):
    out = run(tmp_path, [bad, "ongridtest_good"])
    reports = by_name(out)
    assert not reports[bad].ok and expected in reports[bad].error
    assert reports[bad].registered == {}
    assert reports["ongridtest_good"].ok
    # none of the faulty plugin's registrations is kept
    assert set(out.tools) == {"sample_echo", "sample_restart"}
    assert [s.tool for s in out.stubs[len(DEFAULT_STUBS):]] == ["sample_hallucinated"]
    assert all(t.plugin == "ongridtest_good" for t in out.tools.values())
    assert [f.name for f in out.failed] == [bad]


def test_misspelled_hook_names_the_hook(tmp_path):
    out = run(tmp_path, ["ongridtest_misspelled"])
    assert "ongrid_register_tool" in out.report[0].error


def test_duplicate_tool_across_plugins_names_both_and_skips_the_later(tmp_path):
    out = run(tmp_path, ["ongridtest_good", "ongridtest_duplicate"])
    reports = by_name(out)
    assert reports["ongridtest_good"].ok
    assert not reports["ongridtest_duplicate"].ok
    assert ("duplicate tool name 'sample_echo': registered by plugin ongridtest_good and by plugin "
            "ongridtest_duplicate") in reports["ongridtest_duplicate"].error
    assert "duplicate_unique" not in out.tools


def test_disabled_plugin_is_not_loaded(tmp_path):
    cfg = config(tmp_path, disabled=["ongridtest_good", "ongridtest_import_error"])
    out = run(tmp_path, ["ongridtest_good", "ongridtest_import_error"], cfg=cfg)
    assert all(r.disabled and not r.ok for r in out.report)
    assert "plugins.disabled" in out.report[0].error
    assert len(out.tools) == 0 and out.failed == []


def test_same_name_twice_keeps_the_first(tmp_path):
    out = run(tmp_path, ["ongridtest_good", "ongridtest_good"])
    assert [r.ok for r in out.report] == [True, False]
    assert "already loaded" in out.report[1].error


def _make_dist(root: Path, module: str, body: str, *, entry_name: str | None = None) -> None:
    """A pip --target style install: the module plus a dist-info with an ``ongrid`` entry point."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(body)
    info = root / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[ongrid]\n{entry_name or module} = {module}\n")


PATH_PLUGIN = '''
from ongridd.plugins.api import Tool, hookimpl

async def _h(args, ctx):
    return "from a folder"

@hookimpl
def ongrid_register_tools(register, context):
    register(Tool(name="{tool}", description="a marketplace tool", handler=_h))
'''


def test_path_plugins_load_through_their_entry_points(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # restored even if an assertion fails
    module = f"ongridtest_mkt_{uuid.uuid4().hex[:8]}"
    state = tmp_path / "state"
    folder = state / "plugins" / "sample-mkt"
    _make_dist(folder, module, PATH_PLUGIN.format(tool="mkt_tool"))
    (state / "plugins" / "empty").mkdir()
    cfg = config(tmp_path)
    assert manager.plugin_search_paths(cfg) == [state / "plugins" / "empty", folder]
    out = collect(cfg, builtins=["ongridtest_good"], entry_points=True)
    reports = by_name(out)
    assert reports[module].ok and reports[module].source == "path"
    assert reports[module].location == str(folder)
    assert out.tools["mkt_tool"].plugin == module
    assert not reports["empty"].ok and "no 'ongrid' entry point" in reports["empty"].error
    # the folder is now on sys.path, yet its plugin is not listed again as an environment entry point
    assert [r.name for r in out.report].count(module) == 1
    assert str(folder.resolve()) in sys.path
    # uninstalled (no longer among the folders): not picked up again as an environment entry point
    again = collect(cfg, builtins=[], entry_points=True, extra_paths=[])
    assert module not in by_name(again) and "mkt_tool" not in again.tools


def test_environment_entry_points_load_like_builtins(tmp_path, monkeypatch):
    module = f"ongridtest_ep_{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    _make_dist(site, module, PATH_PLUGIN.format(tool="ep_tool"), entry_name="sample-ep")
    monkeypatch.syspath_prepend(str(site))
    out = collect(config(tmp_path), builtins=[], entry_points=True, extra_paths=[])
    reports = by_name(out)
    assert reports["sample-ep"].ok and reports["sample-ep"].source == "entry point"
    assert reports["sample-ep"].location == f"{module} 1.0"
    assert out.tools["ep_tool"].plugin == "sample-ep"


def test_first_party_plugins_are_builtins(tmp_path):
    out = collect(config(tmp_path), entry_points=False, extra_paths=[])
    assert [r.name for r in out.report] == list(BUILTIN_PLUGINS)
    assert all(r.source == "builtin" for r in out.report)
    for report in out.report:  # loaded, or reported with the reason (a plugin not written yet)
        assert report.ok or report.error


def test_known_tool_names_include_control_tools(tmp_path, monkeypatch):
    monkeypatch.setattr(manager, "BUILTIN_PLUGINS", ("ongridtest_good",))
    monkeypatch.setattr(manager, "collect", lambda cfg, factory=None: collect(
        cfg, factory, builtins=["ongridtest_good"], entry_points=False, extra_paths=[]))
    names = known_tool_names(config(tmp_path))
    assert {"sample_echo", "sample_restart", "AgentTool", "SendMessage", "TaskStop"} <= names


def test_cli_plugins_list_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(manager, "BUILTIN_PLUGINS", ("ongridtest_good", "ongridtest_import_error"))
    monkeypatch.setattr(manager, "collect", lambda cfg, factory=None, **kw: collect(
        cfg, factory, builtins=manager.BUILTIN_PLUGINS, entry_points=False, extra_paths=[]))
    with pytest.raises(SystemExit) as exit_info:
        ongrid_main(["plugins", "list", "--json", "--state-dir", str(tmp_path / "state")])
    assert exit_info.value.code == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["source"], r["ok"]) for r in rows] == [
        ("ongridtest_good", "builtin", True), ("ongridtest_import_error", "builtin", False)]
    assert rows[0]["registered"]["tools"] == ["sample_echo", "sample_restart"]
    assert "missing libfoo" in rows[1]["error"]


def test_cli_plugins_list_text_and_config_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(manager, "collect", lambda cfg, factory=None, **kw: collect(
        cfg, factory, builtins=["ongridtest_good", "ongridtest_misspelled"], entry_points=False, extra_paths=[]))
    with pytest.raises(SystemExit) as exit_info:
        ongrid_main(["plugins", "list", "--state-dir", str(tmp_path / "state")])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "ongridtest_good  [builtin]  ok" in out and "tools: sample_echo, sample_restart" in out
    assert "ongridtest_misspelled  [builtin]  FAILED" in out and "unknown hook" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("plugins: {disabled: 3}\n")
    with pytest.raises(SystemExit) as exit_info:
        ongrid_main(["plugins", "list", "--config", str(bad)])
    assert exit_info.value.code == 2
    assert "config.plugins.disabled" in capsys.readouterr().err


def test_hooks_are_called_through_pluggy_one_plugin_at_a_time(tmp_path, monkeypatch):
    import pluggy

    calls: list[tuple[str, list[str]]] = []

    class Monitored(pluggy.PluginManager):
        def __init__(self, project_name: str) -> None:
            super().__init__(project_name)
            self.add_hookcall_monitoring(
                lambda hook_name, impls, kwargs: calls.append((hook_name, [self.get_name(i.plugin) for i in impls])),
                lambda outcome, hook_name, impls, kwargs: None)

    monkeypatch.setattr(manager.pluggy, "PluginManager", Monitored)
    out = run(tmp_path, ["ongridtest_good", "ongridtest_duplicate"])
    assert by_name(out)["ongridtest_good"].ok
    assert ("ongrid_register_tools", ["ongridtest_good"]) in calls
    # each call reaches only the plugin being loaded, never an earlier one
    assert all(len(names) == 1 for _, names in calls)
    assert {names[0] for _, names in calls} == {"ongridtest_good", "ongridtest_duplicate"}
