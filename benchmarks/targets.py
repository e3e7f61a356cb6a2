"""The performance targets, checked against one run's figures (``run_all.py`` prints the table).

:func:`check` takes what the scripts printed as JSON — keyed by benchmark name — and returns one
:class:`Row` per target: what was measured, the target, and whether it is met (``None`` when the
figure is missing: that benchmark failed, or was left out of the run).  Nothing here measures; a target is
only as good as the figure behind it, and CPU figures move with the host (``run_all`` prints the
machine's reference-loop time beside them).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Row:
    """One target: ``name``, the figure as printed (``shown``), the target as printed, and met
    (True / False; None when the figure is missing); ``ran``: False when the benchmark behind it
    was not chosen for this run (then ``shown`` is empty)."""

    name: str
    shown: str
    target: str
    met: bool | None
    ran: bool = True


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not math.isnan(value) else None


def _row(name: str, value: Any, target: str, ok: Callable[[float], bool], fmt: str) -> Row:
    number = _num(value)
    if number is None:
        return Row(name, "missing", target, None)
    return Row(name, fmt.format(number), target, ok(number))


def _watcher_row(registry: Mapping[str, Any]) -> Row:
    """The idle folder watcher's CPU per second, read from outside its process (so the reading adds
    no wake-up), with its wake-ups in the window and a bare sleep's CPU beside it; not met when a
    file written afterwards did not wake it (it was not watching, so its idleness proves nothing)."""
    name, target = "idle folder watcher", "≤ 1 ms/s"
    cpu, bare = _num(registry.get("watcher_ms_per_s")), _num(registry.get("bare_ms_per_s"))
    woke, on_change = _num(registry.get("watcher_wakeups")), _num(registry.get("watcher_wakeups_on_change"))
    if cpu is None:
        return Row(name, "missing", target, None)
    shown = f"{cpu:.2f} ms/s"
    if woke is not None:
        shown += f", {woke:.0f} wake-ups in {_num(registry.get('idle_s')) or 0:g} s"
    if bare is not None:
        shown += f" (bare sleep {bare:.2f})"
    if on_change is not None and on_change <= 0:
        return Row(name, shown + "; a change did not wake it", target, False)
    return Row(name, shown, target, cpu <= 1.0)


def _serve(results: Iterable[Mapping[str, Any]], sessions: int) -> Mapping[str, Any] | None:
    """The spread-arrivals run of ``sessions`` (not the burst)."""
    for r in results:
        if r.get("sessions") == sessions and r.get("shape", "").endswith("spread evenly"):
            return r
    return None


def _n1_rounds(results: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The N = 1 rounds against the model with its delay (not the at-once run, nor a gap sweep's)."""
    return [r for r in results if r.get("sessions") == 1 and r.get("shape", "").startswith("sequential")
            and "at once" not in r.get("shape", "") and "idle gap" not in r.get("shape", "")]


def _median(rows: list[Mapping[str, Any]], key: str) -> float | None:
    values = [v for v in (_num(r.get(key)) for r in rows) if v is not None]
    return statistics.median(values) if values else None


def check(figures: Mapping[str, Any], ran: Collection[str] | None = None) -> list[Row]:
    """One :class:`Row` per target, from ``figures``: ``flow`` (store_flow_bench's JSON), ``peers``
    ({system: {variant: figures}}), ``serve`` (serve_bench's list), ``long-thread``,
    ``registry`` and ``startup`` (their scripts' JSON).  ``ran``: the benchmarks chosen for
    this run (None: all); a target whose benchmark was not is ``not run``.  A chosen benchmark
    without figures (it failed) gives rows with ``met=None``, never an error."""
    rows = _check(figures)
    if ran is None:
        return [row for _, row in rows]
    return [row if all(bench in ran for bench in source) else Row(row.name, "", row.target, None, ran=False)
            for source, row in rows]


