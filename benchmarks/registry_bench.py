"""Registry figures (prints measured numbers; asserts nothing about time).

    python benchmarks/registry_bench.py [--personas 5000] [--idle-s 10] [--pure]

Generates ``--personas`` persona files in a temporary folder, then prints:
the cold load time (wall and CPU) of ``AgentRegistry.load``, a reload with
nothing changed, the coordinator's catalog size with its budget, and the
CPU the agents-folder watcher (``AgentsAPI.watch``) spends per second while
nothing changes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ongridd.marketplace.agents_api import AgentsAPI  # noqa: E402
from ongridd.personas.prompt import CATALOG_BUDGET_CHARS, agent_catalog  # noqa: E402
from ongridd.personas.registry import AgentRegistry  # noqa: E402
from ongridd.runtime.registries import Registries, RegistryHolder  # noqa: E402


def generate(root: Path, n: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"persona-{i:05d}.md").write_text(f"""---
name: persona-{i:05d}
description: "Specialist number {i}: investigates one narrow family of operational problems."
when_to_use: >-
  Dispatch when the user asks about subsystem {i} of the fleet, its error rates,
  its latency or its capacity; the specialist reads metrics and logs and answers
  with evidence. Not for restarts or changes (use specialist-ops).
tools:
  - query_knowledge
  - query_devices
permission_mode: read-only
max_turns: 10
---
You are specialist {i}. Cite the tool and value you used, and say what you did not check.
""", encoding="utf-8")


def timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


async def idle_watch_cpu(root: Path, seconds: float) -> float:
    registry = AgentRegistry(None)
    registry.load([root])
    holder = RegistryHolder(Registries(tools={}, stubs=(), agents=registry, skills=None))
    api = AgentsAPI(config=SimpleNamespace(agent_user_roots=(root,)), holder=holder,
                    builder=SimpleNamespace(agent_roots=lambda: [root]))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(api.watch)
        await trio.sleep(1.5)  # past the watcher's first scan
        c0 = time.process_time()
        await trio.sleep(seconds)
        cpu = time.process_time() - c0
        nursery.cancel_scope.cancel()
    return cpu / seconds


async def idle_cpu(seconds: float) -> float:
    """The same window with nothing running: what this machine charges a sleeping Trio process
    (the baseline the watcher's figure is read against)."""
    await trio.sleep(1.5)
    c0 = time.process_time()
    await trio.sleep(seconds)
    return (time.process_time() - c0) / seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--personas", type=int, default=5000)
    ap.add_argument("--idle-s", type=float, default=10.0)
    ap.add_argument("--pure", action="store_true", help="YAML on the pure-Python path only (for comparison)")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line at the end")
    args = ap.parse_args()
    if args.pure:
        from ongridd import yamlbounds

        yamlbounds._CParser = None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "agents"
        generate(root, args.personas)
        registry = AgentRegistry(None)
        report, wall, cpu = timed(lambda: registry.load([root]))
        figures = {"personas": report.loaded, "skipped": report.skipped, "load_s": wall, "load_cpu_s": cpu}
        print(f"registry load: {report.loaded} personas ({report.skipped} skipped) in {wall:.3f} s wall, "
              f"{cpu:.3f} s CPU")
        _, wall, cpu = timed(lambda: registry.reload([root]))
        figures["reload_s"] = wall
        print(f"registry reload, nothing changed: {wall:.3f} s wall, {cpu:.3f} s CPU")
        catalog, wall, _ = timed(lambda: agent_catalog(registry.spawnable()))
        figures.update(catalog_chars=len(catalog), catalog_budget_chars=CATALOG_BUDGET_CHARS, catalog_ms=wall * 1e3)
        print(f"catalog: {len(catalog):,} characters (budget {CATALOG_BUDGET_CHARS:,}), built in {wall * 1e3:.1f} ms")
        per_s = trio.run(idle_watch_cpu, root, args.idle_s)
        bare = trio.run(idle_cpu, args.idle_s)
        print(f"idle agents-folder watcher: {per_s * 1e3:.1f} ms CPU per second (a bare Trio sleep in this "
              f"process, no watcher: {bare * 1e3:.1f} ms per second; the difference is the watcher's own)")
        figures.update(watcher_ms_per_s=per_s * 1e3, bare_ms_per_s=bare * 1e3)
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
