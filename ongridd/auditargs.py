"""Command lines inside Linux audit records, decoded so a filter can read them.

The kernel's audit subsystem writes a program's arguments into its records
(``/var/log/audit/audit.log``, the journal's ``_TRANSPORT=audit`` entries,
the kernel log when no audit daemon runs) in one of two forms per value:
quoted text (``a1="-uroot"``) or, when the value holds a space, a quote, a
control character or a byte outside ASCII, upper-case hexadecimal
(``a2=2D70736563726574207769746820737061636573``).  ``ausearch -i`` prints
them decoded instead, unquoted.  The fields that carry a command line:

- ``EXECVE``: ``argc=N a0=… a1=…``; a long value is split into
  ``aK_len=L aK[0]=… aK[1]=…`` pieces, and a long argument list goes on in
  further EXECVE records of the same event (``a40=…``, no ``argc=``);
- ``PROCTITLE``: ``proctitle=…``, the whole argument vector, its words
  separated by NUL bytes (so hexadecimal as soon as it has two words);
- ``USER_CMD`` (sudo) and other user-space records: ``cmd=…``, one command
  line;
- ``TTY`` and ``USER_TTY`` (pam_tty_audit): ``data=…``, what was typed.

:func:`audit_records` finds those fields on one line, a record at a time,
and returns the arguments they spell with where the fields stand, so a
caller can check the decoded words (a credential filter, a search) and show
them in place of the fields (:meth:`AuditCommand.shown`).  Pure; linear in
the line's length.
"""

from __future__ import annotations

import re
import shlex

import attrs

#: a line that is (or holds) an audit record: ``msg=audit(…)``, the kernel log's ``audit(…)``,
#: a journal message naming its record type first, or the record types' numbers of the kernel log
_CONTEXT = re.compile(r"audit\(|(?<![A-Za-z0-9_])(?:EXECVE|PROCTITLE|USER_CMD|USER_TTY|TTY)(?![A-Za-z0-9_])"
                      r"|type=(?:1309|1327|1123|1319|1124)\b")
#: where a record starts on a line holding several (``type=EXECVE msg=audit(…``, ``type=1309 audit(…``)
_RECORD_START = re.compile(r"(?<![A-Za-z0-9_\"'=])type=(?=(?:[A-Z][A-Z_]{1,40}|[0-9]{4})\s{1,4}(?:msg=)?audit\()")
#: one field that may carry a command line (after whitespace, or the quote of ``msg='``), and its value: ``"text"`` (also with the quotes escaped,
#: as inside a JSON string), hexadecimal (an even number of digits; an odd one at the end of a cut
#: line), ``(null)``, or text as ``ausearch -i`` prints it (group 8: a word; proctitle and cmd below)
_FIELD = re.compile(
    r'(?<![^\s\'])(a(\d{1,5})(?:\[(\d{1,5})\])?|proctitle|cmd|data)='
    r'(\\"((?:[^"\\\s]|\\\\){0,10000})\\"|"([^"\s]{0,10000})(?:"|(?=\s…\[[0-9]{1,12} more bytes cut\]\Z)|\Z)'
    r'|((?:[0-9A-F]{2}){1,500000}[0-9A-F]?)(?![0-9A-Za-z])|\(null\)|([^\s"\'\\]\S{0,10000}))')
#: the length field of a split EXECVE value, and the argument count: part of the run of fields
_EXTRA = re.compile(r"(?<![A-Za-z0-9_])(?:a\d{1,5}_len|argc)=\d{1,9}")
#: where a value as ``ausearch -i`` prints it ends: an argument before the next argument's field,
#: sudo's command before the fields sudo writes after it (else at the record's end)
_NEXT_ARGUMENT = re.compile(r"\s(?=a[0-9]{1,5}(?:\[[0-9]{1,5}\]|_len)?=)")
_AFTER_CMD = re.compile(r"\s(?=(?:terminal|res|exe|hostname|addr)=)")
#: the most bytes of arguments read from one record (the kernel writes at most ~7,500 per record)
_RECORD_BYTES = 1 << 20
#: the serial number of a record's event: records of one event share it
_EVENT = re.compile(r"audit\([^)]{1,64}:([0-9]{1,20})\)")


@attrs.frozen
class AuditCommand:
    """The arguments read out of one audit record's fields.

    ``words``: the arguments in order (EXECVE, PROCTITLE; for ``cmd=`` the
    one command line); ``first``: the index of the first (0 unless an EXECVE
    record goes on from an earlier one of its event); ``event``: the event's
    serial number, or None when the line does not say it; ``start``/``end``:
    the span of the line the fields take (from the first to the last, what
    lies between included); ``kind``: ``"args"``, ``"proctitle"`` or
    ``"cmd"``.
    """

    words: tuple[str, ...]
    start: int
    end: int
    kind: str
    first: int = 0
    event: str | None = None
    #: the piece its first argument starts with (> 0: the argument began in the record before) and
    #: whether its last argument was written in pieces (it may go on in the next record)
    first_piece: int = 0
    last_pieced: bool = False

    @property
    def text(self) -> str:
        """The words joined by one space (where an argument holding a space ends is not seen there)."""
        return " ".join(self.words)

    def shown(self, words: tuple[str, ...] | list[str] | None = None) -> str:
        """What stands for the fields: ``"args (decoded): mysql -uroot -p*** 'two words'"`` — ``words``
        (by default the decoded ones) quoted as a shell would need them where they hold a
        space or a shell character, C0 control characters and DEL written ``\\\\xNN`` (a
        newline of a ``bash -c`` script included), so it stays one line."""
        words = self.words if words is None else words
        text = words[0] if self.kind in ("cmd", "data") and len(words) == 1 else " ".join(
            shlex.quote(w) if _NEEDS_QUOTES.search(w) else w for w in words)
        return f"{self.kind} (decoded): {text.translate(_ESCAPED_CONTROLS)}"

    def in_line(self, line: str) -> str:
        """``line`` (the one it was read from) with its fields shown decoded (:meth:`shown`)."""
        return line[:self.start] + self.shown() + line[self.end:]