def _check(figures: Mapping[str, Any]) -> list[tuple[tuple[str, ...], Row]]:
    """Each target's row, with the benchmarks its figure comes from."""
    rows: list[tuple[tuple[str, ...], Row]] = []
    flow = figures.get("flow") or {}
    rows.append((("flow",), _row("flow mean", flow.get("mean_ms"), "≤ 3 ms", lambda v: v <= 3.0, "{:.2f} ms")))
    rows.append((("flow",), _row("flow CPU", flow.get("cpu_ms_per_flow"), "≤ 3 ms", lambda v: v <= 3.0, "{:.2f} ms")))
    peer_means = [(f"{system} {variant}", (fig.get("sequential") or {}).get("mean_ms"))
                  for system, variants in (figures.get("peers") or {}).items() for variant, fig in variants.items()]
    peer_means = [(name, v) for name, v in peer_means if _num(v)]
    mean = _num(flow.get("mean_ms"))
    ratio_row = Row("flow / best peer", "missing", "≤ 0.33×", None)
    if peer_means and mean is not None:
        best, best_ms = min(peer_means, key=lambda p: p[1])
        ratio = mean / best_ms
        ratio_row = Row("flow / best peer", f"{ratio:.2f}× ({best} {best_ms:.2f} ms)", "≤ 0.33×", ratio <= 1 / 3)
    rows.append((("flow", "peers"), ratio_row))
    rows.append((("flow",), _row("flows/s, 100 concurrent", flow.get("median_runs_per_s"), "≥ 300",
                                 lambda v: v >= 300, "{:.1f}")))

    serve = [r for r in (figures.get("serve") or []) if isinstance(r, Mapping)]
    rounds = _n1_rounds(serve)
    net = _median(rounds, "overhead_net_mean_ms")
    serve_rows = [
        _row("serve CPU per turn, N = 1", _median(rounds, "cpu_ms_per_turn"), "≤ 10 ms", lambda v: v <= 10.0,
             "{:.1f} ms" + (f" (median of {len(rounds)})" if len(rounds) > 1 else "")),
        _row("serve overhead, N = 1 (mean)", _median(rounds, "overhead_mean_ms"), "≤ 10 ms", lambda v: v <= 10.0,
             "{:.1f} ms" + (f", {net:.1f} without the double's own latency" if net is not None else "")),
    ]
    for n, p99_max in ((200, 250.0), (1000, 1000.0)):
        run = _serve(serve, n) or {}
        serve_rows.append(_row(f"serve CPU per turn, N = {n:,}", run.get("cpu_ms_per_turn"), "≤ 10 ms",
                               lambda v: v <= 10.0, "{:.1f} ms"))
        serve_rows.append(_row(f"serve p99 overhead, N = {n:,}", run.get("overhead_p99_ms"),
                               f"≤ {p99_max:,.0f} ms", lambda v, m=p99_max: v <= m, "{:.1f} ms"))
    big = _serve(serve, 1000) or {}
    stored, expected = _num(big.get("rows_stored")), _num(big.get("rows_expected"))
    serve_rows.append(Row("rows stored, N = 1,000", "missing", "all", None) if stored is None or expected is None
                      else Row("rows stored, N = 1,000", f"{stored:,.0f} of {expected:,.0f}", "all",
                               stored == expected and big.get("turns_failed") == 0))
    serve_rows.append(_row("daemon RSS, N = 1,000", big.get("peak_rss_mib"), "≤ 300 MiB", lambda v: v <= 300.0,
                           "{:.1f} MiB"))
    rows.extend((("serve",), row) for row in serve_rows)

    long_thread = figures.get("long-thread") or {}
    rows.append((("long-thread",), _row("long thread, last / first 10 %", long_thread.get("ratio"), "≤ 1.2",
                                        lambda v: v <= 1.2, "{:.2f}")))
    registry = figures.get("registry") or {}
    chars, budget = _num(registry.get("catalog_chars")), _num(registry.get("catalog_budget_chars"))
    registry_rows = [
        _row("5,000 personas load", registry.get("load_s"), "≤ 1 s", lambda v: v <= 1.0, "{:.3f} s"),
        _watcher_row(registry),
        Row("catalog within its budget", "missing", "≤ budget", None) if chars is None or budget is None
        else Row("catalog within its budget", f"{chars:,.0f} of {budget:,.0f} characters", "≤ budget", chars <= budget),
    ]
    rows.extend((("registry",), row) for row in registry_rows)
    startup = figures.get("startup") or {}
    rows.append((("startup",), _row("ongridd serve → /healthz", startup.get("healthz_s"), "≤ 0.5 s",
                                    lambda v: v <= 0.5, "{:.3f} s (median)")))
    rows.append((("startup",), _row("ongrid --help", startup.get("help_s"), "≤ 0.3 s", lambda v: v <= 0.3,
                                    "{:.3f} s (median)")))
    return rows


def table(rows: list[Row]) -> list[str]:
    """``rows`` as aligned lines: name, figure, target, ``met`` / ``NOT MET`` / ``no figure``."""
    width = max((len(r.name) for r in rows), default=0)
    shown = max((len(r.shown) for r in rows), default=0)
    target = max((len(r.target) for r in rows), default=0)
    verdict = {True: "met", False: "NOT MET", None: "no figure"}
    return [f"{r.name:{width}}  {r.shown:{shown}}  target {r.target:{target}}  "
            f"{verdict[r.met] if r.ran else 'not run'}" for r in rows]


def summary(rows: list[Row]) -> str:
    """``"N of M met"`` over the targets whose benchmark ran, then which were not met and which had
    no figure (a benchmark that failed)."""
    ran = [r for r in rows if r.ran]
    missed = [r.name for r in ran if r.met is False]
    missing = [r.name for r in ran if r.met is None]
    return (f"{sum(r.met is True for r in ran)} of {len(ran)} met"
            + (f" ({len(rows) - len(ran)} not run)" if len(ran) < len(rows) else "")
            + (f"; NOT MET: {', '.join(missed)}" if missed else "")
            + (f"; no figure: {', '.join(missing)}" if missing else ""))
