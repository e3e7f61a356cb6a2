"""The targets table ``benchmarks/run_all.py`` ends with: each figure against its target, a missing
benchmark shown as such, never as met."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "bench_targets", Path(__file__).resolve().parent.parent / "benchmarks" / "targets.py")
assert _spec is not None and _spec.loader is not None
targets = sys.modules["bench_targets"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(targets)


def n1(cpu: float, overhead: float, label: str = "round 1") -> dict:
    return {"sessions": 1, "shape": f"sequential, fresh thread each, {label}", "cpu_ms_per_turn": cpu,
            "overhead_mean_ms": overhead, "overhead_net_mean_ms": overhead - 2}


def spread(n: int, cpu: float, p99: float, stored: int = 100, expected: int = 100) -> dict:
    return {"sessions": n, "shape": f"{n / 4:g} turns/s spread evenly", "cpu_ms_per_turn": cpu,
            "overhead_p99_ms": p99, "rows_stored": stored, "rows_expected": expected, "turns_failed": 0,
            "peak_rss_mib": 150.0}


FIGURES = {
    "flow": {"mean_ms": 1.9, "cpu_ms_per_flow": 1.9, "median_runs_per_s": 466.0},
    "peers": {"openai-agents": {"none": {"sequential": {"mean_ms": 7.2}}, "sqlite": {"sequential": {"mean_ms": 12}}},
              "langgraph": {"none": {"sequential": {"mean_ms": 9.35}}}},
    "serve": [{"shape": "machine", "reference_loop_ms": 32.0}, n1(9.0, 8.0), n1(11.0, 9.0, "round 2"),
              n1(9.5, 8.5, "round 3"), n1(4.0, 3.0, "the model answering at once"),
              n1(30.0, 30.0, "idle gap 1s"), n1(30.0, 30.0, "idle gap 2s"),
              spread(200, 6.0, 40.0), spread(1000, 7.0, 140.0, 17017, 17017),
              {"sessions": 1000, "shape": "burst (all at once)", "cpu_ms_per_turn": 50.0, "overhead_p99_ms": 9e3}],
    "long-thread": {"ratio": 0.9},
    "registry": {"load_s": 0.65, "watcher_ms_per_s": 0.0, "bare_ms_per_s": 0.01,
                 "watcher_wakeups": 0, "watcher_wakeups_on_change": 41, "idle_s": 10,
                 "catalog_chars": 16000, "catalog_budget_chars": 16000},
    "startup": {"healthz_s": 0.44, "help_s": 0.04},
}


def by_name(rows):
    return {r.name: r for r in rows}


def test_every_target_met_reads_met_with_the_n1_medians_and_the_best_peer():
    rows = by_name(targets.check(FIGURES))
    assert all(r.met is True for r in rows.values()), [r for r in rows.values() if r.met is not True]
    # N = 1: the median of the rounds with the model's delay (not the at-once run, nor a gap sweep's)
    assert rows["serve CPU per turn, N = 1"].shown == "9.5 ms (median of 3)"
    assert rows["flow / best peer"].shown == "0.26× (openai-agents none 7.20 ms)"
    # the spread-arrivals run, not the burst
    assert rows["serve p99 overhead, N = 1,000"].shown == "140.0 ms"
    # read from outside the idle process: its CPU, its wake-ups, and a bare sleep's CPU beside them
    assert rows["idle folder watcher"].shown == "0.00 ms/s, 0 wake-ups in 10 s (bare sleep 0.01)"


def test_an_idle_watcher_over_its_budget_or_not_watching_is_not_met():
    rows = by_name(targets.check({"registry": {"watcher_ms_per_s": 1.2, "bare_ms_per_s": 0.0}}))
    assert rows["idle folder watcher"].met is False
    rows = by_name(targets.check({"registry": {"watcher_ms_per_s": 0.5}}))  # older figures: CPU alone
    assert rows["idle folder watcher"].met is True and rows["idle folder watcher"].shown == "0.50 ms/s"
    # idle because it was not watching: a file written afterwards did not wake it
    rows = by_name(targets.check({"registry": {"watcher_ms_per_s": 0.0, "watcher_wakeups": 0,
                                               "watcher_wakeups_on_change": 0, "idle_s": 10}}))
    assert rows["idle folder watcher"].met is False
    assert rows["idle folder watcher"].shown.endswith("a change did not wake it")


def test_a_missed_target_and_a_lost_row_read_not_met():
    figures = {**FIGURES, "flow": {**FIGURES["flow"], "mean_ms": 3.37}, "startup": {"healthz_s": 0.75, "help_s": 0.05}}
    figures["serve"] = [*FIGURES["serve"][:6], spread(1000, 7.0, 140.0, 17016, 17017)]
    rows = by_name(targets.check(figures))
    assert rows["flow mean"].met is False and rows["ongridd serve → /healthz"].met is False
    assert rows["rows stored, N = 1,000"].met is False and rows["rows stored, N = 1,000"].shown == "17,016 of 17,017"
    assert rows["flow CPU"].met is True and rows["ongrid --help"].met is True


def test_a_benchmark_that_did_not_run_is_missing_never_met():
    rows = targets.check({"flow": FIGURES["flow"]})
    missing = [r for r in rows if r.met is None]
    assert {r.name for r in missing} >= {"flow / best peer", "serve CPU per turn, N = 1", "5,000 personas load",
                                         "ongridd serve → /healthz", "rows stored, N = 1,000"}
    assert all(r.shown == "missing" for r in missing)
    lines = targets.table(rows)
    assert len(lines) == len(rows) and any(line.endswith("no figure") for line in lines)
    assert any(line.endswith("met") and line.startswith("flow mean") for line in lines)


def test_a_benchmark_left_out_is_not_run_and_not_counted():
    rows = targets.check({"registry": FIGURES["registry"], "startup": {"healthz_s": 0.75, "help_s": 0.05}},
                         ran=["registry", "startup"])
    names = by_name(rows)
    assert names["flow mean"].shown == "" and not names["flow mean"].ran
    assert not names["flow / best peer"].ran  # needs both flow and peers
    assert names["5,000 personas load"].met is True and names["ongridd serve → /healthz"].met is False
    assert targets.summary(rows) == "4 of 5 met (13 not run); NOT MET: ongridd serve → /healthz"
    assert sum(line.endswith("not run") for line in targets.table(rows)) == 13
    # chosen but without figures (it failed): no figure, and said so
    failed = targets.check({"registry": FIGURES["registry"]}, ran=["registry", "startup"])
    assert targets.summary(failed) == ("3 of 5 met (13 not run); no figure: ongridd serve → /healthz, "
                                       "ongrid --help")
