"""The evaluation harness behind ``ongrid eval`` (docs/eval.md).

Golden incidents (:mod:`ongridd.evals.suite`) are replayed end to end through
the real runtime with recorded tool results (:mod:`ongridd.evals.fixtures`),
against the scripted model or any OpenAI-compatible endpoint
(:mod:`ongridd.evals.runner`), and scored by root-cause entity F1, tool
calls, dispatches, model calls, loops and wall time
(:mod:`ongridd.evals.scoring`, :mod:`ongridd.evals.report`).  The built-in
suite ships in ``ongridd/evals/suite``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["builtin_suite_dir"]


def builtin_suite_dir() -> Path:
    """The folder of the built-in golden incidents (package data)."""
    return Path(__file__).resolve().parent / "suite"
