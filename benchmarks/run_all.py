"""Every benchmark in one run (prints measured numbers; asserts nothing about time).

    python benchmarks/run_all.py [--peers DIR] [--quick] [--only NAME ...] [--skip NAME ...]

Runs, one after another and each as its own subprocess (a failure is reported and
the rest still run; the exit status is 1 when anything failed):

1. ``flow`` — Ongrid's flow (``store_flow_bench.py``): coordinator → one worker with
   ``AgentTool`` → three echo calls, instant in-process model, SQLite, everything stored;
   mean/p50/p99 ms, CPU ms per flow, flows/s at 100 concurrent.
2. ``peers`` — the same flow on the OpenAI Agents SDK and LangGraph: the peer
   harness in ``--peers DIR`` (or ``$ONGRID_BENCH_PEERS``; without either, skipped)
   runs in its own virtualenv, created on first use from the harness's
   ``requirements-freeze.txt`` as ``~/.cache/ongrid-bench-peers/venv`` (override the
   folder with ``--peers-venv``) and reused while that file is unchanged.  Its scripts print JSON;
   the Ongrid / peer ratios of mean ms and CPU ms per flow are printed from this run.
3. ``serve`` — the serve path (``serve_bench.py``): real ``ongridd serve``, real
   websockets, ``ongrid fake-llm`` with six calls of 0.1 s a turn, at 1, 200 and 1,000
   sessions (N = 1 three times, on fresh daemons, with the medians).
4. ``model-client`` — the model-client path alone (``model_client_bench.py``): Ongrid's
   provider against the official openai SDK, CPU per streamed call, with the server
   answering after 0.1 s and at once.
5. ``long-thread`` — per-turn cost, last 10% of a long thread against the first 10%
   (``long_thread_bench.py``).
6. ``registry`` — 5,000 personas: cold load, reload, catalog, idle watcher
   (``registry_bench.py``).
7. ``startup`` — ``ongrid --help`` and ``ongridd serve`` → ``/healthz``
   (``startup_bench.py``).

Then every target, each with this run's figure and whether it is met (``targets.py``).

``--quick``: small counts everywhere (a smoke run of the whole set, minutes not tens of
minutes); the figures are then noisier.  The machine should be otherwise idle: compare
figures taken in one run, as ratios.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import venv
from pathlib import Path

from machine import reference_loop_ms

HERE = Path(__file__).resolve().parent
PY = sys.executable
DEFAULT_VENV_ROOT = Path.home() / ".cache" / "ongrid-bench-peers"
#: the benchmarks, in the order they run (the names ``--only`` and ``--skip`` take)
BENCHMARKS = ("flow", "peers", "serve", "model-client", "long-thread", "registry", "startup")
#: what failed in this run (the exit status is 1 when anything did)
FAILURES: list[str] = []


def failed(name: str, message: str) -> None:
    """Print ``FAILED: message`` and remember ``name`` for the exit status."""
    print(f"  FAILED: {message}")
    FAILURES.append(name)


def sub(cmd: list[str], timeout_s: float, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> tuple[int | str, str, str]:
    """(exit code or "timeout", stdout, stderr) of one benchmark process."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        return "timeout", exc.stdout or "", exc.stderr or ""
    return proc.returncode, proc.stdout, proc.stderr


def relay(name: str, cmd: list[str], timeout_s: float, keep_json: bool = False) -> dict | list | None:
    """Run one of our scripts, print its output indented; returns its last JSON line if asked."""
    print(f"\n=== {name}: {' '.join(Path(c).name if c == PY else c for c in cmd)}", flush=True)
    t0 = time.monotonic()
    data = None
    with tempfile.TemporaryFile("w+") as err_file:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err_file, text=True)
        timer = threading.Timer(timeout_s, proc.kill)  # a hung benchmark must not stop the others
        timer.start()
        try:
            for line in proc.stdout:  # printed as it comes: a benchmark killed midway keeps its lines
                line = line.rstrip("\n")
                if keep_json and line.startswith(("{", "[")):
                    try:
                        data = json.loads(line)
                        continue
                    except ValueError:
                        pass
                print("  " + line, flush=True)
            rc = proc.wait()
        finally:
            timer.cancel()
        err_file.seek(0)
        err = err_file.read()
    print(f"  ({name}: {time.monotonic() - t0:.0f} s)")
    if rc != 0:
        failed(name, f"{name} exited {rc}; last lines of its stderr:")
        for line in err.strip().splitlines()[-15:]:
            print("    " + line)
        return None
    return data


