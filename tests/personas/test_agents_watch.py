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


@pytest.mark.parametrize("event_driven", [True, False])
async def test_watcher_picks_up_add_change_and_delete(tmp_path: Path, event_driven: bool, monkeypatch):
    root = tmp_path / "agents"
    if event_driven:
        root.mkdir()
    else:  # a root that does not exist yet: the watcher polls, and sees it appear
        monkeypatch.setattr("ongridd.marketplace.agents_api.WATCH_INTERVAL_S", 0.1)
    registry = AgentRegistry(None)
    registry.load([root])
    holder = RegistryHolder(Registries(tools={}, stubs=(), agents=registry, skills=None))
    api = AgentsAPI(config=SimpleNamespace(agent_user_roots=(root,)), holder=holder,
                    builder=SimpleNamespace(agent_roots=lambda: [root]))
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


async def test_watcher_watches_present_roots_for_events_and_picks_up_a_root_that_appears(tmp_path: Path, monkeypatch):
    """One root exists, one does not: changes in the first arrive as events, the second is seen
    when it appears (its personas load), and a change in it is then picked up too."""
    here, later = tmp_path / "here", tmp_path / "later"
    here.mkdir()
    registry = AgentRegistry(None)
    registry.load([here, later])
    holder = RegistryHolder(Registries(tools={}, stubs=(), agents=registry, skills=None))
    api = AgentsAPI(config=SimpleNamespace(agent_user_roots=(here, later)), holder=holder,
                    builder=SimpleNamespace(agent_roots=lambda: [here, later]))
    polls: list[int] = []
    real_fingerprint = api._fingerprint
    monkeypatch.setattr(api, "_fingerprint", lambda: polls.append(1) or real_fingerprint())
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