#: a word a shell would need quoted to read it as one argument (globs aside: ``-p***`` stays readable)
_NEEDS_QUOTES = re.compile(r"[\s'\"\\$`;&|<>(){}#!]|\A\Z")
#: C0 control characters and DEL as ``\xNN``
_ESCAPED_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]}


def _value(match: re.Match[str], line: str, limit: int) -> tuple[bytes, int]:
    """A field's value as bytes, and where it ends on the line (``limit``: the record's end)."""
    escaped, quoted, hexa, plain = match.group(5), match.group(6), match.group(7), match.group(8)
    if escaped is not None:
        return escaped.replace("\\\\", "\\").encode("utf-8", "surrogatepass"), match.end()
    if quoted is not None:
        return quoted.encode("utf-8", "surrogatepass"), match.end()
    if hexa is not None:
        return bytes.fromhex(hexa[: len(hexa) // 2 * 2]), match.end()  # a cut line's last digit dropped
    if plain is None:
        return b"", match.end()  # (null)
    # as ausearch -i prints them, decoded with their spaces: an argument up to the next argument's field,
    # sudo's command up to the fields it writes after it, a proctitle up to the record's end
    start = match.start(8)
    ends = _NEXT_ARGUMENT if match.group(2) is not None else _AFTER_CMD if match.group(1) == "cmd" else None
    after = ends.search(line, start, limit) if ends is not None else None
    value = line[start:after.start() if after is not None else limit].rstrip()
    if after is None and value.endswith("'"):  # the close of msg='…'
        value = value[:-1]
    return value.replace("\\ ", " ").encode("utf-8", "surrogatepass"), start + len(value)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


def _record(line: str, start: int, end: int) -> AuditCommand | None:
    segment = line[start:end]
    fields = list(_FIELD.finditer(line, start, end))
    args = [m for m in fields if m.group(2) is not None]
    event = _EVENT.search(segment)
    serial = event.group(1) if event else None
    execve = "argc=" in segment or "EXECVE" in segment or "type=1309" in segment
    if args and execve:
        pieces: dict[int, list[tuple[int, bytes]]] = {}
        stops: list[int] = []
        kept: list[re.Match[str]] = []
        size = 0
        for m in args:
            if stops and m.start() < stops[-1]:  # inside the value before it (ausearch -i: "a2=x a3=y z")
                continue
            value, stop = _value(m, line, end)
            size += len(value)
            if size > _RECORD_BYTES:
                break
            pieces.setdefault(int(m.group(2)), []).append((int(m.group(3) or 0), value))
            stops.append(stop)
            kept.append(m)
        args = kept
        words = tuple(_text(b"".join(piece for _, piece in sorted(pieces[k]))) for k in sorted(pieces))
        spans = [(m.start(), stop) for m, stop in zip(args, stops)] + [m.span() for m in _EXTRA.finditer(line, start, end)]
        first, last = min(pieces), max(pieces)
        return AuditCommand(words, min(s for s, _ in spans), max(e for _, e in spans), "args", first, serial,
                            min(i for i, _ in pieces[first]), args[-1].group(3) is not None and int(args[-1].group(2)) == last)
    for kind in ("proctitle", "cmd", "data"):
        one = next((m for m in fields if m.group(1) == kind), None)
        if one is not None:
            value, stop = _value(one, line, end)
            if kind == "proctitle":
                words = tuple(_text(w) for w in value.split(b"\0"))
            else:  # a tty's keystrokes: a carriage return ends a command line
                words = (_text(value.replace(b"\r", b"\n")) if kind == "data" else _text(value),)
            return AuditCommand(words, one.start(), stop, kind, 0, serial)
    return None


def audit_records(line: str) -> list[AuditCommand]:
    """The command lines that ``line``'s audit records carry, one per record, in order (empty
    when it has none or is no audit record).

    A line holding several records (``type=PROCTITLE … type=EXECVE …``) is read a record
    at a time; in a record, EXECVE fields win over ``proctitle=`` and ``cmd=``.  An EXECVE
    value split into pieces is joined again before it is decoded (a character split between
    two pieces stays whole).  A value that is not UTF-8 keeps its odd bytes as ``\\xNN``;
    ``proctitle`` is split into words at its NULs."""
    if _CONTEXT.search(line) is None:
        return []
    starts = [m.start() for m in _RECORD_START.finditer(line)] or [0]
    starts[0] = 0
    out = []
    for start, end in zip(starts, [*starts[1:], len(line)]):
        record = _record(line, start, end)
        if record is not None:
            out.append(record)
    return out
