"""Little languages inside ``host_bash`` arguments: ``sed`` scripts and
``find`` expressions, each read against an allowlist.

* :func:`sed_script_problem` walks a sed script command by command and
  refuses the commands that run programs or touch files (``e``, ``r``,
  ``R``, ``w``, ``W``), those that rewrite the text they print (``s``,
  ``y``: a held secret in another letter case, or with its letters swapped,
  would pass the redaction of tool results) and anything it cannot read (so
  a trick it does not understand is refused, not allowed).  sed still runs
  with ``--sandbox`` as a second lock.
* :func:`parse_find` reads ``find``'s options, starting points and
  expression; every test, operator and action must be in its table, with
  its value; ``-exec``/``-delete``/``-fprint``… are refused by name.  It
  returns the canonical argv and the paths whose contents are read.

Errors: :class:`~ongrid_host.optspec.Refusal`.  Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ongrid_host.optspec import REFUSED, WRITE, Refusal
from ongridd.plugins.api import ascii_digits

# ---- sed ---------------------------------------------------------------------------

#: commands that take no argument (or an optional number / label handled below)
_SED_SIMPLE = set("=dDgGhHlnNpPxzF")
_SED_FORBIDDEN = {"e": "runs a shell command", "r": "reads a file", "R": "reads a file", "w": "writes a file",
                  "W": "writes a file"}

#: what ends a label, and what a label may hold
_LABEL_END = frozenset(";} \t\n\r\v\f")
_LABEL = re.compile(r"[A-Za-z0-9_.-]*")


class _Sed:
    def __init__(self, script: str):
        self.s = script
        self.i = 0

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def take(self) -> str:
        c = self.peek()
        self.i += 1
        return c

    def skip_blanks(self) -> None:
        while self.peek() in (" ", "\t") and self.peek():
            self.i += 1

    def delimited(self, delim: str, what: str) -> None:
        """Skip to the unescaped ``delim`` (consumed)."""
        while True:
            c = self.take()
            if not c:
                raise Refusal(REFUSED, f"sed script: unterminated {what}")
            if c == "\\":
                if not self.take():
                    raise Refusal(REFUSED, f"sed script: unterminated {what}")
            elif c == delim:
                return

    def address(self) -> bool:
        c = self.peek()
        if ascii_digits(c):
            while ascii_digits(self.peek()):
                self.i += 1
            if self.peek() == "~":
                self.i += 1
                while ascii_digits(self.peek()):
                    self.i += 1
            return True
        if c == "$":
            self.i += 1
            return True
        if c in ("/", "\\"):
            self.i += 1
            delim = "/" if c == "/" else self.take()
            if not delim or delim in "\\\n":
                raise Refusal(REFUSED, "sed script: bad address delimiter")
            self.delimited(delim, "address regex")
            while self.peek() in ("I", "M"):
                self.i += 1
            return True
        return False

    def label(self) -> None:
        """A label (after ``:``, ``b``, ``t``, ``T``) or ``v``'s version: GNU sed ends it at
        whitespace, ``;`` or ``}``, and reads what follows as the next command.  Only letters,
        digits, ``_``, ``.`` and ``-`` are taken; anything else there is refused."""
        start = self.i
        while self.peek() and self.peek() not in _LABEL_END:
            self.i += 1
        if not _LABEL.fullmatch(self.s[start:self.i]):
            raise Refusal(REFUSED, f"sed script: label {self.s[start:self.i][:40]!r} is not letters, digits, "
                                   f"'_', '.' or '-'")

    def check(self) -> str | None:
        while True:
            while self.peek() in (" ", "\t", ";"):
                if not self.peek():
                    break
                self.i += 1
            if not self.peek():
                return None
            if self.peek() == "#":
                return None  # a comment runs to the end of the script
            if self.address():
                self.skip_blanks()
                if self.peek() == ",":
                    self.i += 1
                    self.skip_blanks()
                    if self.peek() in ("+", "~"):
                        self.i += 1
                        while ascii_digits(self.peek()):
                            self.i += 1
                    elif not self.address():
                        return "sed script: address range without an end"
                self.skip_blanks()
            while self.peek() == "!":
                self.i += 1
                self.skip_blanks()
            cmd = self.take()
            if not cmd:
                return "sed script: address without a command"
            if cmd in _SED_FORBIDDEN:
                return f"sed command '{cmd}' {_SED_FORBIDDEN[cmd]}"
            if cmd in "{}":
                continue
            if cmd in _SED_SIMPLE:
                self.skip_blanks()
                if cmd == "l":
                    while ascii_digits(self.peek()):
                        self.i += 1
                continue
            if cmd in "qQ":
                self.skip_blanks()
                while ascii_digits(self.peek()):
                    self.i += 1
                continue
            if cmd in "aic":
                return None  # the text runs to the end of the script
            if cmd in ":btTv":
                self.skip_blanks()
                self.label()
                continue
            if cmd in "sy":
                # a read shows the file's text as it is: a rewritten copy of a held secret (its
                # letters upper-cased or swapped for others) would pass for other text
                return (f"sed command '{cmd}' rewrites the text it prints; print lines as they are "
                        "(sed -n '10,20p', grep)")
            return f"sed command '{cmd}' is not on the read-only list of sed commands"


def sed_script_problem(script: str) -> str | None:
    """Why the sed ``script`` is not read-only, or None (see the module docstring)."""
    try:
        return _Sed(script).check()
    except Refusal as exc:
        return exc.message


# ---- find ----------------------------------------------------------------------------

_GLOBAL = {"-H", "-L", "-P", "-O0", "-O1", "-O2", "-O3"}
_OPERATORS = {"(", ")", "!", ",", "-not", "-a", "-and", "-o", "-or"}
_FLAGS = {"-empty", "-readable", "-writable", "-executable", "-nouser", "-nogroup", "-xdev", "-mount", "-depth",
          "-daystart", "-follow", "-noleaf", "-ignore_readdir_race", "-noignore_readdir_race", "-print", "-print0",
          "-ls", "-prune", "-quit", "-true", "-false", "-warn", "-nowarn"}
_NUM = re.compile(r"[+-]?[0-9]+")
_ONE_ARG = {
    "-name": None, "-iname": None, "-path": None, "-ipath": None, "-wholename": None, "-iwholename": None,
    "-regex": None, "-iregex": None, "-lname": None, "-ilname": None, "-printf": None, "-context": None,
    "-type": re.compile(r"[bcdpflsD](,[bcdpflsD])*"), "-xtype": re.compile(r"[bcdpflsD](,[bcdpflsD])*"),
    "-size": re.compile(r"[+-]?[0-9]+[bcwkMG]?"), "-mtime": _NUM, "-mmin": _NUM, "-atime": _NUM, "-amin": _NUM,
    "-ctime": _NUM, "-cmin": _NUM, "-used": _NUM, "-links": _NUM, "-inum": _NUM, "-uid": _NUM, "-gid": _NUM,
    "-maxdepth": re.compile(r"[0-9]+"), "-mindepth": re.compile(r"[0-9]+"),
    "-user": re.compile(r"[A-Za-z0-9_.@-]+"), "-group": re.compile(r"[A-Za-z0-9_.@-]+"),
    "-perm": re.compile(r"[-/]?([0-7]{1,4}|[ugoa]*[+=-][rwxXst]*(,[ugoa]*[+=-][rwxXst]*)*)"),
    "-regextype": re.compile(r"[a-z-]+"), "-fstype": re.compile(r"[A-Za-z0-9_.-]+"),
    "-newer": None, "-anewer": None, "-cnewer": None,
}
_NEWER_XY = re.compile(r"-newer[aBcm][aBcmt]")
#: reads a list of starting points from a file (its contents)
_FILES_FROM = "-files0-from"
_FIND_REFUSED = {
    "-samefile": "opens the file it names (a device named there acts when opened); match its inode with -inum N",
    "-exec": "runs a command", "-execdir": "runs a command", "-ok": "runs a command", "-okdir": "runs a command",
    "-delete": "deletes files", "-fprint": "writes a file", "-fprint0": "writes a file",
    "-fprintf": "writes a file", "-fls": "writes a file",
}


#: a time zone named inside a date string (``TZ="Europe/Paris" 09:00``): date and find open it as a file
_DATE_TZ = re.compile(r"""TZ=(["']?)([^"'\s]*)""")


def date_string_problem(value: str) -> str | None:
    """Why the date string ``value`` (``date -d``, ``find -newermt``) may not be parsed, or None: a
    ``TZ="…"`` in it that is a path (absolute, ``:``-prefixed, relative with ``.``/``..``), which
    the date parser opens as a time zone file — any path, unchecked (a FIFO hangs it, a device acts
    when opened).  A zone's name (``Europe/Paris``) or an offset (``UTC+3``) is fine."""
    for _, zone in _DATE_TZ.findall(value):
        if zone.startswith(("/", ":", ".")) or ".." in zone:
            return (f"TZ=\"{zone}\" in the date names a file to open (any path, unchecked); name a zone "
                    "(TZ=\"Europe/Paris\") or an offset (TZ=\"UTC+3\")")
    return None


def _is_expr_start(word: str) -> bool:
    return word in _OPERATORS or (word.startswith("-") and len(word) > 1)


def parse_find(args: Sequence[str]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    """(canonical argv, [(path, role)] to check) for ``find args``.

    Raises :class:`Refusal` for the first word outside the table.
    """
    out = ["find"]
    paths: list[tuple[str, str]] = []
    i = 0
    while i < len(args) and args[i] in _GLOBAL:
        out.append(args[i])
        i += 1
    while i < len(args) and not _is_expr_start(args[i]):
        out.append(args[i])
        i += 1
    depth = 0
    while i < len(args):
        w = args[i]
        i += 1
        if w in _FIND_REFUSED:
            raise Refusal(WRITE, f"find action '{w}' {_FIND_REFUSED[w]}")
        if w in _OPERATORS or w in _FLAGS:
            depth += {"(": 1, ")": -1}.get(w, 0)
            if depth < 0:
                raise Refusal(REFUSED, "find: unbalanced ')' in the expression")
            out.append(w)
            continue
        if w in _ONE_ARG or _NEWER_XY.fullmatch(w) or w == _FILES_FROM:
            if i >= len(args):
                raise Refusal(REFUSED, f"find: '{w}' needs a value")
            value = args[i]
            i += 1
            rx = _ONE_ARG.get(w)
            if rx is not None and not rx.fullmatch(value):
                raise Refusal(WRITE, f"find: value '{value}' of '{w}' is not allowed")
            if _NEWER_XY.fullmatch(w) and w.endswith("t") and (problem := date_string_problem(value)):
                raise Refusal(REFUSED, f"find: {w} {problem}")
            if w == _FILES_FROM:
                if value != "-":
                    paths.append((value, "read"))
                else:
                    raise Refusal(REFUSED, "find: '-files0-from -' would read stdin, which is empty")
            out += [w, value]
            continue
        if w.startswith("-"):
            raise Refusal(WRITE, f"find: '{w}' is not a test, operator or action find may use read-only")
        raise Refusal(REFUSED, f"find: starting point '{w}' after the expression began; name the folders first")
    if depth:
        raise Refusal(REFUSED, "find: unbalanced '(' in the expression")
    return tuple(out), paths
