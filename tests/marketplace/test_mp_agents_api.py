"""User-agent editing (PUT/DELETE) and hot reload (docs/architecture.md §6)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
import trio
import trio.lowlevel
from mp_helpers import PluginSpec, make_config

from ongridd.errors import NotFound, OngridError, PersonaError
from ongridd.marketplace.agents_api import AgentsAPI
from ongridd.plugins.build import RegistryBuilder
from ongridd.runtime.registries import RegistryHolder
from ongridd.store import open_store

PERSONA = """---
name: {name}
description: {description}
tools: [{tools}]
permission_mode: read-only
---
You are {name}.
"""


def persona(name: str, description: str = "A user agent.", tools: str = "get_host_load") -> str:
    return PERSONA.format(name=name, description=description, tools=tools)


@pytest.fixture
async def api(tmp_path: Path):
    config = make_config(tmp_path)
    async with open_store(config.database_url) as store:
        builder = RegistryBuilder(config=config, store=store)
        holder = RegistryHolder(await builder.build())
        yield AgentsAPI(config=config, holder=holder, builder=builder, store=store)


async def _events(api: AgentsAPI) -> list[tuple[str, str, str]]:
    rows = await api.store.plugin_store.list_change_events(kind="persona")
    return sorted((r["detail"]["action"], r["subject"], r["actor"]) for r in rows)


async def test_put_writes_the_file_and_replaces_live(api):
    out = await api.put("db-helper", persona("db-helper", tools="get_host_load, no_such_tool"), actor="alice")
    path = api.config.agents_write_dir / "db-helper.md"
    assert path.read_text(encoding="utf-8") == persona("db-helper", tools="get_host_load, no_such_tool")
    assert out["name"] == "db-helper" and out["source"] == str(path)
    assert any("unknown tool 'no_such_tool'" in w for w in out["warnings"])
    live = api.agents.by_name("db-helper")
    assert live is not None and live.tools == ("get_host_load", "no_such_tool")
    assert (await api.get("db-helper"))["body"].strip() == "You are db-helper."
    assert await _events(api) == [("update", "db-helper", "alice")]
    # a new file gets the usual mode (0666 less the umask), not a temporary file's 0600
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    # a second PUT replaces it, keeping the mode the operator gave the file
    path.chmod(0o640)
    await api.put("db-helper", persona("db-helper", description="Second version."), actor="bob")
    assert api.agents.by_name("db-helper").description == "Second version."
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


async def test_get_gives_the_file_as_written_comments_included(api):
    # the editor edits the operator's file: its comments and layout come back as written
    text = ("---\n# owner: team-tls, ticket OPS-123\nname: cert-helper\ndescription: Checks certificates.  # keep short\n"
            "when_to_use: A certificate question.\ntools: [host_probe_http]\n---\nYou check certificates.\n")
    await api.put("cert-helper", text, actor="alice")
    got = await api.get("cert-helper")
    assert got["text"] == text and got["text_from"] == "file"
    # the body edited on disk, not reloaded yet: the text shown is the loaded persona's, as its body is
    path0 = api.config.agents_write_dir / "cert-helper.md"
    path0.write_text(text.replace("You check certificates.", "You check certificates, edited."))
    edited = await api.get("cert-helper")
    assert edited["text_from"] == "fields" and "edited" not in edited["text"]
    path0.write_text(text)
    # swapped for a symlink to another file the daemon can read: not shown (the loaded persona's fields are)
    path = api.config.agents_write_dir / "cert-helper.md"
    secret = api.config.agents_write_dir.parent / "outside.txt"
    secret.write_text("AWS_SECRET_ACCESS_KEY=abcdefghijklmnop\n")
    path.rename(path.with_suffix(".bak"))
    path.symlink_to(secret)
    swapped = await api.get("cert-helper")
    assert swapped["text_from"] == "fields" and "abcdefghijklmnop" not in swapped["text"]
    path.unlink()
    # the file gone (the watcher has not reloaded yet): rebuilt from the loaded persona's fields
    rebuilt = await api.get("cert-helper")
    assert rebuilt["text_from"] == "fields" and "name: cert-helper" in rebuilt["text"]
    assert "# owner" not in rebuilt["text"]


@pytest.mark.parametrize("text,message", [
    (persona("other-name"), "does not match the URL's 'db-helper'"),
    ("no frontmatter at all\n", "missing frontmatter"),
    ("---\nname: db-helper\n---\nbody\n", "missing required key 'description'"),
])
async def test_put_refuses_a_bad_persona_and_writes_nothing(api, text, message):
    before = api.agents.snapshot()
    with pytest.raises(PersonaError, match=message):
        await api.put("db-helper", text, actor="alice")
    assert not (api.config.agents_write_dir / "db-helper.md").exists()
    assert api.agents.snapshot() is before
    assert await _events(api) == []


async def test_a_rejected_put_blames_the_text_sent_not_the_file(api):
    # the file on disk is untouched: the message names the line of the text sent, and says nothing was saved
    path = api.config.agents_write_dir / "db-helper.md"
    with pytest.raises(PersonaError) as refused:
        await api.put("db-helper", "---\nname: db-helper\ndescription: [unclosed\n---\nbody\n", actor="alice")
    assert str(path) not in str(refused.value) and "file skipped" not in str(refused.value)
    assert str(refused.value).startswith("persona rejected: line ")
    assert refused.value.warnings and refused.value.warnings[0].startswith("line ")
    assert "of the text sent" in refused.value.warnings[0]


async def test_a_refused_put_says_what_made_it_unusable_and_lists_the_rest_as_warnings(api):
    text = ("---\nname: db-helper\ndescription: d\ntools: [host_stat_file, host_stat_file]\n"
            "max_turns: zero\n---\nbody\n")
    with pytest.raises(PersonaError) as refused:
        await api.put("db-helper", text, actor="alice")
    message = str(refused.value)
    assert message.startswith("persona rejected: line 5 of the text sent: 'max_turns' must be"), message
    assert "twice" not in message  # a warning that alone would not refuse it is not the reason
    assert any("'tools' lists 'host_stat_file' twice" in w for w in refused.value.warnings)


async def test_put_refuses_a_persona_holding_a_secret_the_daemon_holds(api):
    """A persona is shown to every user and sent to the model: a held token in it is refused, not stored."""
    from ongridd.secretset import REGISTRY

    token = "tok-persona-leak-0123456789abcdef"
    before = api.agents.snapshot()
    with REGISTRY.hold([token]):
        with pytest.raises(PersonaError, match="contains a secret value the daemon holds") as caught:
            await api.put("db-helper", persona("db-helper") + f"Log in with {token}.\n", actor="alice")
    assert token not in str(caught.value)
    assert not (api.config.agents_write_dir / "db-helper.md").exists()
    assert api.agents.snapshot() is before
    escaped = "".join(f"\\x{ord(c):02x}" for c in token)  # YAML decodes "\x74\x6f…" to the token itself
    with REGISTRY.hold([token]):
        with pytest.raises(PersonaError, match="contains a secret value the daemon holds"):
            await api.put("db-helper", persona("db-helper", description=f'"{escaped}"'), actor="alice")
    assert not (api.config.agents_write_dir / "db-helper.md").exists()


async def test_a_secret_an_editor_wrapped_over_two_lines_is_neither_shown_nor_stored(api):
    from ongridd.secretset import REGISTRY

    token = "tok-persona-wrap-0123456789abcdef"
    wrapped = persona("db-helper") + f"Log in with {token[:12]}\n  {token[12:]} when asked.\n"
    with REGISTRY.hold([token]):
        with pytest.raises(PersonaError, match="contains a secret value the daemon holds"):
            await api.put("db-helper", wrapped, actor="alice")
        assert not (api.config.agents_write_dir / "db-helper.md").exists()
        # dropped into the folder by hand: loaded (an operator's file), but no API answer shows the pieces
        path = api.config.agents_write_dir / "db-helper.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(wrapped)
        await api.reload()
        got = await api.get("db-helper")
        listed = next(p for p in api.list() if p["name"] == "db-helper")
    for shown in (got["text"], got["body"], str(listed)):
        assert token[:12] not in shown and token[12:] not in shown, shown
    assert "Log in with [redacted] when asked." in got["body"]


async def test_delete_removes_a_user_agent(api):
    await api.put("db-helper", persona("db-helper"), actor="alice")
    out = await api.delete("db-helper", actor="alice")
    assert out == {"name": "db-helper", "deleted": True, "restored_builtin": False}
    assert api.agents.by_name("db-helper") is None
    assert not (api.config.agents_write_dir / "db-helper.md").exists()
    assert await _events(api) == [("delete", "db-helper", "alice"), ("update", "db-helper", "alice")]
    with pytest.raises(NotFound, match="no persona 'db-helper'"):
        await api.delete("db-helper", actor="alice")


async def test_put_edits_the_file_that_defines_the_persona_whatever_its_file_name(api):
    # a second file of the same name would lose against the first one at the next reload: the edit undone,
    # and a delete would then remove the other file
    own = api.config.agents_write_dir / "my-agent.md"
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_text(persona("specialist-logs", description="Reads logs."))
    await api.reload()
    assert api.agents.by_name("specialist-logs").description == "Reads logs."
    await api.put("specialist-logs", persona("specialist-logs", description="Reads logs v2."), actor="alice")
    assert "Reads logs v2." in own.read_text() and not (own.parent / "specialist-logs.md").exists()
    await api.reload()
    assert api.agents.by_name("specialist-logs").description == "Reads logs v2."
    assert api.agents.by_name("specialist-logs").source == str(own)
    out = await api.delete("specialist-logs", actor="alice")
    assert out == {"name": "specialist-logs", "deleted": True, "restored_builtin": False}
    assert not own.exists() and api.agents.by_name("specialist-logs") is None


async def test_delete_says_when_another_file_still_defines_the_persona(api):
    first, second = (api.config.agents_write_dir / f"{n}.md" for n in ("a-logs", "b-logs"))
    first.parent.mkdir(parents=True, exist_ok=True)
    first.write_text(persona("logs-helper", description="First."))
    second.write_text(persona("logs-helper", description="Second."))
    await api.reload()
    out = await api.delete("logs-helper", actor="alice")
    assert out == {"name": "logs-helper", "deleted": True, "restored_builtin": False, "now_from": str(second)}
    assert not first.exists() and api.agents.by_name("logs-helper").description == "Second."


async def test_a_builtin_cannot_be_deleted_only_overridden(api):
    builtin = api.agents.by_name("specialist-disk")
    assert builtin is not None and api.agents.builtin("specialist-disk") is builtin
    with pytest.raises(OngridError, match="built-in persona: it cannot be deleted, only overridden"):
        await api.delete("specialist-disk", actor="alice")
    assert api.agents.by_name("specialist-disk") is builtin
    await api.put("specialist-disk", persona("specialist-disk", description="Our own disk specialist."),
                  actor="alice")
    assert api.agents.by_name("specialist-disk").description == "Our own disk specialist."
    out = await api.delete("specialist-disk", actor="alice")
    assert out["restored_builtin"] is True
    assert api.agents.by_name("specialist-disk") == builtin  # the folders reloaded: the same file, parsed again
    with pytest.raises(OngridError, match="cannot be deleted"):
        await api.delete("specialist-disk", actor="alice")


async def test_a_plugin_persona_cannot_be_deleted_through_the_api(env):
    spec = PluginSpec()
    env.add(spec)
    await env.service.install(spec.dist, actor="t")
    api = AgentsAPI(config=env.config, holder=env.holder, builder=env.builder, store=env.store)
    with pytest.raises(OngridError, match="not from a user agents folder"):
        await api.delete(spec.persona, actor="t")
    assert env.holder.current.agents.by_name(spec.persona) is not None


async def test_reload_keeps_the_persona_of_a_file_that_breaks(api):
    folder = api.config.agents_write_dir
    folder.mkdir(parents=True)
    (folder / "db-helper.md").write_text(persona("db-helper", description="Works."), encoding="utf-8")
    report = await api.reload()
    assert api.agents.by_name("db-helper").description == "Works."
    (folder / "db-helper.md").write_text("---\nname: db-helper\ndescription: [unclosed\n---\n", encoding="utf-8")
    report = await api.reload()
    kept = api.agents.by_name("db-helper")
    assert kept is not None and kept.description == "Works."
    assert report.skipped == 1
    assert any("db-helper.md" in w and "keeping the persona 'db-helper' it produced last time" in w
               for w in report.warnings)
    assert api.last_reload_warnings == report.warnings
    (folder / "db-helper.md").write_text(persona("db-helper", description="Fixed."), encoding="utf-8")
    await api.reload()
    assert api.agents.by_name("db-helper").description == "Fixed."


async def test_100_reload_cycles_never_show_a_partial_registry(api, quick_gil_handover):
    folder = api.config.agents_write_dir
    folder.mkdir(parents=True)
    names = [f"user-agent-{i:02d}" for i in range(20)]
    builtins = {n for n in api.agents.snapshot() if not n.startswith("user-agent-")}

    def write_generation(gen: int) -> None:
        for n in names:
            (folder / f"{n}.md").write_text(persona(n, description=f"generation {gen}"), encoding="utf-8")

    write_generation(0)
    await api.reload()
    done = trio.Event()
    observed = {"snapshots": 0, "generations": set()}

    def check() -> int:
        snap = api.holder.current.agents.snapshot()  # what a starting turn takes
        users = [p for n, p in snap.items() if n.startswith("user-agent-")]
        assert len(users) == len(names), f"partial registry: {len(users)} user agents"
        gens = {p.description for p in users}
        assert len(gens) == 1, f"mixed generations in one snapshot: {sorted(gens)}"
        assert builtins <= set(snap)
        observed["snapshots"] += 1
        return int(gens.pop().split()[1])

    async def task_lookups() -> None:
        last = 0
        try:
            while not done.is_set():
                gen = check()
                assert gen >= last, "a later lookup saw an older registry"
                last = gen
                observed["generations"].add(gen)
                await trio.sleep(0.0005)  # look up continuously, but leave the reload room to run
        except BaseException:
            done.set()  # a failure must end the lookup thread too, or the nursery waits forever
            raise

    def thread_lookups() -> None:
        last = 0
        while not done.is_set():
            gen = check()
            assert gen >= last
            last = gen
            time.sleep(0.0005)  # let the other threads have the GIL

    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(task_lookups)
        nursery.start_soon(lambda: trio.to_thread.run_sync(thread_lookups))
        for gen in range(1, 101):
            await trio.to_thread.run_sync(write_generation, gen)
            await api.reload()
        done.set()
    assert check() == 100
    assert observed["snapshots"] > 100 and len(observed["generations"]) > 10


async def test_the_watcher_reloads_on_a_change(api):
    folder = api.config.agents_write_dir
    folder.mkdir(parents=True)
    reloaded = trio.Event()
    real = api.reload

    async def reload_and_tell():
        report = await real()
        reloaded.set()
        return report

    api.reload = reload_and_tell
    async with trio.open_nursery() as nursery:
        nursery.start_soon(api.watch, 0.01)
        # the event watcher has no "ready" signal: write until a reload comes (a write before the
        # watch started is missed; the next one is not)
        with trio.fail_after(20):
            while not reloaded.is_set():
                (folder / "fresh.md").write_text(persona("fresh"), encoding="utf-8")
                with trio.move_on_after(1):
                    await reloaded.wait()
        assert api.agents.by_name("fresh") is not None
        nursery.cancel_scope.cancel()


# ---- bounded parsing of untrusted bodies -------------------------------------------


@pytest.mark.parametrize("variant", ["laughs", "map-laughs", "merge-laughs", "string-laughs", "recursive",
                                     "alias-flood", "deep"])
async def test_put_refuses_alias_bombs_with_warnings_and_writes_nothing(api, variant):
    from tests.bombs import REASONS, TYPED_KEYS, bomb

    before = api.agents.snapshot()
    for key in TYPED_KEYS:
        text = bomb(variant, key).replace("name: bomb", "name: db-helper")
        started = time.monotonic()
        with pytest.raises(PersonaError) as info:
            await api.put("db-helper", text, actor="alice")
        assert time.monotonic() - started < 5
        assert info.value.warnings and any(REASONS[variant] in w for w in info.value.warnings), info.value.warnings
        assert not info.value.too_large and len(str(info.value)) < 2000
    assert not (api.config.agents_write_dir / "db-helper.md").exists()
    assert api.agents.snapshot() is before
    assert await _events(api) == []


async def test_put_refuses_an_oversized_body_as_too_large(api):
    from ongridd.personas.frontmatter import MAX_FILE_BYTES

    with pytest.raises(PersonaError, match="persona too large") as info:
        await api.put("db-helper", persona("db-helper") + "x" * MAX_FILE_BYTES, actor="alice")
    assert info.value.too_large
    assert api.max_body_bytes == MAX_FILE_BYTES


async def test_a_parse_that_overruns_is_abandoned_and_the_loop_keeps_running(api, monkeypatch):
    """The last resort: a parse slower than the limit (here a stand-in that
    sleeps) answers an error at the limit; the loop never stalls; at most
    PARSE_CONCURRENCY parses run at once, abandoned ones included."""
    import threading

    from ongridd.marketplace import agents_api as module

    running, peak, lock = [0], [0], threading.Lock()

    def slow_parse(*_args, **_kwargs):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(1.5)
        with lock:
            running[0] -= 1
        return None, ["never used"]

    monkeypatch.setattr(module, "parse_persona_text", slow_parse)
    api.parse_time_limit_s = 0.3
    gaps: list[float] = []

    async def ticker(task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        last = time.monotonic()
        while True:
            await trio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    errors: list[PersonaError] = []

    async def one_put():
        started = time.monotonic()
        with pytest.raises(PersonaError) as info:
            await api.put("db-helper", persona("db-helper"), actor="alice")
        assert time.monotonic() - started < 1.0
        errors.append(info.value)

    async with trio.open_nursery() as nursery:
        await nursery.start(ticker)
        async with trio.open_nursery() as puts:
            for _ in range(4):
                puts.start_soon(one_put)
        nursery.cancel_scope.cancel()
    assert len(errors) == 4
    assert all("not parsed within 0.3 s" in str(e) and len(e.warnings) == 1 for e in errors)
    assert max(gaps) < 0.25
    await trio.sleep(2)  # let the abandoned threads end
    assert peak[0] == module.PARSE_CONCURRENCY
    assert not (api.config.agents_write_dir / "db-helper.md").exists()


def test_a_write_or_removal_goes_only_through_a_folder_that_lies_in_a_user_agents_folder(tmp_path):
    # the folder is checked on an open descriptor, and the file is written and renamed through it: a
    # folder swapped for a symlink to somewhere else after the API looked at the path writes nothing there
    from ongridd.marketplace.agents_api import _remove_in_roots, _write_atomic

    root, outside = (tmp_path / "agents").resolve(), (tmp_path / "etc").resolve()
    (root / "team").mkdir(parents=True)
    outside.mkdir()
    (outside / "victim.md").write_text("keep me\n")
    _write_atomic(root / "team", root / "team" / "a.md", b"first\n", [root])
    assert (root / "team" / "a.md").read_bytes() == b"first\n"
    (root / "team" / "a.md").chmod(0o640)
    _write_atomic(root / "team", root / "team" / "a.md", b"second\n", [root])
    assert stat.S_IMODE((root / "team" / "a.md").stat().st_mode) == 0o640  # keeps the mode it had
    (root / "team").rename(root / "team.old")
    (root / "team").symlink_to(outside, target_is_directory=True)  # the swap
    with pytest.raises(OngridError, match="not in a user agents folder"):
        _write_atomic(root / "team", root / "team" / "victim.md", b"overwritten\n", [root])
    with pytest.raises(OngridError, match="not in a user agents folder"):
        _remove_in_roots(root / "team" / "victim.md", [root])
    assert sorted(p.name for p in outside.iterdir()) == ["victim.md"]  # no temporary file left either
    assert (outside / "victim.md").read_text() == "keep me\n"
    # a missing folder behind the swapped one is not created out there either
    with pytest.raises(OngridError, match="not in a user agents folder"):
        _write_atomic(root / "team" / "deep", root / "team" / "deep" / "x.md", b"x\n", [root])
    assert not (outside / "deep").exists()
    # the root itself swapped: the roots are the real folders fixed at start, not resolved again
    (root / "team").unlink()
    root.rename(root.with_name("agents.old"))
    root.symlink_to(outside, target_is_directory=True)
    with pytest.raises(OngridError, match="not in a user agents folder"):
        _write_atomic(root, root / "victim.md", b"overwritten\n", [root])  # root: its real path before the swap
    assert (outside / "victim.md").read_text() == "keep me\n"
    root.unlink()
    root.with_name("agents.old").rename(root)
    (root / "team").symlink_to(outside, target_is_directory=True)
    # a symlink deeper in the path that stays inside the roots is fine: the real folder is checked
    (root / "team").unlink()
    (root / "link").symlink_to(root / "team.old", target_is_directory=True)
    _remove_in_roots(root / "link" / "a.md", [root])
    assert not (root / "team.old" / "a.md").exists()
