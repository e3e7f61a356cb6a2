"""The results of an evaluation run: the terminal table and the ``--json`` object.

JSON (one object)::

    {"model": "...",
     "incidents": [{"name", "f1", "recall", "precision", "tool_calls", "dispatches",
                    "model_calls", "loop", "seconds", "prompt_tokens", "completion_tokens",
                    "cached_tokens"}],
     "mean_f1": 0.0-1.0, "pass_rate": 0.0-1.0,
     "totals": {"incidents", "passed", "tool_calls", "dispatches", "model_calls",
                "seconds", "prompt_tokens", "completion_tokens", "cached_tokens"}}

Scores are rounded to 4 decimals, seconds to 0.01; token counts are the
session tree's stored usage counters (coordinator, workers, reviewers), and
``null`` when the endpoint reported no usage.  An incident passes with
F1 ≥ 0.5, no loop, and an answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ongridd.evals.runner import SCRIPTED_MODEL, IncidentResult

COLUMNS = ("incident", "f1", "recall", "prec", "tools", "disp", "model", "loop", "secs", "tokens in/out", "")


def _tokens_total(values: Sequence[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def to_json(model: str, results: Sequence[IncidentResult]) -> dict[str, Any]:
    """The ``--json`` object (see the module docstring)."""
    incidents = [{
        "name": r.name, "f1": round(r.score.f1, 4), "recall": round(r.score.recall, 4),
        "precision": round(r.score.precision, 4), "tool_calls": r.tool_calls, "dispatches": r.dispatches,
        "model_calls": r.model_calls, "loop": r.loop, "seconds": round(r.seconds, 2),
        "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
        "cached_tokens": r.cached_tokens,
    } for r in results]
    n = len(results)
    passed = sum(1 for r in results if r.passed)
    return {
        "model": model,
        "incidents": incidents,
        "mean_f1": round(sum(r.score.f1 for r in results) / n, 4) if n else 0.0,
        "pass_rate": round(passed / n, 4) if n else 0.0,
        "totals": {
            "incidents": n, "passed": passed,
            "tool_calls": sum(r.tool_calls for r in results),
            "dispatches": sum(r.dispatches for r in results),
            "model_calls": sum(r.model_calls for r in results),
            "seconds": round(sum(r.seconds for r in results), 2),
            "prompt_tokens": _tokens_total([r.prompt_tokens for r in results]),
            "completion_tokens": _tokens_total([r.completion_tokens for r in results]),
            "cached_tokens": _tokens_total([r.cached_tokens for r in results]),
        },
    }


def table(model: str, results: Sequence[IncidentResult]) -> str:
    """A fixed-width table, one row per incident, then the means and totals."""
    data = to_json(model, results)
    rows = []
    for r, j in zip(results, data["incidents"], strict=True):
        tokens = "-" if j["prompt_tokens"] is None else f"{j['prompt_tokens']}/{j['completion_tokens']}"
        rows.append((j["name"], f"{j['f1']:.2f}", f"{j['recall']:.2f}", f"{j['precision']:.2f}",
                     str(j["tool_calls"]), str(j["dispatches"]), str(j["model_calls"]),
                     "LOOP" if j["loop"] else "-", f"{j['seconds']:.1f}", tokens,
                     "pass" if r.passed else "FAIL"))
    t = data["totals"]
    tokens = "-" if t["prompt_tokens"] is None else f"{t['prompt_tokens']}/{t['completion_tokens']}"
    footer = ("total", f"{data['mean_f1']:.2f}", "", "", str(t["tool_calls"]), str(t["dispatches"]),
              str(t["model_calls"]), str(sum(1 for r in results if r.loop)), f"{t['seconds']:.1f}", tokens,
              f"{t['passed']}/{t['incidents']}")
    widths = [max(len(str(row[i])) for row in (COLUMNS, *rows, footer)) for i in range(len(COLUMNS))]

    def fmt(row: Sequence[str]) -> str:
        cells = [str(c).ljust(widths[0]) if i == 0 else str(c).rjust(widths[i]) for i, c in enumerate(row)]
        return "  ".join(cells).rstrip()

    rule = "-" * len(fmt(COLUMNS))
    shown = (f"{model} — each incident's scripted answers, a test double: the figures check the harness "
             "and the tools on real data, not a model (give --llm-base-url and --model to score one)"
             if model == SCRIPTED_MODEL else model)
    lines = [f"model: {shown}", fmt(COLUMNS), rule, *(fmt(r) for r in rows), rule, fmt(footer),
             f"mean F1 {data['mean_f1']:.3f}; pass rate {data['pass_rate']:.0%} "
             f"({t['passed']} of {t['incidents']}: F1 >= 0.5 and no loop)"]
    return "\n".join(lines)
