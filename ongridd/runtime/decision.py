"""The review gate's decision rule, as pure functions (fail closed).

:func:`parse_decision` reads the reviewer's final answer; :func:`review_decision`
turns a whole reviewer outcome (status, answer, how the model ended it) into a
:class:`Decision`.  Approval is the single narrow case; everything else rejects.

The rule, line by line:

* **Detection is broad.**  A line is a *decision line* when its *skeleton*
  starts with ``decision`` or holds ``decision:`` anywhere.  The skeleton is
  the line with compatibility forms folded (NFKD: fullwidth and mathematical
  letters, ligatures, ``ſ``), accents, format characters (zero-width spaces
  and joiners, BOM, soft hyphen, bidi marks) and control characters removed,
  Cyrillic/Greek/small-capital letters that look like Latin ones mapped to
  those, emphasis and code marks (``* _ ~ ```), backslashes, slashes and
  tag brackets removed (a tag's content stays), every leading heading/quote/list/number/table/bullet/quote-mark
  marker stripped (repeatedly: ``> - 1. **…**``), and all white space removed.
  So a reject line that hides behind markdown or look-alike characters still
  counts as a decision line, and therefore still rejects.
* **Approval is narrow.**  A decision line approves only when its *plain*
  form — emphasis and code marks (``* _ ```) removed, leading ``#``, ``>``,
  ``-``, ``*``, ``+``, ``1.``, ``1)`` markers stripped repeatedly, outer
  spaces/tabs trimmed — is exactly ``Decision: approve`` in ASCII, any case,
  optionally with one final period.  Spaces or tabs may stand around the
  colon (``Decision : approve``, ``Decision:approve``); nothing else may:
  no other text, no second period, no ``?``, no strikethrough (``~``), no
  non-ASCII character (a look-alike letter, a zero-width or no-break space).
* The answer approves only when it has at least one decision line, every
  decision line approves, and no line says no anywhere else (its skeleton
  holds ``reject``, ``disapprov`` or ``denied``, or its words (:func:`words`:
  folded like the skeleton, spaces kept, so a no never forms across two words)
  hold ``deny``, ``veto``, ``decline``, ``refuse``, ``unable to``, ``withheld``,
  ``prohibit``, ``forbid``, ``unapproved``, a ``not … approve|sign off|allow|
  proceed|do it|run it|recommend|advise|go ahead|safe`` form, ``advise|recommend against``,
  ``absolutely not``, ``hard no``, ``all gates failed``, ``0 of 3 gates passed``,
  a prohibition opening the line (``Do not …``, ``Never …``),
  ``the answer is no``, a gate marked ``fail``, ``no-go``, ``hold off``, or
  their Chinese forms (``拒绝``/``拒絕``, ``不批准``, ``不予通过``, ``请勿`` …),
  every apostrophe look-alike read as ``'``: ``Final verdict: REJECT`` beside a clean approval
  rejects; a reason that merely mentions such a word rejects too — fail
  closed), and no approving line stands inside a fenced code block (quoted
  material, such as the proposal, is not the reviewer's verdict).

:func:`review_decision` adds what the text cannot show: the reviewer must have
completed, not from a limit (``stopped_by`` unset), and its model must have
ended the answer with ``finish_reason == "stop"`` (``length``,
``content_filter``, a missing value or anything else rejects).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import attrs

#: what the model must have said about how its final answer ended
NORMAL_FINISH = "stop"

# ---- the plain form (approval) ------------------------------------------------

_PLAIN_MARKS = re.compile(r"[*_`]")
_PLAIN_LEAD = re.compile(r"^(?:[ \t]*(?:#+|>|[-*+]|\d{1,9}[.)]))*")
_APPROVE = re.compile(r"decision[ \t]*:[ \t]*approve\.?", re.ASCII | re.IGNORECASE)
_REJECT = re.compile(r"decision[ \t]*[:\-–—]?[ \t]*reject", re.ASCII | re.IGNORECASE)

# ---- the skeleton (detection) ---------------------------------------------------

#: letters of other scripts that look like Latin ones (lower-cased skeleton)
_LOOKALIKES = str.maketrans({
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c",
    "т": "t", "у": "y", "х": "x", "і": "i", "ї": "i", "ј": "j", "ѕ": "s", "ԁ": "d", "ԛ": "q", "ԝ": "w",
    "һ": "h", "ӏ": "i", "ո": "n", "ց": "g", "ս": "u", "օ": "o",
    # Greek
    "α": "a", "β": "b", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t", "υ": "u",
    "χ": "x", "ϲ": "c", "ϳ": "j", "ς": "s", "η": "n",
    # Latin small capitals and other look-alikes
    "ᴀ": "a", "ʙ": "b", "ᴄ": "c", "ᴅ": "d", "ᴇ": "e", "ɢ": "g", "ʜ": "h", "ɪ": "i", "ᴊ": "j", "ᴋ": "k",
    "ʟ": "l", "ᴍ": "m", "ɴ": "n", "ᴏ": "o", "ᴘ": "p", "ʀ": "r", "ꜱ": "s", "ᴛ": "t", "ᴜ": "u", "ᴠ": "v",
    "ᴡ": "w", "ʏ": "y", "ᴢ": "z", "ı": "i", "ȷ": "j", "ɑ": "a", "ɡ": "g", "ɩ": "i", "ɵ": "o",
    # apostrophes as models and keyboards write them: "shouldn’t" is "shouldn't"
    "’": "'", "‘": "'", "ʼ": "'", "ʹ": "'", "′": "'", "‛": "'", "ˈ": "'",
})
_DROP_CATEGORIES = frozenset({"Cf", "Cc", "Mn", "Me", "Co", "Cs"})
#: tag brackets go, their content stays: ``<decision>reject</decision>`` must still be seen
_SKELETON_MARKS = re.compile(r"[<>*_~`\\/]")
#: words that say no, matched on the skeleton (no white space: spacing or markup inside them does
#: not hide them): long enough never to form by accident across two words
_NEGATIVE_ANYWHERE = re.compile(r"reject|disapprov|denied")
#: ways of saying no, matched on the line's words (:func:`words`: the skeleton's folding, single
#: spaces kept, so ``have to`` is no ``veto`` and ``threshold offset`` no ``hold off``): deny, veto,
#: decline, refuse to, unable to, withhold, prohibit, forbid, unapproved; a "not … approve" form
#: ("not going to approve", "can't approve", "cannot sign off", "would not do it", "do not
#: recommend", "not safe"); "advise against", "absolutely not", "hard no", "all gates failed",
#: "0/3 gates passed"; a prohibition ("do not …",
#: "don't …", "never …" opening the line); "the answer is no"; a gate marked failed; no-go and
#: hold off; and the same in Chinese, simplified and traditional.  A list of words can never hold
#: every way of saying no: it backs up the decision line, which must be exactly "Decision:
#: approve" for anything to run.
_NOT = r"(?:not|never|cannot|(?:can|don|won|shouldn|wouldn|couldn|mustn|isn|wasn|didn|doesn|aren|shan)'?t)"
_NEGATIVE_WORDS = re.compile(
    r"\b(?:deny|denies|denying|veto(?:es|ed)?|declined?|refus(?:e|ed|es|ing)|unable to|"
    r"withh(?:o|e)ld(?:s|ing)?|no-go|hold off)\b"
    r"|\b(?:prohibit|forbid|unapprov|disallow)"
    rf"|\b{_NOT}(?: \w+){{0,3}} (?:approv|sign(?:ed)? ?off|allow|permit|proceed|happen|let (?:it|this|that)"
    r"|(?:do|run|execute|perform|apply) (?:it|this|that)\b|recommend|advis|go ahead|safe\b)"
    r"|\b(?:advis|recommend|argu)(?:e|es|ed|ing)? against\b|\b(?:absolutely not|hard no)\b"
    r"|\b(?:all|every|each) (?:the )?gates? (?:have |has )?fail|\b0 ?(?:of )?\d+ (?:gates? )?pass"
    rf"|^(?:please )?(?:do not|don'?t|never)\b|^no[,.!;:]"
    r"|\b(?:answer|verdict|decision|conclusion|response)(?: is)?:? no\b"
    r"|^(?:\d+[.)] ?)?(?:runbook|parallel|rollback|gate|blast radius)\b[^:]{0,40}: ?fail"
    r"|拒绝|拒絕|否决|否決|驳回|駁回|不批准|不批準|不予批准|不予批準|不予通过|不予通過|不通过|不通過|不同意|"
    r"无法批准|無法批准|不能批准|不建议|不建議|未批准|未批準|请勿|請勿"
    # "should not / must not / may not / do not … run, execute, approve": not "should not affect"
    r"|(?:不应|不應|不该|不該|不能|不可|不要|不得|禁止|不允许|不允許)(?:该|該)?(?:被)?"
    r"(?:执行|執行|运行|運行|批准|批準|进行|進行|操作)")


#: a fenced code block's opening or closing line (its lines are quoted material, not a verdict)
_FENCE = re.compile(r"^[ \t>]*(```|~~~)")
_SKELETON_LEAD = re.compile(
    r"^(?:\s|#+|>|[-*+|=]|\d{1,9}[.):]|\[[ xX]?\]|[•◦▪▫‣⁃∙·●○■□►▶▸→⇒➤–—―]|[\"'“”„‘’‚«»‹›(\[{]|[.:;,!?])+")
_SPACE = re.compile(r"\s+")


def _folded(line: str) -> str:
    """The line with compatibility forms, format and control characters, accents, case,
    look-alike letters and apostrophes, and emphasis/code/tag marks folded away (the common
    ground of :func:`skeleton` and :func:`words`)."""
    text = unicodedata.normalize("NFKD", line)
    text = "".join(ch for ch in text if unicodedata.category(ch) not in _DROP_CATEGORIES or ch == "\t")
    return _SKELETON_MARKS.sub("", text.casefold().translate(_LOOKALIKES))


def skeleton(line: str) -> str:
    """The detection form of one line (see the module docstring): lower case,
    no white space, no markers, look-alike letters folded to Latin ones."""
    return _SPACE.sub("", _SKELETON_LEAD.sub("", _folded(line)))


def words(line: str) -> str:
    """The line's words as :func:`skeleton` folds them (lower case, look-alikes and
    apostrophes folded, marks and leading markers removed), single spaces kept between them."""
    return _SKELETON_LEAD.sub("", _SPACE.sub(" ", _folded(line)).strip())


def says_no(line: str) -> bool:
    """True when ``line`` says no somewhere (see :data:`_NEGATIVE_WORDS`; fail closed)."""
    return _NEGATIVE_ANYWHERE.search(skeleton(line)) is not None or _NEGATIVE_WORDS.search(words(line)) is not None


def is_decision_line(line: str) -> bool:
    """True when ``line`` counts as a decision line (broad, fail closed)."""
    form = skeleton(line)
    return form.startswith("decision") or "decision:" in form


def plain(line: str) -> str:
    """The approval form of one line: emphasis/code marks removed, leading
    heading/quote/list/number markers stripped repeatedly, outer spaces and
    tabs trimmed.  Nothing else is changed (no Unicode folding)."""
    text = _PLAIN_LEAD.sub("", _PLAIN_MARKS.sub("", line), count=1)
    return text.strip(" \t")


def is_clean_approval(line: str) -> bool:
    """True when the decision line ``line`` is exactly ``Decision: approve``."""
    return _APPROVE.fullmatch(plain(line)) is not None


# ---- the decision -----------------------------------------------------------------


@attrs.frozen
class Decision:
    """The gate's verdict on one proposal.

    ``decision``: ``approve`` or ``reject``.  ``reason``: the reviewer's
    reason (the answer after its last decision line) or why the gate
    rejected; stored on the proposal row.  ``cause``: for a rejection, a short
    phrase completing "The tool did not run: …" (empty for an approval).
    """

    decision: str
    reason: str
    cause: str = ""

    @property
    def approved(self) -> bool:
        return self.decision == "approve"

    @property
    def message(self) -> str:
        """One plain sentence for the calling model (empty for an approval)."""
        if self.approved:
            return ""
        return f"The tool did not run: {self.cause or 'the review did not approve it'}."


def reject(reason: str, cause: str) -> Decision:
    """A rejection with its stored ``reason`` and the ``cause`` the model reads."""
    return Decision("reject", reason, cause)


def _with_note(rest: str, note: str) -> str:
    return f"{rest}\n({note})" if rest else f"({note})"


def _fenced_lines(lines: list[str]) -> set[int]:
    """Indexes of the lines inside fenced code blocks (an unclosed fence runs to the end)."""
    inside, out = False, set()
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            inside = not inside
        elif inside:
            out.add(i)
    return out


def parse_decision(answer: str | None, *, finish_reason: str | None, stopped_by: str | None = None) -> Decision:
    """Apply the decision rule to the reviewer's final ``answer``.

    ``finish_reason``: how the model ended the answer (only ``"stop"`` may
    approve; pass what the provider said — ``None`` when unknown rejects).
    ``stopped_by``: ``"max_turns"``/``"tool_budget"`` when the reviewer
    answered from a limit (rejects), else ``None``.

    Returns a :class:`Decision`; never raises.  The reason is the text after
    the last decision line (for a reviewer's own reject with nothing after
    it, the decision lines that are not a clean approval); a rejection the
    reviewer did not write itself says, in parentheses, which part of the
    rule rejected.
    """
    lines = (answer or "").splitlines()
    found = [i for i, line in enumerate(lines) if is_decision_line(line)]
    rest = "\n".join(lines[found[-1] + 1:]).strip() if found else (answer or "").strip()
    if stopped_by:
        return reject(_with_note(rest, f"the reviewer answered from its {stopped_by} limit: fail closed"),
                      f"the reviewer stopped at its {stopped_by} limit before it could decide")
    if finish_reason != NORMAL_FINISH:
        how = f"finish_reason={finish_reason}" if finish_reason else "no finish_reason"
        return reject(_with_note(rest, f"the reviewer's answer did not end normally ({how}): fail closed"),
                      f"the reviewer's answer did not end normally ({how})")
    if not found:
        return reject(_with_note(rest, "the reviewer gave no decision line: fail closed"),
                      "the reviewer's answer held no 'Decision: approve' line")
    fenced = _fenced_lines(lines)
    unclean = [lines[i] for i in found if i in fenced or not is_clean_approval(lines[i])]
    if not unclean:
        said_no = next((line for line in lines if says_no(line)), None)
        if said_no is not None:  # "Decision: approve" beside "Final verdict: REJECT": fail closed
            shown = said_no.strip()[:120]
            return reject(_with_note(rest, f"the answer also says no ({shown!r}): fail closed"),
                          "the reviewer's answer also says reject or deny")
        return Decision("approve", rest or "approved by the reviewer")
    if any(_REJECT.match(plain(line)) for line in unclean):
        return reject(rest or "\n".join(plain(line) for line in unclean), "the reviewer rejected it")
    shown = plain(unclean[0])[:120]
    return reject(_with_note(rest, f"decision line {shown!r} is not exactly 'Decision: approve': fail closed"),
                  "the reviewer did not approve it with a clean 'Decision: approve' line")


def review_decision(outcome: Any, *, timeout_s: float | None = None) -> Decision:
    """The decision for a whole reviewer run.

    ``outcome``: a ``WorkerOutcome``-like object with ``status``
    (``completed``/``failed``/``killed``), ``result`` (the final answer),
    ``reason`` (the close reason), ``finish_reason``, ``stopped_by`` and
    ``timed_out``.  ``timeout_s``: the reviewer's limit, for the message.
    Only a ``completed`` run is read with :func:`parse_decision`; a timeout,
    a failure or a stop rejects with the close reason.
    """
    status = getattr(outcome, "status", None)
    why = getattr(outcome, "reason", None) or status or "unknown"
    if status == "completed":
        return parse_decision(getattr(outcome, "result", None), finish_reason=getattr(outcome, "finish_reason", None),
                              stopped_by=getattr(outcome, "stopped_by", None))
    if getattr(outcome, "timed_out", False):
        limit = f" (limit {timeout_s:g} s)" if timeout_s else ""
        return reject(f"the reviewer timed out: {why} (fail closed)", f"the review timed out{limit}")
    if status == "killed":
        return reject(f"the reviewer was stopped: {why} (fail closed)", "the review was stopped before it decided")
    return reject(f"the reviewer {status}: {why} (fail closed)", f"the reviewer failed ({why})")
