"""Registry figures (prints measured numbers; asserts nothing about time).

    python benchmarks/registry_bench.py [--personas 5000] [--idle-s 10] [--pure]

Generates ``--personas`` persona files in a temporary folder, then prints:
the cold load time (wall and CPU) of ``AgentRegistry.load``, a reload with
nothing changed, the coordinator's catalog size with its budget, and the
CPU the agents-folder watcher (``AgentsAPI.watch``) spends per second while
nothing changes, and how often it wakes, read from outside its process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
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


async def _idle_child(root: Path | None) -> None:
    """The idle process measured from outside: the agents-folder watcher on ``root`` (a bare Trio
    sleep when None), then ``ready`` on stdout once past the watcher's first scan and once the
    worker threads that scan used have ended (Trio lets an idle one go after 10 s), then nothing."""
    async with trio.open_nursery() as nursery:
        if root is not None:
            registry = AgentRegistry(None)
            registry.load([root])
            holder = RegistryHolder(Registries(tools={}, stubs=(), agents=registry, skills=None))
            api = AgentsAPI(config=SimpleNamespace(agent_user_roots=(root,)), holder=holder,
                            builder=SimpleNamespace(agent_roots=lambda: [root]))
            nursery.start_soon(api.watch)
        await trio.sleep(1.5)
        for _ in range(60):
            if len(os.listdir("/proc/self/task")) == 1:
                break
            await trio.sleep(0.5)
        print("ready", flush=True)
        await trio.sleep_forever()


def _cpu_and_wakeups(pid: int) -> tuple[int, int]:
    """(CPU ns, times blocked and woken) of every thread of ``pid``, read from ``/proc`` — reading
    them does not wake the process."""
    cpu = wakeups = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            cpu += int((task / "schedstat").read_text().split()[0])
            for line in (task / "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                    wakeups += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    return cpu, wakeups


def idle_cpu(root: Path | None, seconds: float) -> tuple[float, int, int]:
    """CPU (seconds per second) and wake-ups of an idle process over ``seconds``: the folder watcher
    on ``root``, or (None) a bare Trio sleep, the baseline.  Read from outside the process, so
    the measurement adds no wake-up of its own (on a VM, the one wake-up that ends a sleep of 10 s
    can be charged several milliseconds).  Third: with ``root``, the wake-ups within 1 s of a
    persona file written there after the window (none would mean the watcher was not watching)."""
    log = tempfile.TemporaryFile(mode="w+")  # the child's log (the bench's personas name tools it lacks)
    child = subprocess.Popen([sys.executable, __file__, "--idle-child", str(root) if root else ""],
                             stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        if child.stdout is None or child.stdout.readline().strip() != "ready":
            log.seek(0)
            raise SystemExit("the idle child did not start: " + log.read()[-2000:])
        cpu0, woke0 = _cpu_and_wakeups(child.pid)
        time.sleep(seconds)
        cpu1, woke1 = _cpu_and_wakeups(child.pid)
        on_change = 0
        if root is not None:
            (root / "zz-change.md").write_text("---\nname: zz-change\ndescription: a change\n---\nBody.\n")
            time.sleep(1.0)
            on_change = _cpu_and_wakeups(child.pid)[1] - woke1
            (root / "zz-change.md").unlink()
    finally:
        child.kill()
        child.wait()
        log.close()
    return (cpu1 - cpu0) / 1e9 / seconds, woke1 - woke0, on_change


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--personas", type=int, default=5000)
    ap.add_argument("--idle-s", type=float, default=10.0)
    ap.add_argument("--pure", action="store_true", help="YAML on the pure-Python path only (for comparison)")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line at the end")
    ap.add_argument("--idle-child", metavar="ROOT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.idle_child is not None:
        trio.run(_idle_child, Path(args.idle_child) if args.idle_child else None)
        return
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
        per_s, woke, on_change = idle_cpu(root, args.idle_s)
        bare, bare_woke, _ = idle_cpu(None, args.idle_s)
        print(f"idle agents-folder watcher: {per_s * 1e3:.2f} ms CPU per second, {woke} wake-ups in {args.idle_s:g} s "
              f"(a bare Trio sleep, no watcher: {bare * 1e3:.2f} ms per second, {bare_woke} wake-ups; read from "
              f"outside the process); a file written afterwards woke it {on_change} times within 1 s")
        figures.update(watcher_ms_per_s=per_s * 1e3, bare_ms_per_s=bare * 1e3, watcher_wakeups=woke,
                       bare_wakeups=bare_woke, watcher_wakeups_on_change=on_change, idle_s=args.idle_s)
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