def peers_python(peers: Path, root: Path) -> Path:
    """The peers' virtualenv interpreter, created from their frozen requirements when missing
    or when the requirements changed."""
    req = peers / "requirements-freeze.txt"
    digest = hashlib.sha256(req.read_bytes()).hexdigest()[:16]
    env_dir = root / "venv"
    python = env_dir / "bin" / "python"
    marker = env_dir / ".requirements-sha256"  # written once the install succeeded
    if marker.exists() and marker.read_text() == digest and python.exists():
        print(f"  peers' virtualenv: {env_dir} (reused; from {req})")
        return python
    print(f"  peers' virtualenv: creating {env_dir} from {req} ...", flush=True)
    venv.create(env_dir, with_pip=True, clear=True)
    rc, out, err = sub([str(python), "-m", "pip", "install", "-q", "-r", str(req)], 1800)
    if rc != 0:
        raise RuntimeError(f"pip install failed ({rc}): {err.strip().splitlines()[-5:]}")
    marker.write_text(digest)
    return python


def run_peers(peers: Path | None, venv_root: Path, quick: bool, timeout_s: float) -> dict[str, dict]:
    """{"openai-agents": {variant: figures}, "langgraph": {...}}, printing a line per variant."""
    print("\n=== peers: the same flow on the OpenAI Agents SDK and LangGraph", flush=True)
    if peers is None:
        print("  SKIPPED: no peers' harness (give --peers DIR or set $ONGRID_BENCH_PEERS)")
        return {}
    try:
        python = peers_python(peers, venv_root)
    except Exception as exc:  # noqa: BLE001 - reported, the other benchmarks still run
        failed("peers", f"peers' virtualenv: {exc}")
        return {}
    env = dict(os.environ)
    if quick:
        env.update(PB_WARMUP="5", PB_MEASURED="100", PB_CONCURRENT="100", PB_CONC_BATCHES="2")
    print(f"  counts: warm-up {env.get('PB_WARMUP', '20')}, sequential {env.get('PB_MEASURED', '500')}, "
          f"{env.get('PB_CONC_BATCHES', '3')} batches of {env.get('PB_CONCURRENT', '100')} concurrent")
    results: dict[str, dict] = {}
    for system, script in (("openai-agents", "bench_openai_agents.py"), ("langgraph", "bench_langgraph.py")):
        t0 = time.monotonic()
        rc, out, err = sub([str(python), str(peers / script)], timeout_s, env=env, cwd=peers)
        try:
            data = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            data = None
        if rc != 0 or data is None:
            failed(script, f"{script} exited {rc}; last lines of its stderr:")
            for line in err.strip().splitlines()[-10:]:
                print("    " + line)
            continue
        results[system] = data.get("variants", {})
        for variant, fig in results[system].items():
            seq, conc = fig.get("sequential") or {}, fig.get("concurrent") or {}  # sync variants: no concurrent
            print(f"  {system:13} {variant:18} mean {seq.get('mean_ms', float('nan')):7.2f} ms  "
                  f"p50 {seq.get('p50_ms', float('nan')):7.2f}  p99 {seq.get('p99_ms', float('nan')):7.2f}  "
                  f"CPU {seq.get('cpu_ms_per_flow', float('nan')):7.2f} ms/flow  "
                  f"{conc.get('median_runs_per_s', float('nan')):7.1f} flows/s  "
                  f"RSS {fig.get('peak_rss_mib', float('nan')):6.1f} MiB")
        print(f"  ({system}: {time.monotonic() - t0:.0f} s)")
    return results


def guarded(name: str, step, *args):
    """Run one phase; an error in it (in this script) is printed and the run goes on."""
    try:
        return step(*args)
    except Exception as exc:  # noqa: BLE001 - reported, the other benchmarks still run
        failed(name, f"{name}: {type(exc).__name__}: {exc}")
        return None


def print_ratios(ongrid: dict | None, peers: dict[str, dict]) -> None:
    print("\n=== Ongrid / peer ratios (this run; mean and CPU: < 1 = Ongrid faster or cheaper; "
          "flows/s: > 1 = Ongrid more flows per second)")
    if not ongrid or not peers:
        print("  SKIPPED: " + ("Ongrid's flow figures are missing" if not ongrid else "no peer figures"))
        return
    print(f"  Ongrid (SQLite, everything stored): mean {ongrid['mean_ms']:.2f} ms, "
          f"CPU {ongrid['cpu_ms_per_flow']:.2f} ms/flow, {ongrid['median_runs_per_s']:.1f} flows/s")
    for system, variants in peers.items():
        for variant, fig in variants.items():
            seq = fig.get("sequential") or {}
            if not seq.get("mean_ms") or not seq.get("cpu_ms_per_flow"):
                continue
            conc = (fig.get("concurrent") or {}).get("median_runs_per_s")
            print(f"  vs {system:13} {variant:18} mean {ongrid['mean_ms'] / seq['mean_ms']:5.2f}×   "
                  f"CPU {ongrid['cpu_ms_per_flow'] / seq['cpu_ms_per_flow']:5.2f}×"
                  + (f"   flows/s {ongrid['median_runs_per_s'] / conc:5.2f}×" if conc else ""))


