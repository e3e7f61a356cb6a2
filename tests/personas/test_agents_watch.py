"""The agents-folder watcher reloads on add, change and delete (event-driven and polling fallback)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import trio

from ongridd.marketplace.agents_api import AgentsAPI
from ongridd.personas.registry import AgentRegistry
from ongridd.runtime.registries import Registries, RegistryHolder


def _persona(name: str, description: str) -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\nBody of {name}.\n"


async def _until(predicate, timeout_s: float = 15.0) -> None:
    with trio.fail_after(timeout_s):
        while not predicate():
            await trio.sleep(0.05)


def _watched(roots: list[Path], monkeypatch) -> tuple[AgentRegistry, AgentsAPI, list[int]]:
    """A registry loaded from ``roots``, its AgentsAPI, and a list that grows each time
    the polling fallback lists the folders' files."""
    registry = AgentRegistry(None)
    registry.load(roots)
    holder = RegistryHolder(Registries(tools={}, stubs=(), agents=registry, skills=None))
    api = AgentsAPI(config=SimpleNamespace(agent_user_roots=tuple(roots)), holder=holder,
                    builder=SimpleNamespace(agent_roots=lambda: list(roots)))
    polls: list[int] = []
    real_fingerprint = api._fingerprint
    monkeypatch.setattr(api, "_fingerprint", lambda: polls.append(1) or real_fingerprint())
    return registry, api, polls


@pytest.mark.parametrize("root_exists", [True, False])
async def test_watcher_picks_up_add_change_and_delete(tmp_path: Path, root_exists: bool, monkeypatch):
    root = tmp_path / "agents"
    if root_exists:
        root.mkdir()
    # else a root that does not exist yet: its parent is watched, and the root seen to appear
    registry, api, polls = _watched([root], monkeypatch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(api.watch, 0.1)
        await trio.sleep(0.5)  # the watcher is set up
        root.mkdir(exist_ok=True)
        (root / "alpha.md").write_text(_persona("alpha", "First."), encoding="utf-8")
        await _until(lambda: registry.by_name("alpha") is not None)
        before = registry.snapshot()
        (root / "alpha.md").write_text(_persona("alpha", "Second version."), encoding="utf-8")
        await _until(lambda: registry.by_name("alpha").description == "Second version.")
        assert before["alpha"].description == "First."  # a snapshot taken earlier never changes
        (root / "alpha.md").unlink()
        await _until(lambda: registry.by_name("alpha") is None)
        nursery.cancel_scope.cancel()
    assert polls == []


async def test_watcher_watches_present_roots_for_events_and_picks_up_a_root_that_appears(tmp_path: Path, monkeypatch):
    """One root exists, one does not: changes in the first arrive as events, the second is seen
    when it appears (its personas load), and a change in it is then picked up too."""
    here, later = tmp_path / "here", tmp_path / "later"
    here.mkdir()
    registry, api, polls = _watched([here, later], monkeypatch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(api.watch, 0.1)
        await trio.sleep(0.5)
        (here / "alpha.md").write_text(_persona("alpha", "In the first root."), encoding="utf-8")
        await _until(lambda: registry.by_name("alpha") is not None)
        later.mkdir()
        (later / "beta.md").write_text(_persona("beta", "In the root that appeared."), encoding="utf-8")
        await _until(lambda: registry.by_name("beta") is not None)
        (later / "beta.md").write_text(_persona("beta", "Changed."), encoding="utf-8")
        await _until(lambda: registry.by_name("beta").description == "Changed.")
        assert registry.by_name("alpha") is not None
        nursery.cancel_scope.cancel()
    assert polls == []  # never fell back to listing every file on a timer


async def test_a_hung_stat_of_a_missing_root_stalls_only_the_watcher(tmp_path: Path, monkeypatch):
    """A root on a mount that hangs: its stat blocks, yet the event loop runs on and
    cancelling the watcher returns while the stat is still blocked."""
    import threading

    hung = tmp_path / "mount" / "agents"
    entered, released = threading.Event(), threading.Event()
    is_dir = Path.is_dir

    on_loop_thread: list[Path] = []

    def blocking_is_dir(self: Path) -> bool:
        if self == hung and threading.current_thread() is threading.main_thread():
            on_loop_thread.append(self)  # the stat would stall the daemon: say so, don't hang here
        elif self == hung:
            entered.set()
            released.wait(30)  # the test releases it when done (a safety limit, not a timing)
        return is_dir(self)

    _registry, api, _polls = _watched([hung], monkeypatch)
    monkeypatch.setattr(Path, "is_dir", blocking_is_dir)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(api.watch, 0.05)
            await _until(entered.is_set)  # the stat is blocked in its thread, and this task runs
            await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        assert on_loop_thread == []
        assert not released.is_set()  # the watcher ended with the stat still hung
    finally:
        released.set()


async def test_a_root_whose_parents_are_missing_or_a_file_is_waited_for_by_events(tmp_path: Path, monkeypatch):
    """``a/b/agents`` with neither ``a`` nor ``b`` there, and a root that is a file: each
    folder created on the way is seen (the nearest existing parent is watched), and the
    personas load once the roots are folders — without polling."""
    deep, blocked = tmp_path / "a" / "b" / "agents", tmp_path / "blocked"
    blocked.write_text("a file where the folder belongs", encoding="utf-8")
    registry, api, polls = _watched([deep, blocked], monkeypatch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(api.watch, 0.1)
        await trio.sleep(0.5)
        (tmp_path / "a").mkdir()
        await trio.sleep(0.1)  # the watch moves down to a/ (made at once, b/ is seen too: see below)
        (tmp_path / "a" / "b").mkdir()
        deep.mkdir()
        (deep / "gamma.md").write_text(_persona("gamma", "Deep."), encoding="utf-8")
        await _until(lambda: registry.by_name("gamma") is not None)
        blocked.unlink()
        blocked.mkdir()
        (blocked / "delta.md").write_text(_persona("delta", "Was a file."), encoding="utf-8")
        await _until(lambda: registry.by_name("delta") is not None)
        nursery.cancel_scope.cancel()
    assert polls == []
