"""Strict, table-driven option parsing for the ``host_bash`` allowlist.

A :class:`CommandSpec` lists every option one command may take (as
:class:`Opt`: a flag or value-taking, short and/or long form), the options
known to exist but refused (with why), and how its operands are judged.
:func:`parse` reads the words the way GNU ``getopt_long`` would:

* ``--long``, ``--long=value``, ``--long value`` (a required value is the next
  word whatever it looks like), GNU unambiguous abbreviations (``--mess`` is
  ``--message``; the prefix is resolved against the allowed *and* the refused
  names, so a refused option is named in full; an ambiguous prefix is refused);
* ``-x``, bundles ``-at`` (= ``-a -t``; a value-taking letter takes the rest
  of the bundle, or the next word when it ends the bundle);
* ``--`` ends the options; with ``permute`` (GNU default) options may follow
  operands, without it the first operand ends the options.

Every option not in the table is refused with its name and the command's.
The result is a :class:`Parsed` whose :meth:`Parsed.argv` is the canonical
argv that runs (rebuilt from the parse, never the raw words).

Errors: :class:`Refusal` with ``kind`` ``"write"`` (the call is not
read-only: a write proposal for personas that may write) or ``"refused"``
(it never runs: malformed, ambiguous, never ends, forbidden path).  Pure
functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import attrs
from ongridd.plugins.api import ascii_digits

#: a value check returns why the value is refused, or None
ValueCheck = Callable[[str], "str | None"]

WRITE = "write"
REFUSED = "refused"


class Refusal(Exception):
    """Why a command is not read-only.  ``kind``: :data:`WRITE` or :data:`REFUSED`."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


@attrs.frozen
class Opt:
    """One allowed option.

    ``short``: its letter (or ""); ``long``: its long name without dashes (or
    "").  ``value``: None for a flag, else the check of its value.
    ``optional``: the value is optional and only given attached
    (``--x=v``, ``-xv``).  ``peek``: for an optional value, a pattern the
    next word may match to be taken as the value (journalctl's ``-n 5``).
    ``role``: what the value is — ``"read"`` (a file whose contents are read:
    checked against the path policy), ``"recursive"``, or "" (not a path).
    ``emit``: how the rebuilt argv names it (default: the short form when
    there is one, else the long one).  ``also``: other long names of the
    same option (``colour`` for ``color``).
    """

    short: str = ""
    long: str = ""
    value: ValueCheck | None = None
    optional: bool = False
    peek: re.Pattern[str] | None = None
    role: str = ""
    emit: str = ""
    also: tuple[str, ...] = ()

    @property
    def takes_value(self) -> bool:
        return self.value is not None

    @property
    def label(self) -> str:
        """``-s/--long`` as shown in messages."""
        return "/".join(x for x in (f"-{self.short}" if self.short else "", f"--{self.long}" if self.long else "")
                        if x)

    def words(self, value: str | None) -> list[str]:
        """This option (with its value) in canonical form."""
        name = self.emit or (f"-{self.short}" if self.short else f"--{self.long}")
        if value is None:
            return [name]
        if self.optional:
            return [f"{name}={value}" if name.startswith("--") else f"{name}{value}"]
        return [name, value]


@attrs.frozen
class Parsed:
    """A parsed command: ``name``, ``options`` (each (Opt, value or None), in
    order), ``operands`` and the roles of the operands (``"read"``,
    ``"recursive"``, ``"meta"`` or ``"text"``), and ``end_marker`` (write
    ``--`` before the operands)."""

    name: str
    options: tuple[tuple[Opt, str | None], ...]
    operands: tuple[str, ...]
    roles: tuple[str, ...] = ()
    end_marker: bool = True
    prefix: tuple[str, ...] = ()

    def has(self, *names: str) -> bool:
        """True when one of ``names`` (letters or long names) was given."""
        return any(o.short in names or o.long in names for o, _ in self.options if o.short or o.long)

    def values(self, *names: str) -> list[str]:
        return [v for o, v in self.options if v is not None and (o.short in names or o.long in names)]

    def paths(self) -> list[tuple[str, str]]:
        """(word, role) for every option value and operand that names a path
        to check: role ``read`` (contents read) or ``recursive``."""
        out = [(v, o.role) for o, v in self.options if v is not None and o.role]
        out += [(w, r) for w, r in zip(self.operands, self.roles, strict=False) if r in ("read", "recursive")]
        return out

    def argv(self) -> tuple[str, ...]:
        """The canonical argv: name, options written out, ``--``, operands."""
        words = [self.name, *self.prefix]
        for opt, value in self.options:
            words += opt.words(value)
        if self.operands:
            if self.end_marker:
                words.append("--")
            words += self.operands
        return tuple(words)


Roles = Callable[[Parsed], Sequence[str]]
Check = Callable[[Parsed], None]