def print_targets(figures: dict, ran: list[str], speeds: list[float]) -> None:
    """Every target against this run's figure (``targets.py``; ``ran``: the benchmarks chosen),
    with the machine's speed at the start and end of the run (``speeds``, the reference loop's ms):
    CPU figures scale with it, so a target missed on a slow host may be met on a faster one."""
    from targets import check, summary, table

    print("\n=== targets (this run; the reference loop took "
          + " and ".join(f"{ms:.1f}" for ms in speeds) + " ms of CPU at its start and end)")
    rows = check(figures, ran)
    for line in table(rows):
        print("  " + line)
    print("  " + summary(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="benchmarks: " + " ".join(BENCHMARKS))
    parser.add_argument("--peers", type=Path, default=os.environ.get("ONGRID_BENCH_PEERS") or None,
                        help="the peers' harness folder (default $ONGRID_BENCH_PEERS)")
    parser.add_argument("--peers-venv", type=Path, default=DEFAULT_VENV_ROOT, metavar="FOLDER",
                        help=f"the peers' virtualenv is made in FOLDER/venv (default {DEFAULT_VENV_ROOT})")
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke run)")
    parser.add_argument("--only", nargs="+", default=None, metavar="NAME", choices=BENCHMARKS)
    parser.add_argument("--skip", nargs="+", default=[], metavar="NAME", choices=BENCHMARKS)
    args = parser.parse_args()
    chosen = lambda name: (args.only is None or name in args.only) and name not in args.skip  # noqa: E731
    q = args.quick
    speeds = [reference_loop_ms()]
    print(f"run_all: python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}, {'quick' if q else 'full'} counts, {time.strftime('%Y-%m-%d %H:%M:%S')}; "
          f"the reference loop took {speeds[0]:.1f} ms of CPU (benchmarks/machine.py)")
    started = time.monotonic()
    ongrid_flow = None
    figures: dict[str, object] = {}  # each benchmark's JSON, for the targets at the end
    if chosen("flow"):
        counts = ["--flows", "100", "--warmup", "10", "--batches", "2"] if q else []
        ongrid_flow = figures["flow"] = relay("flow", [PY, str(HERE / "store_flow_bench.py"), *counts, "--json"],
                                              1800, True)
    peer_figures: dict[str, dict] = {}
    if chosen("peers"):
        peer_figures = guarded("peers", run_peers, args.peers.resolve() if args.peers else None,
                               args.peers_venv, q, 3600) or {}
        figures["peers"] = peer_figures
    if chosen("flow") or chosen("peers"):
        guarded("ratios", print_ratios, ongrid_flow, peer_figures)
    if chosen("serve"):
        counts = ["--sessions", "1", "200", "1000", "--single-turns", "10" if q else "30",
                  "--single-rounds", "1" if q else "3"]
        if shutil.which("valgrind"):  # instructions per turn: the one serve figure a busy host does not move
            counts += ["--instructions", "5" if q else "10"]
        figures["serve"] = relay("serve", [PY, str(HERE / "serve_bench.py"), *counts, "--json"], 3600, True)
    if chosen("model-client"):
        relay("model-client", [PY, str(HERE / "model_client_bench.py"), *(["--calls", "20"] if q else [])], 600)
    if chosen("long-thread"):
        figures["long-thread"] = relay("long-thread", [PY, str(HERE / "long_thread_bench.py"), "--json",
                                                       *(["--turns", "60"] if q else [])], 3600, True)
    if chosen("registry"):
        figures["registry"] = relay("registry", [PY, str(HERE / "registry_bench.py"), "--personas", "5000",
                                                 "--idle-s", "2" if q else "10", "--json"], 1800, True)
    if chosen("startup"):
        figures["startup"] = relay("startup", [PY, str(HERE / "startup_bench.py"), "--json",
                                               *(["--runs", "5", "--serve-runs", "3"] if q else [])], 600, True)
    speeds.append(reference_loop_ms())
    guarded("targets", print_targets, figures, [name for name in BENCHMARKS if chosen(name)], speeds)
    print(f"\nrun_all: done in {time.monotonic() - started:.0f} s"
          + (f"; FAILED: {', '.join(FAILURES)}" if FAILURES else ""))
    if FAILURES:
        sys.exit(1)


if __name__ == "__main__":
    main()
