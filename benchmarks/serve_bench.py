"""The serve path under load (prints measured numbers; asserts nothing about time).

    python benchmarks/serve_bench.py [--sessions 1 200 1000] [--single-turns 20] [--single-rounds 1] [--burst]
                                     [--rate 200=50 1000=100] [--delay-s 0.1] [--no-instant]
                                     [--instructions TURNS]

Everything runs as it does in production, each in its own process: ``ongrid fake-llm``
(the scripted model) and, for each session count, a fresh ``ongridd serve`` with SQLite
in a fresh state dir; the clients are real websocket connections from this process.
One turn is six model calls, each answered after ``--delay-s``: the coordinator
dispatches ``bench-worker`` with ``AgentTool``, the worker makes three ``query_knowledge``
calls one step at a time and answers, the coordinator answers.

N = 1: ``--single-turns`` turns one after another, each on a fresh thread (the overhead
of one turn with nothing else running; ``--single-rounds R`` runs them R times, each on a fresh
daemon, and prints the medians: of all the figures, this one moves most with what the host does
meanwhile), then the same turns against a second fake-llm that
answers at once (``--no-instant`` skips it): the same work without the daemon going idle between
calls, so the difference is the cost of those idle gaps.  N > 1: N sessions connect first
(hello → session), then each sends one turn; the arrivals are spread evenly at
``--rate`` turns/s (default 50/s for 200 and 100/s for 1,000; ``0`` = all at once);
``--burst`` also runs every N > 1 with all turns at once (the stress shape).

Per run: turns/s (turns / seconds from the first turn sent to the last answer),
p50/p99 end-to-end (``user_message`` sent → ``final`` received, at the client),
p50/p99 overhead = end-to-end − the model's own time (6 × ``--delay-s``), the daemon's
CPU per turn (utime + stime of the daemon process from ``/proc/<pid>/stat``, over the
turns), its peak RSS (``VmHWM``) and the rows stored in its database after a graceful
stop, against the rows the turns must leave.

CPU time on a shared virtual machine moves with what else runs on the host (the same
commit measured twice a day apart differed by half).  Two figures that do not: the header
prints this machine's speed now (CPU of a fixed pure-Python loop, :func:`reference_loop_ms`),
and ``--instructions TURNS`` counts the instructions the daemon executes per turn (user space,
under ``valgrind --tool=callgrind``: the same count whatever else the machine does), for
``TURNS`` turns of the N = 1 shape (a fresh connection each, the model answering at once;
the count does not depend on the model's delay).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa
import trio
from trio_websocket import open_websocket_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.e2e_helpers import env, free_port, ongrid, ongridd
from tests.e2e.load_shape import concurrent_turns, hello, one_turn

from machine import page_touch_us, reference_loop_ms

MODEL_CALLS = 6
CLK_TCK = os.sysconf("SC_CLK_TCK")

WORKER = """---
name: bench-worker
description: Serve-path benchmark worker that looks things up.
when_to_use: The serve-path benchmark only.
tools: [query_knowledge]
max_turns: 6
---
You look things up and answer in one line.
"""

#: rows one turn must leave: coordinator user 1 + assistant 2 + tool 1; one worker session,
#: closed ``completed``, with user 1 + assistant 4 + tool 3 messages; audit 4 (AgentTool + 3 tools)
PER_TURN = {"coordinator messages": 4, "worker sessions closed completed": 1, "worker messages": 8,
            "audit rows": 4}


def script(delay_s: float) -> dict:
    worker = [{"tool_calls": [{"name": "query_knowledge", "arguments": {"query": q}}], "delay_s": delay_s}
              for q in ("disk full", "nginx 502", "certificate expiry")]
    return {
        "default": [
            {"tool_calls": [{"name": "AgentTool", "arguments": {
                "description": "bench lookup", "subagent_type": "bench-worker",
                "prompt": "Look up three runbooks, then answer in one line."}}], "delay_s": delay_s},
            {"content": "bench turn done", "delay_s": delay_s},
        ],
        "bench-worker": [*worker, {"content": "worker answer", "delay_s": delay_s}],
    }


def cpu_s(pid: int) -> float:
    """utime + stime of one process, seconds (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """Each thread's time on a CPU, ns (``/proc/<pid>/task/<tid>/schedstat``, first field: exact,
    where ``/proc/<pid>/stat`` counts in clock ticks)."""
    out: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[task.name] = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return out


def cpu_between(before: dict[str, int], after: dict[str, int]) -> float:
    """CPU seconds between two :func:`thread_cpu_ns` readings (a thread that ended in between
    is left out; one that started counts from 0)."""
    return sum(ns - before.get(tid, 0) for tid, ns in after.items()) / 1e9


def blocking_waits(pid: int) -> int:
    """How often the daemon's main thread (the event loop's) has blocked and been woken
    (``voluntary_ctxt_switches`` of ``/proc/<pid>/task/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/task/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def bare_wakeup_ms(gap_s: float, wakeups: int = 40) -> float:
    """This machine's floor for one wake-up: CPU (thread time, ms) a bare Trio task spends per
    wake-up reading one byte a thread sends it every ``gap_s`` seconds (nothing else done)."""
    import socket
    import threading

    async def reader() -> float:
        mine, theirs = socket.socketpair()
        sock = trio.socket.from_stdlib_socket(mine)

        def peer() -> None:
            for _ in range(wakeups + 1):
                time.sleep(gap_s)
                theirs.send(b"x")

        thread = threading.Thread(target=peer, daemon=True)
        thread.start()
        await sock.recv(1)  # the first wake-up warms the path up
        start = time.thread_time()
        for _ in range(wakeups):
            await sock.recv(1)
        took = time.thread_time() - start
        thread.join()
        sock.close()
        theirs.close()
        return took / wakeups * 1e3

    return trio.run(reader)


def serve_command(run: Path, n: int, port: int) -> list[str]:
    """``ongridd serve`` on ``port`` with a fresh state dir, config and agents folder (the
    benchmark's worker) in ``run``, sized for ``n`` turns at once."""
    (run / "agents").mkdir(parents=True)
    (run / "agents" / "bench-worker.md").write_text(WORKER)
    config = run / "ongrid.yaml"
    config.write_text(json.dumps({  # JSON is YAML 1.2
        "agents": {"user_dirs": [str(run / "agents")]},
        # every client is user "local" (no tokens): let all N turns run at once; and as many model calls
        # as N turns make at once (at 100 turns/s × 0.6 s of model time, ~60 are in flight on average)
        "llm": {"max_retries": 0, "timeout_s": 600, "max_concurrent_calls": max(64, 2 * n)},
        "limits": {"worker_timeout_s": 900, "max_concurrent_turns": 2 * n, "max_turns_per_user": 2 * n},
    }))
    return ongridd("serve", "--config", str(config), "--state-dir", str(run / "state"),
                   "--listen", f"127.0.0.1:{port}")


@contextlib.contextmanager
def running_daemon(command: list[str], run: Path, llm_url: str, stop_timeout_s: float) -> Iterator[subprocess.Popen]:
    """``command`` (an ``ongridd serve``) running in ``run`` against the model at ``llm_url``,
    its log in ``run/daemon.log``; stopped with SIGTERM at the end of the block (killed
    when it does not stop within ``stop_timeout_s`` or the block failed)."""
    daemon = subprocess.Popen(command, cwd=run, env=env(ONGRID_LLM_BASE_URL=llm_url, ONGRID_LLM_MODEL="scripted"),
                              stdout=subprocess.DEVNULL, stderr=open(run / "daemon.log", "w"))
    try:
        yield daemon
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=stop_timeout_s)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def instructions_per_turn(work: Path, llm_url: str, turns: int) -> float:
    """Instructions (millions, user space) the daemon executes per turn of the N = 1 shape — a
    fresh connection, hello, one turn, close — counted by callgrind over ``turns`` turns after
    one uncounted warm-up turn.  ``FileNotFoundError`` when valgrind is not installed."""
    valgrind, control = shutil.which("valgrind"), shutil.which("callgrind_control")
    if not (valgrind and control):
        raise FileNotFoundError("valgrind (with callgrind_control) is not installed")
    run = work / "run-instructions"
    port = free_port()
    callgrind = [valgrind, "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={run}/callgrind.out.%p"]
    with running_daemon([*callgrind, *serve_command(run, 1, port)], run, llm_url, stop_timeout_s=600) as daemon:
        wait_healthy(daemon, f"http://127.0.0.1:{port}", timeout_s=600)
        ws_url = f"ws://127.0.0.1:{port}/ws"
        trio.run(drive, ws_url, 1, 0, True, "bench-warmup-")
        subprocess.run([control, "--instr=on", str(daemon.pid)], check=True, stdout=subprocess.DEVNULL)
        _, failed, _, _ = trio.run(drive, ws_url, turns, 0, True, "bench-")
        subprocess.run([control, "--instr=off", str(daemon.pid)], check=True, stdout=subprocess.DEVNULL)
        if failed:
            raise RuntimeError(f"{failed} of {turns} turns under callgrind did not answer")
    total = 0
    for dump in run.glob("callgrind.out.*"):
        for line in dump.read_text().splitlines():
            if line.startswith("totals:"):
                total += int(line.split()[1])
    return total / turns / 1e6


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait_healthy(proc: subprocess.Popen, url: str, timeout_s: float = 120.0) -> float:
    """Poll ``/readyz`` (fully up) until 200; returns the seconds it took."""
    import urllib.request

    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as resp:
                if resp.status == 200:
                    return time.monotonic() - start
        except OSError:
            pass
        time.sleep(0.02)
    raise RuntimeError("daemon not healthy in time")


def model_response_s(url: str) -> tuple[float, int, int]:
    """``ongrid_model_response_seconds`` sum and count, and the store writer's
    transactions (``ongrid_store_write_transactions_total``), from the daemon's ``/metrics``."""
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    total, count, transactions = 0.0, 0, 0
    for line in text.splitlines():
        if line.startswith("ongrid_model_response_seconds_sum"):
            total = float(line.split()[-1])
        elif line.startswith("ongrid_model_response_seconds_count"):
            count = int(float(line.split()[-1]))
        elif line.startswith("ongrid_store_write_transactions_total"):
            transactions = int(float(line.split()[-1]))
    return total, count, transactions


def count_rows(db: Path) -> dict[str, int]:
    engine = sa.create_engine(f"sqlite:///{db}", poolclass=sa.pool.NullPool)
    coord = "SELECT id FROM chat_sessions WHERE parent_session_id IS NULL AND thread_id LIKE 'bench-%'"
    workers = f"SELECT id FROM chat_sessions WHERE parent_session_id IN ({coord})"
    try:
        with engine.connect() as con:
            one = lambda sql: con.execute(sa.text(sql)).scalar_one()  # noqa: E731
            return {
                "coordinator messages": one(f"SELECT count(*) FROM chat_messages WHERE session_id IN ({coord})"),
                "worker sessions closed completed": one(
                    f"SELECT count(*) FROM chat_sessions WHERE id IN ({workers}) "
                    "AND status = 'completed' AND closed_at IS NOT NULL"),
                "worker messages": one(f"SELECT count(*) FROM chat_messages WHERE session_id IN ({workers})"),
                "audit rows": one("SELECT count(*) FROM audit_logs"),
            }
    finally:
        engine.dispose()


async def drive(ws_url: str, n: int, rate: float, sequential: bool,
                prefix: str = "bench-", daemon_pid: int | None = None) -> tuple[list[float], int, float, float]:
    """Run ``n`` turns; returns (end-to-end seconds of the turns that answered, turns that
    ended otherwise, seconds from the first turn sent to the last answer, and — sequential
    turns with ``daemon_pid`` only, else NaN — the daemon's CPU seconds spent inside the
    turns: from before each ``user_message`` to its answer, so without the connection's
    set-up and close)."""
    if not sequential:
        ends, took = await concurrent_turns(ws_url, n, rate, prefix=prefix, connect_timeout_s=600)
        e2e = [end.ended - end.sent for end in ends.values() if end.frame["type"] == "final"]
        return e2e, len(ends) - len(e2e), took, float("nan")
    e2e: list[float] = []
    failed = 0
    in_turns = 0.0
    start = time.monotonic()
    for i in range(n):
        async with open_websocket_url(ws_url) as ws:
            await hello(ws, f"{prefix}{i}")
            cpu0 = thread_cpu_ns(daemon_pid) if daemon_pid else {}
            t0 = time.monotonic()
            frame = await one_turn(ws, f"turn {i}")
            if frame["type"] == "final":
                e2e.append(time.monotonic() - t0)
            else:
                failed += 1
            if daemon_pid:
                in_turns += cpu_between(cpu0, thread_cpu_ns(daemon_pid))
    return e2e, failed, time.monotonic() - start, in_turns if daemon_pid else float("nan")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run_one(work: Path, llm_url: str, n: int, rate: float, sequential: bool, model_s: float,
            fake_pid: int | None = None, label: str = "") -> dict:
    """One daemon, one load; prints its figures and returns them."""
    run = work / f"run-{n}-{'seq' if sequential else rate or 'burst'}{'-' + label.split()[-1] if label else ''}"
    port = free_port()
    with running_daemon(serve_command(run, n, port), run, llm_url, stop_timeout_s=300) as daemon:
        wait_healthy(daemon, f"http://127.0.0.1:{port}")
        # one warm-up turn (first-use imports and caches), not in the figures; its rows are counted
        trio.run(drive, f"ws://127.0.0.1:{port}/ws", 1, 0, True, "bench-warmup-")
        base = f"http://127.0.0.1:{port}"
        model0 = model_response_s(base)
        cpu0 = cpu_s(daemon.pid)
        fake0 = cpu_s(fake_pid) if fake_pid else 0.0
        me0 = time.process_time()
        waits0 = blocking_waits(daemon.pid)
        e2e, failed, took, in_turns = trio.run(drive, f"ws://127.0.0.1:{port}/ws", n, rate, sequential,
                                               "bench-", daemon.pid)
        cpu = cpu_s(daemon.pid) - cpu0
        fake_cpu = (cpu_s(fake_pid) - fake0) if fake_pid else float("nan")
        client_cpu = time.process_time() - me0
        waits = blocking_waits(daemon.pid) - waits0
        model1 = model_response_s(base)
        rss = peak_rss_mib(daemon.pid)
    stored = count_rows(run / "state" / "ongrid.db")
    expected = {k: v * (n + 1) for k, v in PER_TURN.items()}  # + the warm-up turn
    over = [t - model_s for t in e2e]
    shape = ("sequential, fresh thread each" + (f", {label}" if label else "")) if sequential else (f"{rate:g} turns/s spread evenly" if rate
                                                               else "burst (all at once)")
    out = {
        "sessions": 1 if sequential else n, "turns": n, "shape": shape, "turns_ok": len(e2e), "turns_failed": failed,
        "turns_per_s": len(e2e) / took if took > 0 else float("nan"),
        "e2e_p50_ms": pct(e2e, 0.5) * 1e3, "e2e_p99_ms": pct(e2e, 0.99) * 1e3,
        "overhead_p50_ms": pct(over, 0.5) * 1e3, "overhead_p99_ms": pct(over, 0.99) * 1e3,
        "overhead_mean_ms": statistics.mean(over) * 1e3 if over else float("nan"),
        "cpu_ms_per_turn": cpu / n * 1e3, "peak_rss_mib": rss,
        "cpu_ms_per_turn_in_turns": in_turns / n * 1e3,
        "model_cpu_ms_per_turn": fake_cpu / n * 1e3, "client_cpu_ms_per_turn": client_cpu / n * 1e3,
        # the model's own time as the daemon saw it (request sent → response head, per turn), and what is
        # left of the mean overhead once the double's latency beyond delay_s is taken out
        "model_seen_ms_per_turn": (model1[0] - model0[0]) / n * 1e3 if n else float("nan"),
        "model_calls": model1[1] - model0[1],
        "store_transactions_per_turn": (model1[2] - model0[2]) / n if n else float("nan"),
        "wakeups_per_turn": waits / n if n else float("nan"),
        "rows_expected": sum(expected.values()), "rows_stored": sum(stored.values()),
        "rows_by_kind": {k: [expected[k], stored[k]] for k in expected},
    }
    print(f"N={out['sessions']:<5} {shape}: {len(e2e)} turns answered, {failed} not; {out['turns_per_s']:.1f} turns/s")
    print(f"  end-to-end  p50 {out['e2e_p50_ms']:8.1f} ms   p99 {out['e2e_p99_ms']:8.1f} ms")
    print(f"  overhead    p50 {out['overhead_p50_ms']:8.1f} ms   p99 {out['overhead_p99_ms']:8.1f} ms   "
          f"mean {out['overhead_mean_ms']:8.1f} ms  (end-to-end − {model_s * 1e3:.0f} ms of model time)")
    beyond = out["model_seen_ms_per_turn"] - model_s * 1e3
    out["overhead_net_mean_ms"] = out["overhead_mean_ms"] - beyond
    print(f"  model time  {out['model_seen_ms_per_turn']:8.1f} ms per turn as the daemon saw it "
          f"({out['model_calls']} calls, request sent → response head): the double took {beyond:.1f} ms "
          f"beyond delay_s; mean overhead without it {out['overhead_net_mean_ms']:.1f} ms")
    print(f"  daemon CPU  {out['cpu_ms_per_turn']:8.1f} ms per turn   peak RSS {rss:7.1f} MiB   "
          f"store writer: {out['store_transactions_per_turn']:.1f} transactions per turn")
    if sequential:
        print(f"              {out['cpu_ms_per_turn_in_turns']:8.1f} ms per turn inside the turns (user_message → "
              "final; the rest is each turn's own connection: handshake, hello, close)")
        # what waking up costs on this machine, whatever the code: the daemon's wake-ups per turn, and a
        # bare Trio task's CPU per wake-up after the same idle gap and back to back
        gap = model_s / MODEL_CALLS
        idle, busy = (bare_wakeup_ms(gap), bare_wakeup_ms(0.0)) if gap > 0 else (float("nan"), bare_wakeup_ms(0.0))
        out["bare_wakeup_ms_after_gap"], out["bare_wakeup_ms_back_to_back"] = idle, busy
        print(f"  wake-ups    {out['wakeups_per_turn']:8.1f} per turn (the event loop's thread blocking, then woken); "
              f"this machine's floor: a bare Trio task reading a socket costs "
              + (f"{idle:.3f} ms CPU per wake-up after a {gap:g} s gap, " if gap > 0 else "")
              + f"{busy:.3f} ms back to back")
        if gap > 0:  # and why: after an idle gap, memory costs by the page touched
            paged, unpaged = page_touch_us(gap), page_touch_us(0.0)
            out["page_touch_us_after_gap"], out["page_touch_us_back_to_back"] = paged, unpaged
            print(f"              writing 1,000 distinct pages of memory costs {paged:.2f} µs CPU per page after a "
                  f"{gap:g} s gap, {unpaged:.2f} µs back to back (benchmarks/machine.py)")
    print(f"  same machine: scripted model {out['model_cpu_ms_per_turn']:.1f} ms, load client "
          f"{out['client_cpu_ms_per_turn']:.1f} ms CPU per turn (they share the cores with the daemon)")
    mismatch = {k: v for k, v in out["rows_by_kind"].items() if v[0] != v[1]}
    print(f"  rows        stored {out['rows_stored']} of {out['rows_expected']} expected"
          + (f"  MISMATCH {mismatch}" if mismatch else "  (every row; the warm-up turn included)"))
    return out


def gap_sweep(work: Path, fakes: contextlib.ExitStack, gaps: list[float], turns: int) -> list[dict]:
    """The N = 1 shape once against a scripted model per delay in ``gaps`` (the daemon is idle that
    long before each of a turn's six answers), then the daemon's CPU per turn by gap on one line:
    the same work each time, so what grows with the gap is what waking up costs on this host."""
    rows = []
    for gap in gaps:
        url, pid = fakes.enter_context(scripted_model(work / f"gap-{gap:g}", gap))
        rows.append(run_one(work, url, turns, 0, True, MODEL_CALLS * gap, pid, label=f"idle gap {gap:g}s"))
    print("N=1     daemon CPU per turn by the idle gap before each model answer (the same turns, work and rows):")
    print("  " + " · ".join(f"{gap:g} s: {row['cpu_ms_per_turn']:.1f} ms" for gap, row in zip(gaps, rows)))
    return rows


def print_rounds(rounds: list[dict]) -> None:
    """The N = 1 figures of several rounds side by side, and their medians."""
    def line(key: str) -> str:
        values = [r[key] for r in rounds]
        return " / ".join(f"{v:.1f}" for v in values) + f" ms, median {statistics.median(values):.1f} ms"
    print(f"N=1     {len(rounds)} rounds (the same turns, each on a fresh daemon, one after another):")
    print(f"  daemon CPU per turn   {line('cpu_ms_per_turn')}")
    print(f"  inside the turns      {line('cpu_ms_per_turn_in_turns')}")
    print(f"  mean overhead         {line('overhead_mean_ms')}")


@contextlib.contextmanager
def scripted_model(work: Path, delay_s: float) -> Iterator[tuple[str, int]]:
    """``ongrid fake-llm`` serving :func:`script` with ``delay_s`` per call: ``(base URL, pid)``."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "script.json").write_text(json.dumps(script(delay_s)))
    fake = subprocess.Popen(ongrid("fake-llm", "--script", str(work / "script.json"), "--listen", "127.0.0.1:0"),
                            env=env(), stdout=subprocess.PIPE, stderr=open(work / "fake-llm.log", "w"), text=True)
    try:
        url = fake.stdout.readline().strip() if fake.stdout else ""
        if not url.startswith("http://"):
            raise SystemExit("fake-llm did not start: " + (work / "fake-llm.log").read_text()[-2000:])
        yield url, fake.pid
    finally:
        fake.send_signal(signal.SIGTERM)
        try:
            fake.wait(timeout=10)
        except subprocess.TimeoutExpired:
            fake.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 200, 1000])
    parser.add_argument("--single-turns", type=int, default=20, help="turns of the N=1 run")
    parser.add_argument("--single-rounds", type=int, default=1, metavar="R",
                        help="run the N=1 shape R times, each on a fresh daemon, and print the median "
                             "(the N=1 figure moves most with what the host does meanwhile)")
    parser.add_argument("--rate", nargs="*", default=["200=50", "1000=100"],
                        help="N=TURNS_PER_S arrival rates (default 200=50 1000=100; a session count not named: N/4 per second); 0 = burst")
    parser.add_argument("--burst", action="store_true", help="also run every N > 1 with all turns at once")
    parser.add_argument("--delay-s", type=float, default=0.1, help="the scripted model's delay per call")
    parser.add_argument("--no-instant", action="store_true",
                        help="skip the N=1 run against a model that answers at once")
    parser.add_argument("--gaps", type=float, nargs="+", default=[], metavar="S",
                        help="also run the N=1 shape against a model that answers after each of these delays "
                             "(seconds) and print the daemon's CPU per turn by the idle gap before each answer")
    parser.add_argument("--instructions", type=int, default=0, metavar="TURNS",
                        help="also count the daemon's instructions per turn under callgrind over TURNS turns "
                             "(needs valgrind; 0 = skip, the default)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line at the end")
    args = parser.parse_args()
    rates = {int(k): float(v) for k, v in (item.split("=") for item in args.rate)}
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the children inherit it
    model_s = MODEL_CALLS * args.delay_s
    results = []
    with tempfile.TemporaryDirectory(prefix="ongrid-serve-bench-") as tmp, contextlib.ExitStack() as fakes:
        work = Path(tmp)
        llm_url, fake_pid = fakes.enter_context(scripted_model(work, args.delay_s))
        print(f"serve bench: ongridd serve + ongrid fake-llm ({llm_url}), {MODEL_CALLS} model calls per turn "
              f"× {args.delay_s} s, SQLite; python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
        speed = reference_loop_ms()
        results.append({"shape": "machine", "reference_loop_ms": speed})
        print(f"machine speed now: a fixed pure-Python loop takes {speed:.1f} ms CPU "
              "(compare it between runs before comparing their CPU figures)")
        for n in args.sessions:
            if n == 1:
                rounds = [run_one(work, llm_url, args.single_turns, 0, True, model_s, fake_pid,
                                  label=f"round {r + 1}" if args.single_rounds > 1 else "")
                          for r in range(args.single_rounds)]
                results.extend(rounds)
                if len(rounds) > 1:
                    print_rounds(rounds)
                if args.delay_s > 0 and not args.no_instant:
                    # the same turns with a model that answers at once: what the daemon spends going idle
                    # between calls (a wake-up on cold caches, each call) shows as the difference
                    instant_url, instant_pid = fakes.enter_context(scripted_model(work / "instant", 0.0))
                    results.append(run_one(work, instant_url, args.single_turns, 0, True, 0.0, instant_pid,
                                           label="the model answering at once"))
                continue
            results.append(run_one(work, llm_url, n, rates.get(n, n / 4), False, model_s, fake_pid))
            if args.burst:
                results.append(run_one(work, llm_url, n, 0, False, model_s, fake_pid))
        if args.gaps:
            results.extend(gap_sweep(work, fakes, args.gaps, args.single_turns))
        if args.instructions:
            instant_url, _ = fakes.enter_context(scripted_model(work / "instant-callgrind", 0.0))
            try:
                millions = instructions_per_turn(work, instant_url, args.instructions)
            except FileNotFoundError as exc:
                print(f"instructions: not counted: {exc}")
            else:
                results.append({"shape": "instructions", "turns": args.instructions,
                                "instructions_m_per_turn": millions})
                print(f"instructions: {millions:.2f} M per turn (the daemon's user space, callgrind, "
                      f"{args.instructions} turns of the N=1 shape: connection, hello, turn, close)")
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
