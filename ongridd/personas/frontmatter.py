"""Reading markdown files with YAML frontmatter (personas and skills).

The one place that turns raw bytes into ``(mapping, body)`` with warnings that
name the file and, where known, the line.  Nothing here raises for bad
content: every problem becomes a :class:`FrontmatterProblem` the caller turns
into a warning.
"""

from __future__ import annotations

import datetime
import math
import os
import re
import stat
from collections.abc import Mapping
from typing import Any

import attrs
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError

from ongridd.yamlbounds import (FRONTMATTER_LIMITS, PlainDocument, compose_bounded, describe, load_plain, quote,
                                yaml_type)

__all__ = [
    "MAX_FILE_BYTES", "Frontmatter", "FrontmatterProblem", "NotJSONValue", "ValueTooLarge", "decode", "describe", "parse",
    "plain", "quote", "read_file_bytes", "read_file_stat", "split", "where", "yaml_type",
]

#: Files (and ``PUT /api/agents`` bodies) larger than this are refused unread
#: (a persona is a page of text).
MAX_FILE_BYTES = 256 * 1024
#: Free-form values (``metadata``) are cut off at this many nodes / this depth,
#: so alias bombs and recursive anchors cannot blow up memory or the stack.
MAX_VALUE_NODES = 5000
MAX_VALUE_DEPTH = 32
#: Integers kept in ``metadata`` fit in this many bits (JSON readers and
#: Python's own int-to-text conversion give up on far larger ones).
MAX_INT_BITS = 1024


def where(path: str, line: int | None) -> str:
    """``path:line`` or ``path`` — the prefix of every warning."""
    return f"{path}:{line}" if line is not None else path


@attrs.frozen
class FrontmatterProblem:
    """Why a file cannot be used: a message and, when known, the file line (1-based)."""

    message: str
    line: int | None = None


@attrs.frozen(kw_only=True)
class Frontmatter:
    """A split and parsed file.

    ``data``: the YAML mapping (``dict``, as the safe loader built it).
    ``key_lines``: top-level key → its file line.  ``item_lines``: top-level
    key → the file line of each item when the value is a YAML sequence.
    ``body``: the text after the closing ``---`` (leading blank lines and
    trailing whitespace removed).  ``body_line``: the file line where the
    body starts.
    """

    data: dict
    key_lines: Mapping[str, int]
    item_lines: Mapping[str, tuple[int, ...]]
    body: str
    body_line: int


def read_file_bytes(path: str | os.PathLike) -> bytes | FrontmatterProblem:
    """Read a file's bytes, refusing non-regular and oversized files.

    Returns the bytes, or a problem (never raises for I/O errors).  The file
    is opened non-blocking and checked with ``fstat`` before reading, so a
    FIFO or device put in an agents folder can never hang a load.
    """
    got = read_file_stat(path)
    return got if isinstance(got, FrontmatterProblem) else got[0]


