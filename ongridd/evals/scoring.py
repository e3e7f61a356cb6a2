"""Scoring one incident's answer and session tree.

Entity matching: both texts are Unicode NFC, case-folded, whitespace runs
collapsed to one space; an entity is found when it occurs in the answer on
word boundaries (see :func:`found`): ``db-2`` is not found inside ``db-20``,
``xdb-2`` or ``db-2-replica``, while it is found in "on db-2." and
``/var/lib/postgresql/pg_wal`` is found in ``/var/lib/postgresql/pg_wal/``.

Scores: recall = expected found / expected; precision = expected found /
(expected found + distractors found), 1.0 when nothing is found at all;
F1 = their harmonic mean, 0 when recall is 0.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ongridd.tools.spec import CONTROL_TOOL_NAMES

#: tools that steer the run and are not counted as tool calls
CONTROL_TOOLS = frozenset(CONTROL_TOOL_NAMES)
#: an answer longer than this is scored on its first this-many characters
MAX_ANSWER_CHARS = 2_000_000


def normalize(text: str) -> str:
    """NFC, case-folded, whitespace runs collapsed to one space, trimmed."""
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def found(entity: str, text_normalized: str) -> bool:
    """True when ``entity`` occurs in ``text_normalized`` (already
    :func:`normalize`\\ d) on word boundaries: the character before it is
    not a word character (letter, digit, ``_``), and the character after it
    is not a word character nor a ``-``/``.`` followed by a word character
    (so ``db-2`` is not in ``db-20`` nor ``db-2-replica``, but is in
    ``db-2.`` at the end of a sentence)."""
    needle = normalize(entity)
    if not needle:
        return False
    start = 0
    n = len(text_normalized)
    while True:
        i = text_normalized.find(needle, start)
        if i < 0:
            return False
        j = i + len(needle)
        before_ok = i == 0 or not _word(text_normalized[i - 1]) or not _word(needle[0])
        after = text_normalized[j] if j < n else ""
        after_ok = True
        if after and _word(needle[-1]):
            if _word(after):
                after_ok = False
            elif after in "-." and j + 1 < n and _word(text_normalized[j + 1]):
                after_ok = False
        if before_ok and after_ok:
            return True
        start = i + 1


@attrs.frozen(kw_only=True)
class EntityScore:
    recall: float
    precision: float
    f1: float
    found: tuple[str, ...]
    missed: tuple[str, ...]
    distractors_found: tuple[str, ...]


def score_answer(answer: str, expected: Sequence[str], distractors: Sequence[str] = ()) -> EntityScore:
    """Recall, precision and F1 of ``answer`` against the expected entities
    (see the module docstring).  ``expected`` must not be empty."""
    if not expected:
        raise ValueError("score_answer: no expected entities")
    text = normalize(answer[:MAX_ANSWER_CHARS])
    hit = tuple(e for e in expected if found(e, text))
    missed = tuple(e for e in expected if e not in hit)
    bad = tuple(d for d in distractors if found(d, text))
    recall = len(hit) / len(expected)
    precision = 1.0 if not hit and not bad else len(hit) / (len(hit) + len(bad))
    f1 = 0.0 if recall == 0 else 2 * precision * recall / (precision + recall)
    return EntityScore(recall=recall, precision=precision, f1=f1, found=hit, missed=missed,
                       distractors_found=bad)


@attrs.frozen(kw_only=True)
class TreeCounts:
    """``tool_calls``: audit rows of the whole tree minus control tools;
    ``dispatches``: AgentTool rows; ``by_tool``: name → count (control
    tools included)."""

    tool_calls: int
    dispatches: int
    by_tool: dict[str, int]


def count_audit(rows: Iterable[dict[str, Any]]) -> TreeCounts:
    """Counts from the audit rows of a session tree (``tool_name`` per row)."""
    by_tool: dict[str, int] = {}
    for row in rows:
        name = str(row.get("tool_name") or "")
        by_tool[name] = by_tool.get(name, 0) + 1
    calls = sum(v for k, v in by_tool.items() if k not in CONTROL_TOOLS)
    return TreeCounts(tool_calls=calls, dispatches=by_tool.get("AgentTool", 0), by_tool=by_tool)


def is_loop(tool_calls: int, max_tool_calls: int | None) -> bool:
    """True when ``tool_calls`` exceeds the incident's ``max_tool_calls``."""
    return max_tool_calls is not None and tool_calls > max_tool_calls


def passed(f1: float, loop: bool) -> bool:
    """An incident passes with F1 ≥ 0.5 and no loop."""
    return f1 >= 0.5 and not loop