@attrs.frozen
class CommandSpec:
    """The read-only table of one command.

    ``options``: what it may take.  ``refused``: (names, why, kind) for
    options that exist but are not read-only (names: letters and long names,
    e.g. ``("o", "output")``); the message says ``<option> <why>``.
    ``known``: other long names of the real program (refused as not in the
    table, but abbreviations resolve to them).  ``operands``: the role of
    every operand (``"read"``, ``"meta"``, ``"text"``), ``"none"`` (no
    operand allowed: an operand makes it a change, e.g. ``hostname NAME``) or
    a function of the parse giving one role per operand.  ``check``: extra
    command rules (raise :class:`Refusal`).  ``max_operands``: at most this
    many.  ``permute``: options may follow operands.  ``end_marker``: the
    program understands ``--``.  ``digits``: the long name ``-N`` stands for
    (``head -5``).  ``operand_why``: the message when operands are not
    allowed; ``extra_operand_why``: when there are more than ``max_operands``
    (by default, how many it takes).
    """

    name: str
    options: tuple[Opt, ...] = ()
    refused: tuple[tuple[tuple[str, ...], str, str], ...] = ()
    known: tuple[str, ...] = ()
    operands: str | Roles = "text"
    check: Check | None = None
    max_operands: int | None = None
    permute: bool = True
    end_marker: bool = True
    digits: str = ""
    operand_why: str = "takes no operands"
    extra_operand_why: str = ""

    def allowed_long(self) -> dict[str, Opt]:
        out = {o.long: o for o in self.options if o.long}
        out.update({alias: o for o in self.options for alias in o.also})
        return out

    def allowed_short(self) -> dict[str, Opt]:
        return {o.short: o for o in self.options if o.short}

    def refused_names(self) -> dict[str, tuple[str, str]]:
        out: dict[str, tuple[str, str]] = {}
        for names, why, kind in self.refused:
            for n in names:
                out[n] = (why, kind)
        return out


def _allowed_list(spec: CommandSpec) -> str:
    shown = [o.label for o in spec.options]
    return ", ".join(shown) if shown else "none"


def _resolve_long(spec: CommandSpec, word: str, name: str) -> Opt:
    allowed = spec.allowed_long()
    refused = {n: v for n, v in spec.refused_names().items() if len(n) > 1}
    if name in allowed:
        return allowed[name]
    full = name
    if name not in refused and name not in spec.known:
        candidates = sorted({n for n in [*allowed, *refused, *spec.known] if n.startswith(name)}) if name else []
        if len({id(allowed[c]) if c in allowed else c for c in candidates}) == 1:
            candidates = candidates[:1]  # several names of one option (GNU: not ambiguous)
        if len(candidates) > 1:
            raise Refusal(REFUSED, f"option '{word}' of {spec.name} is an ambiguous abbreviation "
                                   f"({', '.join('--' + c for c in candidates)}); write the option in full")
        if not candidates:
            raise Refusal(WRITE, f"option '{word}' is not an option {spec.name} may take read-only "
                                 f"(allowed: {_allowed_list(spec)})")
        full = candidates[0]
        if full in allowed:
            return allowed[full]
    shown = f"'{word}'" if full == name else f"'{word}' (--{full})"
    if full in refused:
        why, kind = refused[full]
        raise Refusal(kind, f"option {shown} of {spec.name} {why}")
    raise Refusal(WRITE, f"option {shown} is not an option {spec.name} may take read-only "
                         f"(allowed: {_allowed_list(spec)})")


def _resolve_short(spec: CommandSpec, word: str, letter: str) -> Opt:
    opt = spec.allowed_short().get(letter)
    if opt is not None:
        return opt
    where = "" if word == f"-{letter}" else f" (in '{word}')"
    refused = spec.refused_names().get(letter) if len(letter) == 1 else None
    if refused:
        why, kind = refused
        raise Refusal(kind, f"option '-{letter}'{where} of {spec.name} {why}")
    raise Refusal(WRITE, f"option '-{letter}'{where} is not an option {spec.name} may take read-only "
                         f"(allowed: {_allowed_list(spec)})")


def _checked(spec: CommandSpec, opt: Opt, value: str) -> str:
    assert opt.value is not None
    problem = opt.value(value)
    if problem:
        raise Refusal(WRITE, f"value '{value}' of option {opt.label} of {spec.name}: {problem}")
    return value


def _value(spec: CommandSpec, opt: Opt, attached: str | None, args: Sequence[str], i: int,
           shown: str) -> tuple[str | None, int]:
    """(the checked value of ``opt`` or None for a flag or an absent optional
    value, the index of the next word).  ``attached``: the value written in
    the same word (``--x=v``, ``-xv``); otherwise a required value is the
    next word, an optional one only when it matches ``opt.peek``."""
    if not opt.takes_value:
        return None, i
    if attached is not None:
        return _checked(spec, opt, attached), i
    if opt.optional:
        if opt.peek is not None and i < len(args) and opt.peek.match(args[i]):
            return _checked(spec, opt, args[i]), i + 1
        return None, i
    if i < len(args):
        return _checked(spec, opt, args[i]), i + 1
    raise Refusal(REFUSED, f"option {shown} of {spec.name} needs a value")


