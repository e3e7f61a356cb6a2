"""Regular expressions in tool schemas that Python's ``re`` cannot be trusted with.

:func:`regex_problem` says why a ``pattern`` (or a ``patternProperties`` name)
is unfit: it does not compile, or it may backtrack for exponential time (a
repeated group whose repetitions can split the same text in several ways,
``(a+)+``, ``(\\w+\\s?)*``).  The backtracking check reads the pattern as
Python's own parser does (``re._parser``, private but stable since 3.11) and
compares the first characters each alternative can match over a sample
alphabet; it is a heuristic: it may refuse a harmless pattern or miss a rare
bad one.  Strings longer than the argument validator's limit never reach
``re`` anyway (:data:`ongridd.tools.args.PY_REGEX_MAX_CHARS`).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from typing import Any

#: Python's own regular-expression parser (private, stable since 3.11), read to judge patterns
_sre_parse: Any = importlib.import_module("re._parser")
_MAXREPEAT = _sre_parse.MAXREPEAT

def regex_problem(pattern: str) -> str | None:
    """Why Python's ``re`` cannot be trusted with ``pattern`` (it does not compile, or it may
    backtrack for exponential time); None when it can."""
    try:
        re.compile(pattern)
        parsed = _sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        return f"{pattern!r} is not a regular expression Python can compile ({exc})"
    try:
        risky = _backtracks_badly(parsed.data, parsed.state.flags)
    except RecursionError:
        risky = True
    if risky:
        return (f"{pattern!r} can take exponential time to match (a repeated group whose repetitions can "
                f"split the same text in several ways, e.g. (a+)+ or (\\w+\\s?)*): write it without the "
                f"ambiguous nesting")
    return None


# ---- regular expressions that backtrack badly ----------------------------------------------

#: the characters the overlap of two character sets is judged on (ASCII and some others)
_SAMPLE = tuple(chr(i) for i in range(128)) + tuple("\u00a0\u00b5\u00df\u00e9\u0131\u0130\u017f\u0663"
                                                      "\u1680\u2028\u212a\u3000\uff11\U0001d7d8\U0001f600")
_CATEGORY_RE = {
    "CATEGORY_DIGIT": r"\d", "CATEGORY_NOT_DIGIT": r"\D", "CATEGORY_SPACE": r"\s", "CATEGORY_NOT_SPACE": r"\S",
    "CATEGORY_WORD": r"\w", "CATEGORY_NOT_WORD": r"\W",
}


def _category(name: str) -> frozenset[str]:
    regex = _CATEGORY_RE.get(name)
    if regex is None:  # a line-break category or an unknown one: anything
        return _ANYTHING
    return frozenset(c for c in _SAMPLE if re.fullmatch(regex, c))


_ANYTHING = frozenset(_SAMPLE)
_Seq = Sequence[tuple[Any, Any]]
_REPEATS = ("MAX_REPEAT", "MIN_REPEAT")


def _atom(op: str, av: Any, flags: int) -> frozenset[str] | None:
    """The sample characters one atom matches (``flags``: ``re.I``, ``re.S`` in effect); None
    when ``op`` is not an atom."""
    chars: set[str]
    if op == "LITERAL":
        chars = {chr(av)}
    elif op == "NOT_LITERAL":
        chars = set(_SAMPLE) - {chr(av)}
    elif op == "ANY":
        chars = set(_SAMPLE) if flags & re.DOTALL else set(_SAMPLE) - {"\n"}
    elif op == "IN":
        chars = set()
        negate = False
        for sub_op, sub_av in av:
            name = str(sub_op)
            if name == "NEGATE":
                negate = True
            elif name == "LITERAL":
                chars.add(chr(sub_av))
            elif name == "RANGE":
                chars.update(c for c in _SAMPLE if sub_av[0] <= ord(c) <= sub_av[1])
            elif name == "CATEGORY":
                chars |= _category(str(sub_av))
            else:
                chars |= _ANYTHING
        if negate:
            chars = set(_SAMPLE) - chars
    else:
        return None
    if flags & re.IGNORECASE:
        chars |= {c.swapcase() for c in chars} | {c.lower() for c in chars} | {c.upper() for c in chars}
    return frozenset(chars)


def _scoped(av: Any, flags: int) -> int:
    """The flags inside a group ``(?flags:...)`` (``av`` of a SUBPATTERN)."""
    return (flags | (av[1] or 0)) & ~(av[2] or 0)


def _first(seq: _Seq, flags: int) -> tuple[frozenset[str], bool]:
    """(the characters a match of ``seq`` can start with, whether ``seq`` can match the empty string)."""
    out: set[str] = set()
    for op, av in seq:
        chars, nullable = _first_item(str(op), av, flags)
        out |= chars
        if not nullable:
            return frozenset(out), False
    return frozenset(out), True


def _first_item(op: str, av: Any, flags: int) -> tuple[frozenset[str], bool]:
    atom = _atom(op, av, flags)
    if atom is not None:
        return atom, False
    if op in _REPEATS or op == "POSSESSIVE_REPEAT":
        chars, nullable = _first(av[2], flags)
        return chars, nullable or av[0] == 0
    if op == "SUBPATTERN":
        return _first(av[3], _scoped(av, flags))
    if op == "ATOMIC_GROUP":
        return _first(av, flags)
    if op == "BRANCH":
        firsts = [_first(alt, flags) for alt in av[1]]
        return frozenset().union(*(f for f, _ in firsts)), any(n for _, n in firsts)
    if op in ("AT", "ASSERT", "ASSERT_NOT"):
        return frozenset(), True
    return _ANYTHING, True  # a back reference, a conditional group: anything


def _seq_ambiguous(seq: _Seq, follow: frozenset[str], flags: int) -> bool:
    """Whether some element of ``seq`` (followed by what can start with ``follow``) can split the
    same text in two ways: a repeat of variable count that may go on or stop on the same
    character, or a choice whose alternatives (an empty one taking what follows) start alike."""
    items = list(seq)
    for i, (op, av) in enumerate(items):
        rest, rest_nullable = _first(items[i + 1:], flags)
        after = rest | follow if rest_nullable else rest
        name = str(op)
        if name in _REPEATS:
            lo, hi, body = av
            first, nullable = _first(body, flags)
            if hi > lo and (first & after or (nullable and hi > 1)):
                return True
            if _seq_ambiguous(body, first | after if hi > 1 else after, flags):
                return True
        elif name == "BRANCH":
            seen: set[str] = set()
            for alt in av[1]:
                first, nullable = _first(alt, flags)
                starts = first | after if nullable else first
                if starts & seen or (nullable and not starts and len(av[1]) > 1 and not after):
                    return True
                seen |= starts
                if _seq_ambiguous(alt, after, flags):
                    return True
        elif name == "SUBPATTERN":
            if _seq_ambiguous(av[3], after, _scoped(av, flags)):
                return True
        elif name in ("GROUPREF", "GROUPREF_EXISTS"):
            return True  # what a back reference or a conditional takes is not known here
    return False


def _backtracks_badly(seq: _Seq, flags: int) -> bool:
    """Whether a backtracking engine may take exponential (or high polynomial) time on ``seq``:
    a repeat of many or unbounded times, not possessive, whose body is ambiguous in the sense of
    :func:`_seq_ambiguous` with the next repetition following it (``(a+)+``, ``(\\w+\\s?)*``,
    ``(a|aa)+``, ``(.*a){10}``), or whose body can match the empty string."""
    for op, av in seq:
        name = str(op)
        if name in _REPEATS and (av[1] == _MAXREPEAT or av[1] > 4):
            first, nullable = _first(av[2], flags)
            if (nullable and av[1] > av[0]) or _seq_ambiguous(av[2], first, flags):
                return True
        if name == "SUBPATTERN":
            if _backtracks_badly(av[3], _scoped(av, flags)):
                return True
            continue
        for sub in _children(name, av):
            if _backtracks_badly(sub, flags):
                return True
    return False


def _children(op: str, av: Any) -> list[_Seq]:
    if op in _REPEATS or op == "POSSESSIVE_REPEAT":
        return [av[2]]
    if op == "ATOMIC_GROUP":
        return [av]
    if op in ("ASSERT", "ASSERT_NOT"):
        return [av[1]]
    if op == "BRANCH":
        return list(av[1])
    if op == "GROUPREF_EXISTS":
        return [s for s in av[1:] if s is not None]
    return []


