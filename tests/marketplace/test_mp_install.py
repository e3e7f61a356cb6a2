"""Install and uninstall on a real RegistryHolder and a real Store (docs/architecture.md §14)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
import trio
import trio.lowlevel
from mp_helpers import PluginSpec, make_wheel, need, setuptools_builds_wheels, write_index

from ongridd.errors import MarketplaceError, NotFound
from ongridd.marketplace import install as install_mod
from ongridd.marketplace.install import MarketplaceService
from ongridd.personas.prompt import compose_system_prompt
from ongridd.personas.skills import active_skills

DISK = "ongrid-example-diskreport"
POSTMORTEM = "ongrid-example-postmortem"


def _state(reg):
    """What a turn would see of a Registries object, as plain values."""
    return (dict(reg.tools), tuple(reg.stubs), dict(reg.agents.snapshot()), dict(reg.skills.snapshot()),
            dict(reg.routes))


async def test_example_round_trip_tool_persona_stub_and_change_events(example_env):
    env = example_env
    before = env.holder.current
    assert "find_deleted_open_files" not in before.tools
    result = await env.service.install(DISK, actor="alice")
    assert result["action"] == "installed" and result["version"] == "0.1.0"
    assert result["plugins"] == ["ongrid_example_diskreport"]
    assert result["registered"]["tools"] == ["find_deleted_open_files"]
    reg = env.holder.current
    assert reg is not before and reg.generation == before.generation + 1 == result["generation"]
    tool = reg.tools["find_deleted_open_files"]
    assert tool.plugin == "ongrid_example_diskreport" and tool.tool_class == "read"
    persona = reg.agents.by_name("disk-leak-hunter")
    assert persona is not None and "find_deleted_open_files" in persona.tools
    assert Path(persona.source).is_relative_to(env.plugins_root / DISK)
    assert [s.persona for s in reg.stubs if s.tool == "find_deleted_open_files"] == ["disk-leak-hunter"]
    assert env.plugin_dir_entries() == [DISK]
    # the tool really works, from the installed copy
    answer = await tool.handler({"min_size_mb": 0, "top_n": 5}, None)
    assert answer["processes_scanned"] >= 1 and isinstance(answer["files"], list)
    listed = {e["name"]: e for e in await env.service.list()}
    assert listed[DISK]["installed"] is True and listed[DISK]["installed_version"] == "0.1.0"
    assert listed[POSTMORTEM]["installed"] is False

    removed = await env.service.uninstall(DISK, actor="bob")
    assert removed["action"] == "uninstalled" and removed["version"] == "0.1.0"
    reg2 = env.holder.current
    assert "find_deleted_open_files" not in reg2.tools
    assert reg2.agents.by_name("disk-leak-hunter") is None
    assert all(s.tool != "find_deleted_open_files" for s in reg2.stubs)
    assert env.plugin_dir_entries() == []
    # the registries before the install are what they were (tools, stubs, personas)
    assert set(reg2.tools) == set(before.tools)
    assert {s.tool for s in reg2.stubs} == {s.tool for s in before.stubs}
    events = await env.store.plugin_store.list_change_events(kind="plugin")
    got = sorted((e["detail"]["action"], e["subject"], e["actor"]) for e in events)
    assert got == [("install", DISK, "alice"), ("uninstall", DISK, "bob")]
    install_event = next(e for e in events if e["detail"]["action"] == "install")
    assert install_event["detail"]["version"] == "0.1.0" and len(install_event["detail"]["sha256"]) == 64


async def test_example_skill_package(example_env):
    env = example_env
    agents = env.tmp / "agents"
    agents.mkdir()
    (agents / "incident-writer.md").write_text(
        "---\nname: incident-writer\ndescription: Writes incident summaries.\nskills: [postmortem-summary]\n"
        "---\nYou write incident summaries.\n", encoding="utf-8")
    result = await env.service.install(POSTMORTEM, actor="alice")
    assert [Path(p).name for p in result["registered"]["skills"]] == ["skills"]
    reg = env.holder.current
    skill = reg.skills.by_name("postmortem-summary")
    assert skill is not None and "Timeline (UTC)" in skill.body
    # a persona that switches the skill on gets its prompt block
    writer = reg.agents.by_name("incident-writer")
    found, missing = active_skills(writer, reg.skills.snapshot())
    assert missing == [] and found == [skill]
    prompt = compose_system_prompt(base="", persona=writer, skills=found)
    assert prompt.startswith("You write incident summaries.\n\n[能力: postmortem-summary]\nWhen the investigation")
    await env.service.uninstall(POSTMORTEM, actor="alice")
    reg = env.holder.current
    assert reg.skills.by_name("postmortem-summary") is None
    assert active_skills(reg.agents.by_name("incident-writer"), reg.skills.snapshot())[1] == ["postmortem-summary"]


async def test_same_version_reinstall_reuses_the_loaded_module(example_env):
    env = example_env
    await env.service.install(DISK, actor="a")
    module = sys.modules["ongrid_example_diskreport"]
    await env.service.uninstall(DISK, actor="a")
    again = await env.service.install(DISK, actor="a")
    assert again["reused_loaded_module"] is True
    assert sys.modules["ongrid_example_diskreport"] is module
    assert "find_deleted_open_files" in env.holder.current.tools
    assert env.holder.current.agents.by_name("disk-leak-hunter") is not None
    await env.service.uninstall(DISK, actor="a")


async def test_install_keeps_an_old_snapshot_unchanged(env):
    spec = PluginSpec()
    env.add(spec)
    old = env.holder.current
    old_state = _state(old)
    old_snapshot = old.agents.snapshot()
    await env.service.install(spec.dist, actor="t")
    assert env.holder.current is not old
    assert _state(old) == old_state  # a turn holding the old set sees exactly what it had
    assert old.agents.snapshot() is old_snapshot
    assert spec.tool not in old.tools and spec.persona not in old.agents.snapshot()
    new = env.holder.current
    assert spec.tool in new.tools and new.agents.by_name(spec.persona) is not None
    await env.service.uninstall(spec.dist, actor="t")
    assert spec.tool in new.tools  # and the install's snapshot keeps its plugin after the uninstall


BROKEN = [
    ("import_raises", "boom at import of the test plugin"),
    ("hook_raises", "hook exploded"),
    ("bad_persona", "persona file rejected"),
    ("stub_unknown_persona", "no-such-persona"),
    ("builtin_tool_name", "duplicate tool name 'host_bash'"),
    ("reserved_persona", "reserved persona 'reviewer'"),
    ("builtin_persona", "would replace the built-in persona"),
    ("persona_outside", "outside the package folder"),
    ("no_entry_point", "no 'ongrid' entry point"),
]


@pytest.mark.parametrize("variant,expected", BROKEN, ids=[b[0] for b in BROKEN])
async def test_a_broken_package_changes_nothing(env, variant, expected):
    if variant == "persona_outside":
        (env.tmp / "elsewhere").mkdir()
        (env.tmp / "elsewhere" / "x.md").write_text("---\nname: x-outside\ndescription: d\n---\nbody\n")
    spec = PluginSpec(variant)
    env.add(spec)
    before = env.holder.current
    state = _state(before)
    with pytest.raises(MarketplaceError) as info:
        await env.service.install(spec.dist, actor="t")
    assert expected in str(info.value)
    assert spec.dist in str(info.value)
    assert env.holder.current is before and _state(before) == state
    assert env.plugin_dir_entries() == []  # no plugin folder, no work folder
    assert spec.module not in sys.modules  # validated in another interpreter: never imported here
    assert await env.store.plugin_store.list_change_events(kind="plugin") == []


@pytest.mark.parametrize("when", ["wheel", "installed"])
async def test_a_package_over_the_size_limit_changes_nothing(env, monkeypatch, when):
    # the plugins folder shares the disk with the database: a wheel that unpacks to more than the
    # limit is refused before pip runs (its zip directory says so), and whatever pip installed is
    # measured after (dependencies included)
    from ongridd.marketplace import packages

    monkeypatch.setattr(packages, "MAX_INSTALLED_BYTES", 128 * 1024)
    if when == "installed":
        monkeypatch.setattr(packages, "wheel_unpacked_problem", lambda wheel: None)
    spec = PluginSpec("big_data")
    env.add(spec)
    before = env.holder.current
    with pytest.raises(MarketplaceError) as info:
        await env.service.install(spec.dist, actor="t")
    expected = ("KiB; a package may take at most 128 KiB installed" if when == "wheel"
                else "took more than 128 KiB installed")
    assert expected in str(info.value) and "not installed" in str(info.value), info.value
    assert env.holder.current is before and env.plugin_dir_entries() == []


async def test_bad_sha256_changes_nothing(env):
    spec = PluginSpec()
    env.add(spec, sha256="0" * 64)
    before = env.holder.current
    with pytest.raises(MarketplaceError, match="sha256 mismatch.*index.*says 0{64}"):
        await env.service.install(spec.dist, actor="t")
    assert env.holder.current is before and env.plugin_dir_entries() == []


async def test_tampered_wheel_after_indexing_is_refused(env):
    spec = PluginSpec()
    env.add(spec)
    wheel = env.tmp / "dist" / f"{spec.module}-0.1.0-py3-none-any.whl"
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    with pytest.raises(MarketplaceError, match="sha256 mismatch"):
        await env.service.install(spec.dist, actor="t")
    assert env.plugin_dir_entries() == []


async def test_a_file_pip_cannot_install_changes_nothing(env):
    spec = PluginSpec()
    bogus = env.tmp / "dist" / f"{spec.module}-0.1.0-py3-none-any.whl"
    bogus.parent.mkdir(parents=True)
    bogus.write_bytes(b"this is not a zip file")
    env.add(spec, source=bogus)
    before = env.holder.current
    with pytest.raises(MarketplaceError, match="pip could not install"):
        await env.service.install(spec.dist, actor="t")
    assert env.holder.current is before and env.plugin_dir_entries() == []


async def test_version_mismatch_is_refused(env):
    spec = PluginSpec()
    env.add(spec, version="9.9.9")
    with pytest.raises(MarketplaceError, match=r"index says version 9\.9\.9, the package is version 0\.1\.0"):
        await env.service.install(spec.dist, actor="t")
    assert env.plugin_dir_entries() == []


@pytest.mark.parametrize("module", ["json", "ongrid_host"])
async def test_a_package_shadowing_a_loaded_module_is_refused(env, module):
    spec = PluginSpec(module=module)
    spec.dist = f"shadow-{spec.token}"
    env.add(spec)
    with pytest.raises(MarketplaceError, match=f"module '{module}' is already imported from"):
        await env.service.install(spec.dist, actor="t")
    assert env.plugin_dir_entries() == []


async def test_another_version_of_a_loaded_plugin_needs_a_restart(env):
    v1 = PluginSpec()
    env.add(v1)
    await env.service.install(v1.dist, actor="t")
    await env.service.uninstall(v1.dist, actor="t")
    v2 = PluginSpec(module=v1.module, version="0.2.0")
    env.add(v2, source=v2.wheel(env.tmp / "dist2"))
    before = env.holder.current
    with pytest.raises(MarketplaceError, match=r"version 0\.1\.0 .*already loaded in this process; "
                                               r"restart the daemon to install version 0\.2\.0"):
        await env.service.install(v1.dist, actor="t")
    assert env.holder.current is before and env.plugin_dir_entries() == []
    # so is a different build that claims the same version
    rebuilt = make_wheel(env.tmp / "dist3", v1.dist, "0.1.0",
                         {**v1.files(), f"{v1.module}/extra.py": "CHANGED = True\n"}, {v1.module: v1.module})
    env.add(v1, source=rebuilt)
    with pytest.raises(MarketplaceError, match=r"a different build of version 0\.1\.0 .*restart the daemon"):
        await env.service.install(v1.dist, actor="t")
    assert env.holder.current is before and env.plugin_dir_entries() == []
    # the same version is fine again
    env.add(v1, source=env.tmp / "dist" / f"{v1.module}-0.1.0-py3-none-any.whl")
    result = await env.service.install(v1.dist, actor="t")
    assert result["reused_loaded_module"] is True and v1.tool in env.holder.current.tools


async def test_names_and_states_are_checked(env):
    spec = PluginSpec()
    env.add(spec)
    with pytest.raises(NotFound, match="no package 'nope' in the marketplace index"):
        await env.service.install("nope", actor="t")
    with pytest.raises(NotFound, match="not installed"):
        await env.service.uninstall(spec.dist, actor="t")
    for bad in ("../etc", ".staging-x", "a/b", ""):
        with pytest.raises(MarketplaceError, match="invalid package name"):
            await env.service.install(bad, actor="t")
        with pytest.raises(MarketplaceError, match="invalid package name"):
            await env.service.uninstall(bad, actor="t")
    await env.service.install(spec.dist, actor="t")
    with pytest.raises(MarketplaceError, match="already installed .*0.1.0.*uninstall it first"):
        await env.service.install(spec.dist, actor="t")


async def test_missing_source_and_invalid_index(env):
    spec = PluginSpec()
    write_index(env.index, [{"name": spec.dist, "version": "0.1.0", "description": "d",
                             "source": "dist/missing.whl", "sha256": "a" * 64}])
    with pytest.raises(MarketplaceError, match="missing.whl does not exist"):
        await env.service.install(spec.dist, actor="t")
    env.index.write_text("plugins:\n  - name: x\n    version: 1.0\n")
    with pytest.raises(MarketplaceError, match=r"index.yaml:3: plugins\[0\].version must be a string, got the number 1.0 \(quote it\)"):
        await env.service.list()


async def test_cancelled_install_changes_nothing(env, monkeypatch):
    spec = PluginSpec()
    env.add(spec)
    reached = trio.Event()
    real = install_mod.pip_install

    async def pip_then_hang(*args, **kwargs):
        await real(*args, **kwargs)
        reached.set()
        await trio.sleep_forever()

    monkeypatch.setattr(install_mod, "pip_install", pip_then_hang)
    before = env.holder.current
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: env.service.install(spec.dist, actor="t"))
        with trio.fail_after(60):
            await reached.wait()
        assert any(p.startswith(".staging-") for p in env.plugin_dir_entries())
        nursery.cancel_scope.cancel()
    assert env.holder.current is before and env.plugin_dir_entries() == []


async def test_leftover_work_folders_are_removed_at_start(env):
    for name in (".staging-x-1234", ".removing-y-5678"):
        (env.plugins_root / name / "junk").mkdir(parents=True)
    MarketplaceService(config=env.config, holder=env.holder, builder=env.builder, index_path=env.index)
    assert env.plugin_dir_entries() == []


async def test_concurrent_installs_are_serialised(env):
    a, b = PluginSpec(), PluginSpec()
    env.add(a)
    env.add(b)
    start = env.holder.current.generation
    async with trio.open_nursery() as nursery:
        for spec in (a, b):
            nursery.start_soon(lambda s=spec: env.service.install(s.dist, actor="t"))
    reg = env.holder.current
    assert reg.generation == start + 2
    assert a.tool in reg.tools and b.tool in reg.tools
    assert reg.agents.by_name(a.persona) and reg.agents.by_name(b.persona)


async def test_lookups_during_install_cycles_see_whole_registries(env):
    spec = PluginSpec()
    env.add(spec)
    seen = {"with": 0, "without": 0}
    done = trio.Event()

    def check(reg) -> None:
        has_tool = spec.tool in reg.tools
        has_persona = reg.agents.snapshot().get(spec.persona) is not None
        has_stub = any(s.tool == spec.tool for s in reg.stubs)
        assert has_tool == has_persona == has_stub, (has_tool, has_persona, has_stub)
        seen["with" if has_tool else "without"] += 1

    async def lookups() -> None:
        try:
            while not done.is_set():
                check(env.holder.current)
                await trio.sleep(0.0005)  # continuous lookups that leave the install room to run
        except BaseException:
            done.set()  # a failure must end the lookup thread too, or the nursery waits forever
            raise

    def thread_lookups() -> None:
        while not done.is_set():
            check(env.holder.current)
            time.sleep(0.0005)  # let the other threads have the GIL

    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(lookups)
        nursery.start_soon(lambda: trio.to_thread.run_sync(thread_lookups))
        for _ in range(2):
            await env.service.install(spec.dist, actor="t")
            check(env.holder.current)
            await env.service.uninstall(spec.dist, actor="t")
        done.set()
    assert seen["with"] > 0 and seen["without"] > 0


async def test_broken_user_agents_do_not_block_an_install(env):
    """Broken persona files during a marketplace-triggered rebuild: the broken files are
    skipped with warnings, the good one loads, the install goes through."""
    agents = env.tmp / "agents"
    (agents / "good").mkdir(parents=True)
    (agents / "bad").mkdir()
    (agents / "good" / "specialist-sre.md").write_text(
        "---\nname: specialist-sre\ndescription: SRE specialist.\ntools: [query_promql]\n---\nYou are the SRE.\n")
    (agents / "bad" / "rollout.md").write_text(
        '---\nname: rollout-helper\ndescription: Helps with rollouts\nuser: "roll back web"\n'
        "\ttools: [query_devices]\n---\nbody\n")
    (agents / "bad" / "latin1.md").write_bytes(b"---\nname: latin\ndescription: d\n---\ncaf\xe9\n")
    (agents / "bad" / "nofm.md").write_text("just a body\n")
    spec = PluginSpec()
    env.add(spec)
    await env.service.install(spec.dist, actor="t")
    reg = env.holder.current
    assert reg.agents.by_name("specialist-sre").source.endswith("good/specialist-sre.md")
    assert spec.tool in reg.tools
    report = reg.agents.last_report
    assert report.skipped == 3
    text = "\n".join(report.warnings)
    for pattern in (r"bad/rollout\.md:\d+: .*tab", r"bad/latin1\.md.*not valid UTF-8 \(byte 0xE9 at offset",
                    r"bad/nofm\.md.*missing frontmatter"):
        assert re.search(pattern, text), (pattern, text)


async def test_folder_source_is_built_offline_and_left_clean(env):
    need(setuptools_builds_wheels(), "setuptools >= 70.1 in the daemon's environment (folder sources)")
    spec = PluginSpec()
    project = spec.project(env.tmp / "projects")
    (project / "build").mkdir()  # build by-products are not hashed and not copied
    (project / "build" / "stale.py").write_text("raise SystemExit('stale build output used')\n")
    env.add(spec, source=project)
    result = await env.service.install(spec.dist, actor="t")
    assert result["registered"]["tools"] == [spec.tool]
    assert sorted(p.name for p in project.iterdir()) == sorted(["build", "pyproject.toml", spec.module])
    tool = env.holder.current.tools[spec.tool]
    assert (await tool.handler({"text": "hi"}, None))["echo"] == "hi"


async def test_a_user_agent_that_broke_keeps_its_persona_across_an_install(env):
    agents = env.tmp / "agents"
    agents.mkdir(exist_ok=True)
    path = agents / "db-helper.md"
    path.write_text("---\nname: db-helper\ndescription: Works.\n---\nYou help.\n", encoding="utf-8")
    env.holder.swap(await env.builder.build())  # the daemon loaded it while it was good
    path.write_text("---\nname: db-helper\ndescription: [unclosed\n---\n", encoding="utf-8")
    spec = PluginSpec()
    env.add(spec)
    result = await env.service.install(spec.dist, actor="t")
    kept = env.holder.current.agents.by_name("db-helper")
    assert kept is not None and kept.description == "Works."
    assert f"{path}: keeping the persona 'db-helper' it produced last time" in result["warnings"]
    removed = await env.service.uninstall(spec.dist, actor="t")
    assert env.holder.current.agents.by_name("db-helper").description == "Works."
    assert any("keeping the persona 'db-helper'" in w for w in removed["warnings"])
    # deleting the file really removes it at the next rebuild
    path.unlink()
    await env.service.install(spec.dist, actor="t")
    assert env.holder.current.agents.by_name("db-helper") is None


def test_a_tree_of_folders_counts_against_the_limit(tmp_path, monkeypatch):
    # 100 one-byte files 900 folders deep: a 373 KB wheel that made 90,104 folders (353 MB) on disk
    import zipfile

    from ongridd.marketplace import packages

    wheel = tmp_path / "dirbomb-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for i in range(100):
            zf.writestr(f"dirbomb/b{i}/" + "d/" * 900 + "f.txt", "x")
    assert "more than 20,000 files and folders" in packages.wheel_unpacked_problem(wheel)
    small = tmp_path / "small.whl"
    with zipfile.ZipFile(small, "w") as zf:
        zf.writestr("pkg/a/b/c.py", "x = 1\n")
    assert packages.wheel_unpacked_problem(small) is None
    installed = tmp_path / "installed"
    for i in range(3):
        (installed / f"b{i}" / ("d/" * 300)).mkdir(parents=True)
    assert packages.installed_size_problem(installed) is None
    monkeypatch.setattr(packages, "MAX_INSTALLED_FILES", 500)
    assert "more than 500 files and folders" in packages.installed_size_problem(installed)
