"""The review gate's decision rule (DESIGN.md §10), as a pure function."""

from __future__ import annotations

import re

import attrs

_MARKS = re.compile(r"[*_`~]")
_DECISION = re.compile(r"^decision:\s*(approve|reject)(?![\w/|\\-])(.*)$", re.IGNORECASE)
_VERDICT_WORD = re.compile(r"\b(approve|reject)", re.IGNORECASE)


@attrs.frozen
class Decision:
    """``decision``: ``approve`` or ``reject``; ``reason``: the text after the
    last decision line (or why the answer was treated as a rejection)."""

    decision: str
    reason: str

    @property
    def approved(self) -> bool:
        return self.decision == "approve"


def parse_decision(answer: str | None) -> Decision:
    """Apply the rule: approve only when at least one decision line exists and
    every decision line says approve; anything else rejects (fail closed).

    A decision line is one that, with markdown emphasis and code marks
    (``* _ ` ~``) removed and surrounding white space stripped, starts with
    ``Decision:`` followed by ``approve`` or ``reject`` (any case) as a
    whole word (``approve-not``, ``approve/reject`` are not verdicts).  A
    decision line that also names the other verdict later on
    (``Decision: approve or reject``) is ambiguous and rejects.
    """
    lines = (answer or "").splitlines()
    verdicts: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        m = _DECISION.match(_MARKS.sub("", line).strip())
        if m:
            verdict = m.group(1).lower()
            # "Decision: approve or reject", "approve | reject — I reject": the
            # line names both verdicts, so it decides nothing (fail closed)
            if any(w.lower() != verdict for w in _VERDICT_WORD.findall(m.group(2))):
                verdict = "ambiguous"
            verdicts.append((i, verdict))
    if not verdicts:
        return Decision("reject", "the reviewer gave no 'Decision: approve|reject' line (fail closed)")
    rest = "\n".join(lines[verdicts[-1][0] + 1:]).strip()
    if all(v == "approve" for _, v in verdicts):
        return Decision("approve", rest or "approved by the reviewer")
    if any(v == "ambiguous" for _, v in verdicts):
        return Decision("reject", (rest + "\n" if rest else "") + "(a decision line names both verdicts: fail closed)")
    if any(v == "approve" for _, v in verdicts):
        return Decision("reject", (rest + "\n" if rest else "") + "(conflicting decision lines: fail closed)")
    return Decision("reject", rest or "rejected by the reviewer")
