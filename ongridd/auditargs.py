"""Command lines inside Linux audit records, decoded so a filter can read them.

The kernel's audit subsystem writes a program's arguments into its records
(``/var/log/audit/audit.log``, the journal's ``_TRANSPORT=audit`` entries,
the kernel log when no audit daemon runs) in one of two forms per value:
quoted text (``a1="-uroot"``) or, when the value holds a space, a quote, a
control character or a byte outside ASCII, upper-case hexadecimal
(``a2=2D70736563726574207769746820737061636573``).  The fields that carry a
command line:

- ``EXECVE``: ``argc=N a0=… a1=…``; a long value is split into
  ``aK_len=L aK[0]=… aK[1]=…`` pieces;
- ``PROCTITLE``: ``proctitle=…``, the whole argument vector, its words
  separated by NUL bytes (so hexadecimal as soon as it has two words);
- ``USER_CMD`` (sudo) and other user-space records: ``cmd=…``, one command
  line.

:func:`audit_command` finds those fields on one line and returns the command
line they spell, with where the fields stand, so a caller can check the
decoded text (a credential filter, a search) and show it in place of the
fields (:meth:`AuditCommand.shown`).  Pure; linear in the line's length.
"""

from __future__ import annotations

import re

import attrs

#: one audit field that may carry a command line, and its value: ``"text"`` (also with the quotes
#: escaped, as inside a JSON string), hexadecimal (an even number of digits) or ``(null)``
_FIELD = re.compile(r'(?<![A-Za-z0-9_])(a(\d{1,5})(?:\[(\d{1,5})\])?|proctitle|cmd)='
                    r'(\\"([^"\\\s]{0,10000})\\"|"([^"\s]{0,10000})"|((?:[0-9A-F]{2}){1,500000})(?![0-9A-Za-z])|\(null\))')
#: the length field of a split EXECVE value, and the argument count: part of the run of fields
_EXTRA = re.compile(r"(?<![A-Za-z0-9_])(?:a\d{1,5}_len|argc)=\d{1,9}")


@attrs.frozen
class AuditCommand:
    """A command line read out of an audit record's fields.

    ``words``: the arguments (EXECVE, PROCTITLE; for ``cmd=`` the one command
    line); ``text``: them joined by one space (so where an argument holding a
    space ends is no longer seen there); ``start``/``end``: the span of the
    line that the fields take (from the first to the last, what lies between
    included); ``kind``: ``"args"``, ``"proctitle"`` or ``"cmd"``.
    """

    words: tuple[str, ...]
    start: int
    end: int
    kind: str

    @property
    def text(self) -> str:
        return " ".join(self.words)

    def shown(self, text: str | None = None) -> str:
        """What stands for the fields: ``"args (decoded): mysql -uroot -p***"`` — ``text`` (by
        default the decoded command) after the kind, C0 control characters and DEL written
        ``\\xNN`` (a newline of a ``bash -c`` script included), so it stays one line."""
        return f"{self.kind} (decoded): {(self.text if text is None else text).translate(_ESCAPED_CONTROLS)}"

    def in_line(self, line: str) -> str:
        """``line`` (the one it was read from) with its fields shown decoded (:meth:`shown`)."""
        return line[:self.start] + self.shown() + line[self.end:]


#: C0 control characters and DEL as ``\xNN``
_ESCAPED_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]}


def _decoded(match: re.Match[str]) -> str:
    escaped, quoted, hexa = match.group(5), match.group(6), match.group(7)
    if escaped is not None:
        return escaped
    if quoted is not None:
        return quoted
    if hexa is not None:
        return bytes.fromhex(hexa).decode("utf-8", "backslashreplace")
    return ""  # (null)


def audit_command(line: str) -> AuditCommand | None:
    """The command line that ``line``'s audit fields carry, or None when it has none.

    EXECVE fields win over ``proctitle=`` and ``cmd=`` when a line (a record
    joined from several) holds more than one kind; an EXECVE value split into
    pieces is joined again.  A hexadecimal value that is not UTF-8 keeps its
    odd bytes as ``\\xNN``; ``proctitle`` is split into words at its NULs."""
    if "a0=" not in line and "proctitle=" not in line and "cmd=" not in line:
        return None
    fields = list(_FIELD.finditer(line))
    args = [m for m in fields if m.group(2) is not None]
    if args and "argc=" in line:
        words: dict[int, list[tuple[int, str]]] = {}
        for m in args:
            words.setdefault(int(m.group(2)), []).append((int(m.group(3) or 0), _decoded(m)))
        joined = tuple("".join(piece for _, piece in sorted(words[k])) for k in sorted(words))
        spans = [m.span() for m in args] + [m.span() for m in _EXTRA.finditer(line)]
        return AuditCommand(joined, min(s for s, _ in spans), max(e for _, e in spans), "args")
    for kind in ("proctitle", "cmd"):
        one = [m for m in fields if m.group(1) == kind]
        if one:
            m = one[0]
            value = _decoded(m)
            return AuditCommand(tuple(value.split("\0")) if kind == "proctitle" else (value,), m.start(), m.end(), kind)
    return None