def read_file_stat(path: str | os.PathLike) -> tuple[bytes, os.stat_result] | FrontmatterProblem:
    """Like :func:`read_file_bytes`, and also the ``fstat`` result taken before reading.

    Returns ``(bytes, stat)`` or a problem.  At most ``MAX_FILE_BYTES + 1``
    bytes are read (a file that grows past the limit while read is refused).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        return FrontmatterProblem(f"cannot read file: {exc.strerror or exc}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return FrontmatterProblem("not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            return FrontmatterProblem(f"file too large ({st.st_size} bytes; the limit is {MAX_FILE_BYTES})")
        # One read of the size fstat gave (plus one byte, to see growth) is
        # usually all; loop for short reads and files that grew meanwhile.
        chunks = []
        total = 0
        want = st.st_size + 1
        while total <= MAX_FILE_BYTES:
            chunk = os.read(fd, min(max(want - total, 65536), MAX_FILE_BYTES + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        return FrontmatterProblem(f"cannot read file: {exc.strerror or exc}")
    finally:
        os.close(fd)
    if total > MAX_FILE_BYTES:
        return FrontmatterProblem(f"file too large (more than {MAX_FILE_BYTES} bytes)")
    return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), st


def decode(raw: str | bytes) -> str | FrontmatterProblem:
    """Bytes → text: UTF-8 with or without BOM; CRLF and lone CR become LF.

    Invalid UTF-8 gives ``not valid UTF-8 (byte 0xE9 at offset N)`` with the
    line of the bad byte; a NUL character is refused (it cannot go into a
    prompt or a database text column).
    """
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            return FrontmatterProblem(
                f"not valid UTF-8 (byte 0x{raw[exc.start]:02X} at offset {exc.start})", line
            )
    else:
        text = raw
    text = text.removeprefix("\ufeff")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    nul = text.find("\x00")
    if nul >= 0:
        return FrontmatterProblem(f"contains a NUL character (at character {nul})", text.count("\n", 0, nul) + 1)
    return text


def split(text: str) -> tuple[str, str, int] | FrontmatterProblem:
    """Split LF text into (yaml text, body, body's first file line).

    The first line must be ``---`` (trailing spaces allowed) and a later line
    ``---`` closes the block.
    """
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        return FrontmatterProblem("missing frontmatter (file must start with ---)", 1)
    for i in range(1, len(lines)):
        if lines[i].rstrip() == "---":
            yaml_text = "\n".join(lines[1:i])
            body_lines = lines[i + 1 :]
            first = i + 2  # file line of body_lines[0]
            while body_lines and not body_lines[0].strip():
                body_lines.pop(0)
                first += 1
            body = "\n".join(body_lines).rstrip()
            return yaml_text + "\n", body, first if body else i + 2
    return FrontmatterProblem("frontmatter is not closed (no line --- after the first one)", 1)


_ODD_BREAKS = {"\u2028": "U+2028 (LINE SEPARATOR)", "\u2029": "U+2029 (PARAGRAPH SEPARATOR)",
               "\x85": "U+0085 (NEXT LINE)"}
_ODD_BREAK = re.compile("[\u2028\u2029\x85]")

#: ruamel's messages may quote a whole value (a duplicate key's, say): cut them here.
_MAX_PROBLEM_CHARS = 300


def _cut(text: Any) -> str:
    text = str(text)
    return text if len(text) <= _MAX_PROBLEM_CHARS else text[:_MAX_PROBLEM_CHARS] + "…"


def _yaml_problem(exc: Exception, yaml_text: str) -> FrontmatterProblem:
    if isinstance(exc, MarkedYAMLError):
        problem, context = _cut(exc.problem or exc), exc.context and _cut(exc.context)
        pmark, cmark = exc.problem_mark, exc.context_mark
        if pmark is not None and cmark is not None and context and pmark.index >= len(yaml_text.rstrip()):
            # e.g. an unclosed quote: the end of the block is not where to look.
            return FrontmatterProblem(
                f"invalid YAML in frontmatter: {context}: {problem} (reached the closing ---)", cmark.line + 2
            )
        mark = pmark or cmark
        line = mark.line + 2 if mark is not None else None
        msg = f"invalid YAML in frontmatter: {problem}"
        if "'\\t'" in problem:
            msg += " (YAML does not allow tabs for indentation; use spaces)"
        elif "mapping values are not allowed" in problem:
            msg += " (put a value that contains ': ' in quotes)"
        if context and cmark is not None and pmark is not None and cmark.line != pmark.line:
            msg += f" ({context} started at line {cmark.line + 2})"
        return FrontmatterProblem(msg, line)
    if isinstance(exc, ReaderError):
        pos = exc.position if isinstance(exc.position, int) else None
        line = yaml_text.count("\n", 0, pos) + 2 if pos is not None else None
        return FrontmatterProblem(f"invalid YAML in frontmatter: {exc.reason} (character {exc.character!r})", line)
    return FrontmatterProblem(f"invalid YAML in frontmatter: {_cut(exc)}")


def parse(raw: str | bytes) -> Frontmatter | FrontmatterProblem:
    """Decode, split and YAML-load a frontmatter file (YAML 1.2, safe loader).

    Returns a :class:`Frontmatter` whose ``data`` is a mapping (an empty
    block gives ``{}``), or the first problem found.  Never raises for bad
    content.  Input longer than ``MAX_FILE_BYTES`` (bytes, or characters for
    text) is refused unparsed, and the YAML loader refuses alias bombs,
    recursive aliases and documents past ``FRONTMATTER_LIMITS``, so the time
    and memory one call takes are bounded whatever the input.
    """
    if len(raw) > MAX_FILE_BYTES:
        unit = "bytes" if isinstance(raw, (bytes, bytearray)) else "characters"
        return FrontmatterProblem(f"file too large ({len(raw)} {unit}; the limit is {MAX_FILE_BYTES})")
    text = decode(raw)
    if isinstance(text, FrontmatterProblem):
        return text
    parts = split(text)
    if isinstance(parts, FrontmatterProblem):
        return parts
    yaml_text, body, body_line = parts
    if (odd := _ODD_BREAK.search(yaml_text)) is not None:
        # libyaml (YAML 1.1) breaks lines there and the pure-Python parser (1.2) does not, while editors
        # and terminals show one line: keys written after one would load on some installs, unseen
        line = yaml_text.count("\n", 0, odd.start()) + 2
        return FrontmatterProblem(
            f"frontmatter holds {_ODD_BREAKS[odd.group()]} (a line break to some YAML parsers and none to others, "
            "and invisible in most editors): use a plain line break, or remove it", line)
    # most files: built straight from libyaml's events
    doc = load_plain(yaml_text, FRONTMATTER_LIMITS) or _composed(yaml_text)
    if isinstance(doc, FrontmatterProblem):
        return doc
    data = {} if doc.data is None else doc.data
    if not isinstance(data, dict):
        return FrontmatterProblem(
            f"frontmatter must be a YAML object (a mapping of keys), got {yaml_type(data)}", 2
        )
    return Frontmatter(data=data, key_lines={k: line + 2 for k, line in doc.key_lines.items()},
                       item_lines={k: tuple(line + 2 for line in lines) for k, lines in doc.item_lines.items()},
                       body=body, body_line=body_line)


def _composed(yaml_text: str) -> PlainDocument | FrontmatterProblem:
    """The frontmatter YAML composed and constructed (every document :func:`load_plain` leaves
    alone), with the lines of its top keys and their items; the first problem otherwise."""
    try:
        # One pass: compose the node tree (it carries the lines), then construct
        # the plain data from it with the same safe constructor load() uses.
        # The composer refuses alias bombs, recursive aliases and deep or huge
        # documents before anything is constructed (ongridd.yamlbounds).
        yaml, node = compose_bounded(yaml_text, FRONTMATTER_LIMITS)
        data = yaml.constructor.construct_document(node) if node is not None else None
    except (YAMLError, ValueError) as exc:  # ruamel raises a few plain ValueErrors
        return _yaml_problem(exc, yaml_text)
    except RecursionError:
        return FrontmatterProblem("invalid YAML in frontmatter: nested too deeply", 2)
    except Exception as exc:  # noqa: BLE001 — a constructor's KeyError/TypeError on odd tagged values
        return FrontmatterProblem(
            f"invalid YAML in frontmatter: cannot build a value ({type(exc).__name__}: {quote(str(exc), 100)})")
    key_lines: dict[str, int] = {}
    item_lines: dict[str, tuple[int, ...]] = {}
    if isinstance(node, MappingNode):
        for knode, vnode in node.value:
            if isinstance(knode, ScalarNode):
                key_lines[knode.value] = knode.start_mark.line
                if isinstance(vnode, SequenceNode):
                    item_lines[knode.value] = tuple(v.start_mark.line for v in vnode.value)
    return PlainDocument(data, key_lines, item_lines)


class ValueTooLarge(ValueError):
    """A free-form value exceeds MAX_VALUE_NODES or MAX_VALUE_DEPTH."""


class NotJSONValue(ValueError):
    """A free-form value JSON cannot carry (``.nan``, ``.inf``): the persona's fields go out as JSON."""


def plain(value: Any) -> Any:
    """A JSON-safe deep copy of a loaded YAML value.

    Mappings → ``dict`` with ``str`` keys, sequences → ``list``, timestamps →
    ISO 8601 text, bytes → text (UTF-8, replacement characters where
    invalid).  Raises :class:`ValueTooLarge` past the node or depth limits
    or for an integer of more than ``MAX_INT_BITS`` bits, :class:`NotJSONValue`
    for a number JSON does not have (``.nan``, ``.inf``, ``-.inf``).
    """
    budget = [MAX_VALUE_NODES]

    def conv(v: Any, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise ValueTooLarge(f"more than {MAX_VALUE_NODES} values")
        if depth > MAX_VALUE_DEPTH:
            raise ValueTooLarge(f"nested deeper than {MAX_VALUE_DEPTH} levels")
        if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > MAX_INT_BITS:
            raise ValueTooLarge(f"an integer of {v.bit_length():,} bits")
        if isinstance(v, float) and not math.isfinite(v):
            raise NotJSONValue(f"the number {v} (JSON numbers are finite; quote it to keep it as text)")
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, Mapping):
            return {str(k): conv(x, depth + 1) for k, x in v.items()}
        if isinstance(v, (list, tuple, set, frozenset)):
            return [conv(x, depth + 1) for x in v]
        if isinstance(v, (datetime.date, datetime.datetime)):
            return v.isoformat()
        if isinstance(v, (bytes, bytearray)):
            return bytes(v).decode("utf-8", "replace")
        return str(v)

    return conv(value, 0)
