"""Start-up times of the two programs (prints measured numbers).

    python benchmarks/startup_bench.py [--runs 10] [--serve-runs 5]

* ``ongrid --help``: the installed entry point (next to this interpreter, else
  ``python -c``), ``--runs`` times after one warm-up; wall seconds from spawn to
  exit and the child's CPU (user + system, from ``wait4``), min / median / max.
  ``python -c pass`` is timed the same way: the interpreter's own floor.
* ``ongridd serve``: a fresh state dir each run, no model configured; seconds from
  spawn until ``GET /healthz`` answers 200 (polled every 10 ms), then SIGTERM.
  "restart": the same, ``--serve-runs`` times on one state dir whose database
  already exists (no schema migration).

"Warm machine": the warm-up run fills the page cache; the figures are medians.
The children run without ``PYTHONDONTWRITEBYTECODE`` (removed from their
environment): an installed daemon has its bytecode caches, so a start-up that
recompiles every edited module would be measured slow for nothing.  Pass
``--keep-env`` to time them with the environment as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def program(name: str, entry: str) -> list[str]:
    exe = BIN / name
    return [str(exe)] if exe.exists() else [sys.executable, "-c", f"from ongridd.cli import {entry}; {entry}()"]


KEEP_ENV = False  # --keep-env: leave PYTHONDONTWRITEBYTECODE in the children's environment


def env() -> dict[str, str]:
    """The children's environment: no ``ONGRID_*`` variables, the repo on
    ``PYTHONPATH``, and (unless ``--keep-env``) no ``PYTHONDONTWRITEBYTECODE``."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("ONGRID_")}
    if not KEEP_ENV:
        out.pop("PYTHONDONTWRITEBYTECODE", None)
    out["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "plugins"), out.get("PYTHONPATH", "")])
    return out


def time_exit(cmd: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of ``cmd`` to its exit."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env())
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def time_healthz(work: Path, i: int | str) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    state = work / f"state-{i}"
    t0 = time.monotonic()
    proc = subprocess.Popen([*program("ongridd", "ongridd_main"), "serve", "--state-dir", str(state),
                             "--listen", f"127.0.0.1:{port}"], cwd=work, env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"ongridd serve exited {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as resp:
                    if resp.status == 200:
                        return time.monotonic() - t0
            except OSError:
                time.sleep(0.01)
            if time.monotonic() - t0 > 60:
                raise RuntimeError("no /healthz in 60 s")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def line(label: str, values: list[float], unit: str = "s") -> str:
    return (f"  {label:28} median {statistics.median(values):6.3f} {unit}   "
            f"min {min(values):6.3f}   max {max(values):6.3f}   (n={len(values)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--serve-runs", type=int, default=5)
    parser.add_argument("--keep-env", action="store_true",
                        help="keep PYTHONDONTWRITEBYTECODE in the children's environment")
    parser.add_argument("--json", action="store_true", help="also print the medians as one JSON line at the end")
    args = parser.parse_args()
    global KEEP_ENV
    KEEP_ENV = args.keep_env
    bytecode = "as set here" if KEEP_ENV or "PYTHONDONTWRITEBYTECODE" not in os.environ else "removed"
    print(f"start-up bench: python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}, children's PYTHONDONTWRITEBYTECODE {bytecode}")
    medians: dict[str, float] = {}
    for label, cmd in (("python -c pass", [sys.executable, "-c", "pass"]),
                       ("ongrid --help", [*program("ongrid", "ongrid_main"), "--help"]),
                       ("ongridd --help", [*program("ongridd", "ongridd_main"), "--help"])):
        time_exit(cmd)  # warm-up
        runs = [time_exit(cmd) for _ in range(args.runs)]
        print(line(f"{label} wall", [w for w, _ in runs]))
        print(line(f"{label} CPU", [c for _, c in runs]))
        medians[label] = statistics.median(w for w, _ in runs)
    with tempfile.TemporaryDirectory(prefix="ongrid-startup-bench-") as tmp:
        time_healthz(Path(tmp), -1)  # warm-up
        fresh = [time_healthz(Path(tmp), i) for i in range(args.serve_runs)]
        print(line("ongridd serve → /healthz", fresh))
        time_healthz(Path(tmp), "restart")  # creates the database
        again = [time_healthz(Path(tmp), "restart") for _ in range(args.serve_runs)]
        print(line("  restart → /healthz", again))
    if args.json:
        print(json.dumps({"help_s": medians["ongrid --help"], "daemon_help_s": medians["ongridd --help"],
                          "python_s": medians["python -c pass"], "healthz_s": statistics.median(fresh),
                          "restart_healthz_s": statistics.median(again)}))


if __name__ == "__main__":
    main()