def parse(spec: CommandSpec, args: Sequence[str]) -> Parsed:
    """Parse ``args`` (the words after the command name) with ``spec``.

    Returns a :class:`Parsed` (roles assigned, ``check`` passed).  Raises
    :class:`Refusal` for the first word that is not allowed.
    """
    opts: list[tuple[Opt, str | None]] = []
    operands: list[str] = []
    after = False
    i = 0
    n = len(args)
    while i < n:
        a = args[i]
        i += 1
        if after or a == "-" or not a.startswith("-"):
            operands.append(a)
            if not spec.permute:
                after = True
            continue
        if a == "--":
            after = True
            continue
        if a.startswith("--"):
            name, eq, value = a[2:].partition("=")
            opt = _resolve_long(spec, a, name)
            if not opt.takes_value and eq:
                raise Refusal(REFUSED, f"option '{a}' of {spec.name} takes no value")
            got, i = _value(spec, opt, value if eq else None, args, i, f"'{a}'")
            opts.append((opt, got))
            continue
        letters = a[1:]
        if spec.digits and ascii_digits(letters):
            opt = spec.allowed_long()[spec.digits]
            opts.append((opt, _checked(spec, opt, letters)))
            continue
        for j, letter in enumerate(letters):
            opt = _resolve_short(spec, a, letter)
            if not opt.takes_value:
                opts.append((opt, None))
                continue
            rest = letters[j + 1:]
            attached = (rest.removeprefix("=") if opt.optional else rest) if rest else None
            got, i = _value(spec, opt, attached, args, i, f"'-{letter}' (in '{a}')")
            opts.append((opt, got))
            break  # a value-taking letter ends the bundle
    if spec.operands == "none" and operands:
        raise Refusal(WRITE, f"operand '{operands[0]}': {spec.name} {spec.operand_why}")
    if spec.max_operands is not None and len(operands) > spec.max_operands:
        extra = operands[spec.max_operands]
        if spec.extra_operand_why:
            raise Refusal(WRITE, f"operand '{extra}': {spec.name} {spec.extra_operand_why}")
        count = f"{spec.max_operands} operand{'s' if spec.max_operands != 1 else ''}"
        raise Refusal(WRITE, f"operand '{extra}': {spec.name} takes at most {count} read-only")
    if not spec.end_marker:
        for w in operands:
            if w.startswith("-") and w != "-":
                raise Refusal(REFUSED, f"operand '{w}' of {spec.name} looks like an option and {spec.name} "
                                       "has no '--' to mark it as an operand")
    parsed = Parsed(spec.name, tuple(opts), tuple(operands), end_marker=spec.end_marker)
    roles = spec.operands(parsed) if callable(spec.operands) else [spec.operands] * len(operands)
    parsed = attrs.evolve(parsed, roles=tuple(roles))
    if spec.check is not None:
        spec.check(parsed)
    return parsed


# ---- value checks -------------------------------------------------------------------

def pattern(regex: str, what: str) -> ValueCheck:
    """A check accepting values that fully match ``regex`` (described as ``what``)."""
    rx = re.compile(regex)

    def check(value: str) -> str | None:
        return None if rx.fullmatch(value) else f"expected {what}"

    return check


def one_of(*choices: str) -> ValueCheck:
    def check(value: str) -> str | None:
        return None if value in choices else f"expected one of {', '.join(choices)}"

    return check


def any_text(value: str) -> str | None:
    """Any value (a pattern, a format: it is one argv word, never a path)."""
    return None


INT = pattern(r"[0-9]+", "a number")
SIGNED = pattern(r"[+-]?[0-9]+([kKMGTPEZY](i?B)?|b|kB)?", "a count like 20, -20, +5 or 10K")
SIZE = pattern(r"[0-9]+[A-Za-z]*", "a size like 100, 10K or 1M")
#: a name never starts with "-": a value the table wrongly gives an option that takes none would
#: otherwise pass on as the program's next option
NAME = pattern(r"[A-Za-z0-9_.:@%+][A-Za-z0-9_.:@%+-]*", "a name (letters, digits, _ . : @ % + -, not starting with -)")
NAMES = pattern(r"[A-Za-z0-9_.:@%+][A-Za-z0-9_.:@%+-]*(,[A-Za-z0-9_.:@%+][A-Za-z0-9_.:@%+-]*)*",
                "names separated by commas (none starting with -)")
PATH_VALUE = any_text
WHEN = one_of("auto", "always", "never")
