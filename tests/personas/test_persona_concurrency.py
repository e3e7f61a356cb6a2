"""Lookups while reloads run never see a missing or half-built registry (docs/architecture.md §6)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
import trio

from ongridd.personas import AgentRegistry, parse_persona_file
from ongridd.personas.registry import markdown_files

NAMES = ["default", "reviewer"] + [f"specialist-{i:02d}" for i in range(6)]
RELOADS = 31  # alternating roots: every reload re-parses every file


def _generation(root: Path, gen: str) -> Path:
    root.mkdir(parents=True)
    for name in NAMES:
        (root / f"{name}.md").write_text(
            f"---\nname: {name}\ndescription: generation {gen}\npermission_mode: read-only\n---\nBody {gen}.\n",
            encoding="utf-8",
        )
    return root


@pytest.fixture
def two_generations(tmp_path):
    return _generation(tmp_path / "a", "a"), _generation(tmp_path / "b", "b")


@pytest.fixture
def fast_switching():
    # A thread that gave up the GIL for I/O waits up to the switch interval to
    # get it back; a short interval keeps reloads quick and interleaving dense.
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    yield
    sys.setswitchinterval(old)


def _check(registry) -> str | None:
    """One reader's look at the registry; returns what was wrong, or None."""
    try:
        snap = registry.snapshot()
        names = set(snap)
        if names != set(NAMES):
            return f"names {sorted(names)}"
        gens = {p.description for p in snap.values()}
        if len(gens) != 1:
            return f"mixed generations {gens}"
        if len(registry.spawnable(snap)) != len(NAMES) - 2:
            return "spawnable list incomplete"
        for name in NAMES:
            if registry.by_name(name) is None:
                return f"by_name({name!r}) is None"
    except Exception as exc:  # noqa: BLE001 — e.g. "dictionary changed size during iteration"
        return repr(exc)
    return None


async def test_trio_lookups_during_reload_loop(two_generations, fast_switching):
    a, b = two_generations
    registry = AgentRegistry()
    registry.load([a])
    done = trio.Event()
    problems: list[str] = []
    looks = 0
    seen: set[str] = set()

    async def reader():
        nonlocal looks
        while not done.is_set():
            problem = _check(registry)
            if problem:
                problems.append(problem)
            seen.add(next(iter(registry.snapshot().values())).description)
            looks += 1
            await trio.lowlevel.checkpoint()

    async def reloader():
        for i in range(RELOADS):
            report = await trio.to_thread.run_sync(registry.reload, [b if i % 2 == 0 else a])
            assert (report.loaded, report.skipped) == (len(NAMES), 0)
        done.set()

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(reader)
            nursery.start_soon(reloader)
    assert problems == []
    assert looks > 0
    assert registry.by_name("default").description == "generation b"  # the last reload won


def _hammer(registry, roots: list[Path], reloads: int, readers: int = 3, stop_early: bool = False) -> list[str]:
    """Reader threads check the registry while this thread reloads; returns the problems seen."""
    stop = threading.Event()
    problems: list[str] = []

    def read():
        while not stop.is_set():
            problem = _check(registry)
            if problem:
                problems.append(problem)

    threads = [threading.Thread(target=read) for _ in range(readers)]
    try:
        for t in threads:
            t.start()
        for i in range(reloads):
            registry.reload([roots[i % 2]])
            if stop_early and problems:
                break
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    return problems


def test_threads_lookups_during_reload_loop(two_generations, fast_switching):
    a, b = two_generations
    registry = AgentRegistry()
    registry.load([a])
    assert _hammer(registry, [b, a], reloads=RELOADS) == []


class _InPlaceRegistry:
    """A deliberately wrong registry that rebuilds its one dict in place."""

    def __init__(self):
        self._live: dict = {}

    def snapshot(self):
        return self._live

    def by_name(self, name):
        return self._live.get(name)

    def spawnable(self, snap=None):
        snap = self._live if snap is None else snap
        return [p for p in list(snap.values()) if p.name not in ("default", "reviewer")]

    def reload(self, roots):
        self._live.clear()
        for root in roots:
            for path in markdown_files(root, []):
                persona, _ = parse_persona_file(path)
                self._live[persona.name] = persona


def test_the_harness_catches_a_half_built_registry(two_generations, fast_switching):
    # Proves the two tests above can fail: the same checks flag an in-place rebuild.
    a, b = two_generations
    naive = _InPlaceRegistry()
    naive.reload([a])
    assert _hammer(naive, [b, a], reloads=100, stop_early=True) != []
