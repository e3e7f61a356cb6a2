"""The secrets the daemon holds, their redaction, and scrubbed child environments.

The daemon reads every secret it is configured with once at start-up
(:func:`collect_secrets`): the chat tokens (``server.tokens_env``), the model
API key (``llm.api_key_env``), every plugin setting whose key ends in
``_env`` (it names an environment variable holding a bridge or plugin
secret) and the password of the database URL.  For as long as it runs
(:func:`daemon_secrets`) it then holds them: the variables are removed
from its own ``os.environ``, so a child started with the daemon's
environment cannot see them, and the values are registered with the
process-wide :data:`REGISTRY`.  When the daemon stops, the variables are
put back (an in-process daemon — tests, the demo — leaves the process
environment as it found it).

Everything that leaves the daemon for a log line, the database or a model
is passed through :func:`redact`: each literal value — and its JSON-escaped
forms, since tool results are often JSON text — is replaced by
:data:`REDACTED`.  Overlapping values are handled (the union of every match
is replaced), so no fragment of one secret survives next to another.

Linux note: removing a variable from ``os.environ`` calls ``unsetenv`` but
does not change ``/proc/<daemon pid>/environ`` (that is the process's
initial environment block); what matters is that children no longer
inherit the value, and that every child the daemon starts is given an
explicit environment built by :func:`scrubbed_env`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import unquote, unquote_plus, urlsplit

from ongridd.errors import ConfigError

#: what a secret value is replaced with
REDACTED = "[redacted]"

#: a token shorter than this gets a start-up warning (it is easy to guess and
#: likely to occur by chance in tool output, where redaction then hides innocent text)
MIN_TOKEN_CHARS = 16
#: the shortest secret the daemon accepts (tokens, the API key, plugin secrets, the database
#: password): every text that holds a secret is redacted, so a short one (``disk``, ``test``) would
#: rewrite ordinary words in every message and log line — and it is guessed at once
MIN_SECRET_CHARS = 8


class ShortSecretError(ConfigError):
    """A secret is shorter than :data:`MIN_SECRET_CHARS` (the message names where it comes from,
    never the value)."""

_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


#: ASCII characters an editor or a person puts between the pieces of a value split over lines:
#: comment and quote leaders, list bullets, a shell's line continuation
_GAP_PUNCTUATION = "#/;*>-\\|"
#: a spread secret is looked for only when what is left of it without gap characters is this long
#: (shorter, too many ordinary texts would match)
MIN_SPREAD_CHARS = 8


#: a run of a held secret this long (its gap characters left out) is hidden in a tool result even
#: when the rest of the secret is not there: a command can read a file that holds one in pieces
MIN_PIECE_CHARS = 8
#: JSON's escapes (a line break written as the two characters ``\\n``): gaps in a tool result
_JSON_ESCAPE = r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])'
#: memory RE2 may use for the pieces' automaton (a larger set is matched more slowly, not refused)
_PIECES_MAX_MEM = 64 << 20


def _varied(piece: str) -> bool:
    """Whether ``piece`` mixes at least two kinds of character (lower-case letters, upper-case
    letters, digits, others): a piece of one kind — a word, a number — is too likely in ordinary
    output to be taken for part of a secret."""
    kinds = {"l" if c.islower() else "u" if c.isupper() else "d" if c.isdigit() else "o" for c in piece}
    return len(kinds) >= 2


#: in a tool result also gap characters: separators a command can put between a secret's characters
#: (``sed 's/./&./g'``, a JSON array of single characters)
_PIECE_GAP_PUNCTUATION = ".,:'\"`"
#: a secret's run with one of these is not looked for in pieces: a hit could take JSON's structure
_STRUCTURE = frozenset("{}[]")
#: a text this long is first searched by RE2 (linear in the text whatever the number of secrets)
#: before the exact search, which costs about a second per MB with hundreds of secrets
QUICK_CHECK_CHARS = 2048


def _kept_class(values: Iterable[str], gaps: str = _GAP_PUNCTUATION) -> str:
    """The regex character class body of the characters a spread secret is searched on: printable
    ASCII but for ``gaps`` (:data:`_GAP_PUNCTUATION`), and every non-ASCII character that occurs in
    one of ``values``.  Everything else is a gap character: all whitespace and control characters,
    and any other non-ASCII character — zero-width, bidirectional and other format characters,
    variation selectors, combining joiners, fillers and blanks, whatever plane they are in."""
    ascii_kept = [chr(c) for c in range(0x21, 0x7F) if chr(c) not in gaps]
    other = sorted({ch for v in values for ch in v if ord(ch) > 0x7E and not ch.isspace()})
    return "".join(re.escape(ch) for ch in (*ascii_kept, *other))


def _re2_literal(text: str) -> str:
    """``text`` as an RE2 pattern matching it literally (every character but ASCII letters and
    digits written as ``\\x{…}``)."""
    return "".join(ch if ch.isascii() and ch.isalnum() else f"\\x{{{ord(ch):x}}}" for ch in text)


def _re2_alternation(words: Iterable[str], folded: Iterable[str] = ()) -> Any:
    """One RE2 pattern matching any of ``words`` (str) as they are, and any of ``folded`` in any
    letter case — but those with a lone surrogate, which UTF-8 cannot hold (an undecodable byte
    of a variable read with ``surrogateescape``: matched literally only) — or None when there are
    none or RE2 cannot build it within its memory limit."""
    import re2

    def usable(items: Iterable[str]) -> list[str]:
        return sorted((w for w in items if _SURROGATE.search(w) is None), key=lambda w: (-len(w), w))

    exact, any_case = usable(words), usable(folded)
    if not exact and not any_case:
        return None
    options = re2.Options()
    options.log_errors = False
    options.max_mem = _PIECES_MAX_MEM
    branches = [*map(_re2_literal, exact)]
    if any_case:
        branches.append("(?i:" + "|".join(map(_re2_literal, any_case)) + ")")
    try:
        return re2.compile("|".join(branches), options)
    except re2.error:
        return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _searchable(text: str) -> str:
    """``text`` with every lone surrogate (a stray half of a UTF-16 pair, or an undecodable byte
    under ``surrogateescape``) as U+FFFD: RE2 takes UTF-8, which cannot hold one; character
    offsets stay the same."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def _run_end(squeezed: str, end: int, pieces: frozenset[str], folded: frozenset[str] = frozenset()) -> int:
    """Where a hit ending at ``end`` in ``squeezed`` ends once every piece (of
    :data:`MIN_PIECE_CHARS` characters: one of ``pieces`` as it is, or one of ``folded`` in any
    letter case) that overlaps its end is taken in, again and again."""
    p = end - MIN_PIECE_CHARS + 1
    while p < end and p + MIN_PIECE_CHARS <= len(squeezed):
        run = squeezed[p:p + MIN_PIECE_CHARS]
        if run in pieces or (folded and run.casefold() in folded):
            end = p + MIN_PIECE_CHARS
        p += 1
    return end


def _varied_folded(piece: str) -> bool:
    """Whether ``piece``, letter case aside, mixes kinds of character (letters, digits, others): a
    run matched in any letter case must not be a plain word."""
    kinds = {"a" if c.isalpha() else "d" if c.isdigit() else "o" for c in piece}
    return len(kinds) >= 2


def _url_form(value: str, safe: str = "") -> str:
    """``value`` percent-encoded as a URL's query or path would carry it (``:`` as ``%3A``; the
    characters in ``safe`` left as they are: a path keeps its ``/``)."""
    from urllib.parse import quote

    try:
        return quote(value, safe=safe)
    except UnicodeEncodeError:  # a lone surrogate: no URL carries it
        return value


#: the most bytes of a file (a gzip file's, decompressed) :func:`file_holds_secret` reads; a
#: larger file is not checked
FILE_SCAN_BYTES = 1 << 30
#: bytes read (and searched) at a time
_SCAN_CHUNK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
#: the file verdicts a redactor keeps (by path, device, inode, size and modification time)
_FILE_VERDICTS = 512


def _forms(value: str) -> set[str]:
    """The literal and the JSON-escaped forms (one and two levels deep, with
    and without ``ensure_ascii``, and with ``/`` written ``\\/`` as PHP and some Java
    libraries write it) under which ``value`` can appear in text."""
    out = {value}
    for ascii_only in (False, True):
        once = json.dumps(value, ensure_ascii=ascii_only)[1:-1]
        out.add(once)
        out.add(json.dumps(once, ensure_ascii=ascii_only)[1:-1])
        if "/" in value:
            slashed = once.replace("/", "\\/")
            out.add(slashed)
            out.add(json.dumps(slashed, ensure_ascii=ascii_only)[1:-1])
    return out


class Redactor:
    """Replaces every occurrence of a fixed set of secret values.

    ``values``: the secrets (empty strings are ignored).  The matcher is one
    compiled alternation of the escaped forms, longest first, so at each
    position the longest secret wins; after a hit the scan resumes one
    character after its start, so overlapping and nested secrets are all
    found.  Matching spans are merged and each merged span becomes
    ``replacement``.  Text without a secret costs one regex scan; a text over
    :data:`QUICK_CHECK_CHARS` is first scanned by RE2 (linear whatever the
    number of secrets), and only a hit costs the exact scan.
    Immutable: build a new one when the set changes.
    """

    def __init__(self, values: Iterable[str] = (), replacement: str = REDACTED):
        self.values = frozenset(v for v in values if isinstance(v, str) and v)
        self.replacement = replacement
        forms: set[str] = set()
        for value in self.values:
            forms |= _forms(value)
        ordered = sorted(forms, key=lambda f: (-len(f), f))
        self._forms = tuple(ordered)
        self._pattern: re.Pattern[str] | None = re.compile("|".join(map(re.escape, ordered))) if forms else None
        # compiled on first use of redact_wrapped: the secrets without their gap characters, the gap
        # characters, and the characters kept
        self._spread: tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]] | None = None
        # redact_pieces' automaton, gap pattern and runs, built on first use
        self._pieces: tuple[Any, re.Pattern[str], frozenset[str], frozenset[str]] | None = None
        self._quick: Any = None  # redact's RE2 first check of long texts, on first use
        self._bytes: tuple[Any, int] | None = None  # holds_in's pattern and its longest match, on first use
        self._file_verdicts: dict[tuple[Any, ...], bool | None] = {}

    def __bool__(self) -> bool:
        return self._pattern is not None

    @property
    def longest(self) -> int:
        """The length of the longest form of a secret matched (0 with none)."""
        return len(self._forms[0]) if self._forms else 0

    def __repr__(self) -> str:  # never the values themselves
        return f"Redactor({len(self.values)} secret(s))"

    def redact(self, text: str) -> str:
        """``text`` with every secret span replaced; the same object when
        nothing matched (or ``text`` is not a non-empty ``str``)."""
        pattern = self._pattern
        if pattern is None or not isinstance(text, str) or not text:
            return text
        if len(text) > QUICK_CHECK_CHARS:
            if self._quick is None:
                self._quick = _re2_alternation(self._forms) or False
            if self._quick is not False and self._quick.search(_searchable(text)) is None:
                return text
        match = pattern.search(text)
        if match is None:
            return text
        spans = self._spans(text, match)
        parts: list[str] = []
        pos = 0
        for start, end in spans:
            parts.append(text[pos:start])
            parts.append(self.replacement)
            pos = end
        parts.append(text[pos:])
        return "".join(parts)


    def redact_wrapped(self, text: str) -> str:
        """:meth:`redact`, then also every secret spread out by gap characters — line breaks and
        any other whitespace, control characters, every non-ASCII character the secrets do not
        contain (zero-width, bidirectional and other format characters, variation selectors,
        combining joiners, fillers, blanks), comment, quote and bullet leaders, a shell's ``\\``
        continuation — as a file an editor wrapped
        (``abcd⏎  # efgh``) or a YAML folded scalar (``abcd efgh``) spreads it, for text a person
        wrote by hand such as a persona file.  The span from the secret's first character to its
        last is replaced, whatever lies between.  Secrets with fewer than
        :data:`MIN_SPREAD_CHARS` characters besides gap characters are matched literally only.
        O(len(text)): the text without its gap characters is searched once (two regex scans);
        positions are mapped back only when a secret is found."""
        text = self.redact(text)
        if self._pattern is None or not isinstance(text, str) or not text:
            return text
        spread, gaps, keep = self._spread_patterns()
        squeezed = gaps.sub("", text)
        if len(squeezed) == len(text) or spread.search(squeezed) is None:
            return text  # no gap character, or no secret once they are gone
        kept = [m.start() for m in keep.finditer(text)]
        return self._replace_hits(text, kept, [m.span() for m in spread.finditer(squeezed)])

    def _replace_spans(self, text: str, spans: Iterable[list[int]]) -> str:
        """``text`` with each ``[start, end]`` span (in order, not overlapping) replaced."""
        parts: list[str] = []
        pos = 0
        for start, end in spans:
            parts += [text[pos:start], self.replacement]
            pos = end
        parts.append(text[pos:])
        return "".join(parts)

    def _replace_hits(self, text: str, kept: list[int], hits: Iterable[tuple[int, int]]) -> str:
        """``text`` with each hit replaced from its first character to its last; ``hits``:
        ``(start, end)`` in the text without its gap characters, in order, whose ``i``-th
        character is ``text[kept[i]]``."""
        spans: list[list[int]] = []
        for a, b in hits:
            start, end = kept[a], kept[b - 1] + 1
            if spans and start <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], end)
            else:
                spans.append([start, end])
        return self._replace_spans(text, spans)

    def _spread_patterns(self) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
        """``(secrets, gaps, kept)``: the secrets without their gap characters, those at least
        :data:`MIN_SPREAD_CHARS` long, as one alternation; a run of gap characters; one kept
        character (see :func:`_kept_class`).  Compiled on first use."""
        if self._spread is None:
            kept = _kept_class(self.values)
            gaps = re.compile(f"[^{kept}]+")
            keys = sorted({k for v in self.values if len(k := gaps.sub("", v)) >= MIN_SPREAD_CHARS},
                          key=lambda k: (-len(k), k))
            spread = re.compile("|".join(map(re.escape, keys))) if keys else re.compile(r"(?!)")
            self._spread = (spread, gaps, re.compile(f"[{kept}]"))
        return self._spread

    def redact_pieces(self, text: str) -> str:
        """:meth:`redact`, then, for a tool result: every secret spread out by gap characters
        (those of :meth:`redact_wrapped`, JSON's escapes, and ``. , : ' " `` `` ` ``, which a
        command can put between its characters), and every run of at least
        :data:`MIN_PIECE_CHARS` of a secret's characters (without gaps) that mixes kinds of
        character (letters and digits, say: :func:`_varied`) — a command that reads a file holding
        a secret a few characters at a time, or a log that wrapped it over two lines with a time
        stamp in between, leaves such runs.  Whole secrets, and runs that mix letters with other
        characters, are found in any letter case (a copy changed to upper case), and whole
        secrets percent-encoded too (``:`` as ``%3A``, as a URL carries it).  In a hit, the
        secret's characters are replaced, each stretch of them between two ``"`` as one
        :data:`REDACTED`, the gaps between stretches kept: JSON stays JSON.  A piece shorter
        than that, a secret without a varied run, one with ``{ } [ ]``, or a copy transformed
        otherwise (reversed, base64, letters swapped for others, letters or digits between its
        characters) is not found.  O(len(text)): the text without its gap characters
        is searched once by one RE2 automaton; positions are mapped back only when something is
        found."""
        text = self.redact(text)
        if self._pattern is None or not isinstance(text, str) or not text:
            return text
        automaton, gaps, pieces, folded = self._piece_patterns()
        if automaton is None:  # no secret long enough to be looked for spread out or in pieces
            return text
        squeezed = gaps.sub("", text)
        hits: list[list[int]] = []
        for match in automaton.finditer(_searchable(squeezed)):
            start, end = match.span()
            end = _run_end(squeezed, end, pieces, folded)  # the run goes on: one hit, not a piece every few characters
            if hits and start <= hits[-1][1]:
                hits[-1][1] = max(hits[-1][1], end)
            else:
                hits.append([start, end])
        if not hits:
            return text
        kept: list[int] = []
        pos = 0
        for gap in gaps.finditer(text):
            kept.extend(range(pos, gap.start()))
            pos = gap.end()
        kept.extend(range(pos, len(text)))
        spans: list[list[int]] = []  # the hits' characters in text: stretches with no " between them
        for start, end in hits:
            first = True
            for i in kept[start:end]:  # between two of a hit's characters lie only gap characters
                if spans and (i <= spans[-1][1] or (not first and '"' not in text[spans[-1][1]:i])):
                    spans[-1][1] = max(spans[-1][1], i + 1)
                else:
                    spans.append([i, i + 1])
                first = False
        return self._replace_spans(text, spans)

    def _piece_patterns(self) -> tuple[Any, re.Pattern[str], frozenset[str], frozenset[str]]:
        """``(automaton, gaps, pieces, folded)``: an RE2 pattern matching each secret without its
        gap characters (:data:`MIN_SPREAD_CHARS` or longer; also percent-encoded, as a URL
        carries it) in any letter case, each varied run of :data:`MIN_PIECE_CHARS` of it as it
        is, and each run that is varied letter case aside in any case (None when there is none);
        a run of gap characters or JSON escapes; the runs matched as they are; the runs matched
        in any case, case-folded.  Built on first use."""
        if self._pieces is None:
            kept = _kept_class(self.values, _GAP_PUNCTUATION + _PIECE_GAP_PUNCTUATION)
            gaps = re.compile(f"(?:{_JSON_ESCAPE}|[^{kept}])+")
            keys = {k for v in self.values for form in {v, _url_form(v), _url_form(v, "/")}
                    if len(k := gaps.sub("", form)) >= MIN_SPREAD_CHARS and not _STRUCTURE.intersection(k)}
            runs = {k[i:i + MIN_PIECE_CHARS] for k in keys for i in range(len(k) - MIN_PIECE_CHARS + 1)}
            pieces = frozenset(g for g in runs if _varied(g))
            folded = frozenset(g.casefold() for g in runs if _varied_folded(g))
            self._pieces = (_re2_alternation(pieces, keys | folded), gaps, pieces, folded)
        return self._pieces

    def _bytes_pattern(self) -> tuple[Any, int]:
        """``(pattern, longest)``: an RE2 pattern over bytes (Latin-1 mode: one byte, one
        character) matching each secret's forms (literal, JSON-escaped, percent-encoded) as UTF-8,
        the secret itself as UTF-16 (either byte order) and as Latin-1, and its UTF-8 bytes in
        hexadecimal and in base64 (:func:`_encoded_copies`: a Kubernetes Secret, a logged Basic
        authorization), its UTF-16 bytes so too (PowerShell's ``-EncodedCommand``), each in any
        ASCII letter case and without line breaks (None when there is none, or when RE2 could not
        compile it: then ``longest`` is not 0 and the callers fail closed; it is matched against
        text whose line breaks are dropped, :func:`_unwrapped`); and the longest match in bytes.
        Built on first use."""
        if self._bytes is None:
            import re2

            encoded: set[bytes] = set()
            for value in self.values:
                if _SURROGATE.search(value) is not None:
                    continue
                encoded.update(f.encode("utf-8") for f in (*_forms(value), _url_form(value), _url_form(value, "/")))
                encoded.update(value.encode(codec) for codec in ("utf-16-le", "utf-16-be"))
                with contextlib.suppress(UnicodeEncodeError):
                    encoded.add(value.encode("latin-1"))
                encoded.update(_encoded_copies(value.encode("utf-8")))
                # PowerShell's -EncodedCommand, a .NET or Windows tool's dump: base64 of UTF-16
                encoded.update(_encoded_copies(value.encode("utf-16-le")))
            ordered = sorted({u for u in map(_unwrapped, encoded) if u}, key=lambda b: (-len(b), b))
            pattern = None
            if ordered:
                options = re2.Options()
                options.log_errors = False
                options.max_mem = _PIECES_MAX_MEM
                options.encoding = re2.Options.Encoding.LATIN1
                # Latin-1 mode: each byte is the character of that code point, so the str literal fits
                source = "(?i:" + "|".join(_re2_literal(b.decode("latin-1")) for b in ordered) + ")"
                try:
                    pattern = re2.compile(source.encode("latin-1"), options)
                except re2.error:
                    pattern = None
            self._bytes = (pattern, max(map(len, ordered), default=0))
        return self._bytes

    def holds_in(self, data: bytes) -> bool:
        """Whether ``data`` (UTF-8 or ASCII bytes) holds one of the secrets — as it is, in any
        letter case, JSON-escaped or percent-encoded, its encoded copies wrapped over lines too.
        Linear in ``data`` (one RE2 scan)."""
        pattern, longest = self._bytes_pattern()
        if pattern is None:
            return longest > 0  # secrets held but no pattern to look for them with: as if found
        return pattern.search(_unwrapped(data)) is not None

    def file_holds(self, path: str, max_bytes: int = FILE_SCAN_BYTES) -> bool | None:
        """Whether the regular file ``path`` holds one of the secrets (see :meth:`holds_in`); a
        gzip file (by its first bytes) is read decompressed, every member, and as it is.  False
        when none is found; None when it was not checked: not a regular file, not readable, or
        larger than ``max_bytes`` (a gzip file too, or decompressed: what was read by then held
        none).  The verdict is kept while the file's device, inode, size, modification and change
        times stay the same (a file that changed is read whole again: a file written in place
        and then grown may hold a secret anywhere).  Blocking (run it in a thread); never
        raises."""
        import zlib

        pattern, longest = self._bytes_pattern()
        if pattern is None:
            return None if longest else False  # held secrets no pattern could be built for: not checked
        try:
            # looked at before it is opened to read (O_PATH): a device is never opened to read (a watchdog
            # starts when opened), a FIFO never waited on; only a regular file is read
            handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(handle).st_mode):
                return None
            fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            return None
        finally:
            os.close(handle)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                return None
            fh = open(fd, "rb")
        except OSError:
            os.close(fd)
            return None
        with fh:
            # the change time too: a rewrite that puts the modification time back (touch -r, cp -p) moves it
            key = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, max_bytes)
            if key in self._file_verdicts:
                return self._file_verdicts[key]
            try:
                verdict = _scan_file(fh, pattern, longest, max_bytes, st.st_size, zlib)
            except (OSError, zlib.error, EOFError):
                verdict = None
        if len(self._file_verdicts) >= _FILE_VERDICTS:
            self._file_verdicts.clear()
        self._file_verdicts[key] = verdict
        return verdict

    def _spans(self, text: str, match: re.Match[str] | None) -> list[list[int]]:
        """Merged ``[start, end]`` spans of every secret in ``text`` from ``match`` on."""
        assert self._pattern is not None
        spans: list[list[int]] = []
        while match is not None:
            start, end = match.span()
            if spans and start <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], end)
            else:
                spans.append([start, end])
            match = self._pattern.search(text, start + 1)
        return spans

    def stream_cut(self, text: str) -> int:
        """Where a stream redactor may cut unredacted ``text``: everything
        before the cut can be redacted and sent now; the rest is held for the
        next piece.  The cut is before the longest end of ``text`` that could
        be the start of a secret (:meth:`partial_tail`), moved left of any
        secret span it would split, so no secret is ever sent in two parts."""
        cut = len(text) - self.partial_tail(text)
        if self._pattern is None or not text:
            return cut
        for start, end in self._spans(text, self._pattern.search(text)):
            if start < cut < end:
                cut = start
        return cut

    def partial_tail(self, text: str) -> int:
        """How many characters at the end of ``text`` could be the start of a
        secret (the longest suffix that is a proper prefix of a secret form;
        0 when none).  A stream redactor holds those back until the next piece
        shows whether a secret follows.  Costs one ``endswith`` per prefix
        length of each form."""
        if not self._forms or not isinstance(text, str) or not text:
            return 0
        best = 0
        for form in self._forms:
            for k in range(min(len(form) - 1, len(text)), best, -1):
                if text.endswith(form[:k]):
                    best = k
                    break
        return best


def _unwrapped(data: bytes) -> bytes:
    """``data`` without its line breaks (LF and CR bytes): ``base64`` wraps its output at 76
    columns, PEM and MIME at 64 and 76 (with CRLF), ``xxd -p`` at 60, so an encoded copy of a
    secret is split over lines.  Dropping the same bytes from the secrets' forms keeps every match
    that was there (an occurrence of a form stays one); what it adds is a form split by a line
    break.  About a tenth of the search's own cost (``bytes.replace`` runs at memory speed)."""
    data = data.replace(b"\n", b"")
    return data.replace(b"\r", b"") if b"\r" in data else data


def _encoded_copies(raw: bytes) -> set[bytes]:
    """The forms a file may hold ``raw`` in that no search for its text finds: hexadecimal, and the
    base64 (standard and URL-safe alphabets) of ``raw`` at each of the three alignments it can have
    inside a longer encoded run (``user:token`` encoded whole) — only the characters that ``raw``
    alone decides."""
    import base64

    out = {raw.hex().encode()}
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw)
        first, end = -(-8 * pad // 6), 8 * (pad + len(raw)) // 6  # the characters all of whose bits are raw's
        run = encoded[first:end]
        if len(run) >= 8:
            out.update((run, run.translate(bytes.maketrans(b"+/", b"-_"))))
    return out


#: the first bytes of the other formats ``gzip -dc`` unpacks (old gzip, compress, pack, LZH): a
#: member in one of them after a gzip member is unpacked too, and the checks cannot read it
_OTHER_GZIP_FORMATS = (b"\x1f\x9e", b"\x1f\x9d", b"\x1f\x1e", b"\x1f\xa0")


def _scan_file(fh: Any, pattern: Any, longest: int, max_bytes: int, size: int, zlib: Any) -> bool | None:
    """See :meth:`Redactor.file_holds`: ``fh`` open for reading at its start, searched without its
    line breaks (:func:`_unwrapped`, so a wrapped encoded copy is found).  A gzip file is read
    as ``gzip -dc`` reads it: member after member; what came before a corrupt part is still
    searched; bytes after the last member that start no member are ignored by gzip but searched
    as they are, as is every byte of the file (a header's name or comment: what ``grep -a`` or
    ``head -c`` print); a member in another format gzip unpacks (old gzip, ``.Z``, pack, LZH)
    leaves the file unchecked (None)."""
    head = fh.read(2)
    fh.seek(0)
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if head == _GZIP_MAGIC else None
    if size > max_bytes:
        return None
    tail = b""  # the end of what was searched before, so a secret across two reads is found
    raw_tail = b""  # (a gzip file's, of its bytes as they are)
    seen = 0
    gzipped = inflate is not None
    while True:
        raw = fh.read(_SCAN_CHUNK)
        if gzipped:
            flat = raw_tail + _unwrapped(raw)
            if pattern.search(flat) is not None:
                return True
            raw_tail = flat[-longest:] if longest > 1 else b""
        if inflate is None:
            if not gzipped:
                window = tail + _unwrapped(raw)
                seen += len(raw)
                if pattern.search(window) is not None:
                    return True
                tail = window[-longest:] if longest > 1 else b""
            if not raw:
                return False
            continue
        pieces: list[bytes] = []
        data, broken = raw, False
        try:
            while data and seen <= max_bytes:
                if inflate.eof:  # a member ended: another one, another format, or what gzip ignores
                    if len(data) < 2:
                        data += fh.read(1)
                    if data[:2] in _OTHER_GZIP_FORMATS:
                        return None
                    if not data.startswith(_GZIP_MAGIC[:len(data)]):
                        inflate = None  # the rest is ignored by gzip: searched as it is only
                        break
                    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                pieces.append(inflate.decompress(data, max(1, max_bytes + 1 - seen)))
                seen += len(pieces[-1])
                data = inflate.unconsumed_tail or (inflate.unused_data if inflate.eof else b"")
        except zlib.error:
            broken = True
        window = tail + _unwrapped(b"".join(pieces))
        if pattern.search(window) is not None:
            return True
        if broken:  # gzip -dc prints what it unpacked before the fault: unpack it without the checks
            fh.seek(0)
            whole = fh.read(max_bytes + 1)
            if _search_unwrapped(pattern, whole, longest):  # (and its bytes as they are, past the fault too)
                return True
            return _scan_unchecked_gzip(whole, pattern, longest, max_bytes, zlib)
        if seen > max_bytes:
            return None
        if not raw:
            return False
        tail = window[-longest:] if longest > 1 else b""


def _search_unwrapped(pattern: Any, data: bytes, longest: int) -> bool:
    """Whether ``pattern`` matches ``data`` without its line breaks (:func:`_unwrapped`), searched a
    chunk at a time (no second copy of a large ``data``)."""
    tail = b""
    for start in range(0, len(data), _SCAN_CHUNK):
        window = tail + _unwrapped(data[start:start + _SCAN_CHUNK])
        if pattern.search(window) is not None:
            return True
        tail = window[-longest:] if longest > 1 else b""
    return False


def _scan_unchecked_gzip(data: bytes, pattern: Any, longest: int, max_bytes: int, zlib: Any) -> bool | None:
    """A gzip file ``data`` that does not unpack cleanly (a wrong CRC or length, a cut-off or
    corrupt member), unpacked as far as it goes with no check of its trailers (raw deflate after
    each member's header, RFC 1952) and searched; None when nothing was found (not checked whole)."""
    out: list[bytes] = []
    pos, size = 0, 0
    try:
        while data.startswith(_GZIP_MAGIC, pos) and size <= max_bytes:
            flags, pos = data[pos + 3], pos + 10
            if flags & 4:  # FEXTRA: a length, then that many bytes
                pos += 2 + int.from_bytes(data[pos:pos + 2], "little")
            for bit in (8, 16):  # FNAME, FCOMMENT: zero-terminated
                if flags & bit:
                    pos = data.index(b"\0", pos) + 1
            if flags & 2:  # FHCRC
                pos += 2
            inflate = zlib.decompressobj(-zlib.MAX_WBITS)
            out.append(inflate.decompress(data[pos:], max_bytes + 1 - size))
            size += len(out[-1])
            if not inflate.eof:
                break
            pos = len(data) - len(inflate.unused_data) + 8  # past the member's CRC and length
    except (zlib.error, ValueError, IndexError):
        pass
    return True if _search_unwrapped(pattern, b"".join(out), longest) else None


class SecretRegistry:
    """The process-wide set of secret values in use, as a union of holds.

    A daemon holds its secrets for its lifetime (:meth:`hold`); tests that
    run several daemons in one process each add and later remove their own.
    The :class:`Redactor` is rebuilt only when the set changes; reading it
    is lock-free (an attribute swap), so :meth:`redact` is safe from any
    thread, including worker threads writing to the database.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holds: dict[int, frozenset[str]] = {}
        self._next = 0
        self._redactor = Redactor()
        self._remembered: dict[str, str] = {}

    @property
    def redactor(self) -> Redactor:
        return self._redactor

    @contextlib.contextmanager
    def hold(self, values: Iterable[str]) -> Iterator[Redactor]:
        """Add ``values`` for the duration of the block; yields the redactor
        in effect right after adding them."""
        with self._lock:
            key = self._next
            self._next += 1
            self._holds[key] = frozenset(v for v in values if v)
            self._rebuild()
        try:
            yield self._redactor
        finally:
            with self._lock:
                self._holds.pop(key, None)
                self._rebuild()

    def _rebuild(self) -> None:
        union = frozenset().union(*self._holds.values()) if self._holds else frozenset()
        if union != self._redactor.values:
            self._redactor = Redactor(union)

    def redact(self, text: str) -> str:
        """See :meth:`Redactor.redact` (with every value held right now)."""
        return self._redactor.redact(text)

    def remember(self, env_name: str, value: str) -> None:
        """Keep the value read from ``env_name`` after it left ``os.environ``
        (so a later :func:`ongridd.config.read_secret` still finds it)."""
        with self._lock:
            self._remembered[env_name] = value

    def forget(self, env_name: str) -> None:
        """Drop what :meth:`remember` kept for ``env_name``."""
        with self._lock:
            self._remembered.pop(env_name, None)

    def remembered(self, env_name: str) -> str | None:
        """The value remembered for ``env_name``, or None."""
        return self._remembered.get(env_name)


#: the registry every redaction point in the daemon uses
REGISTRY = SecretRegistry()


def redact(text: Any) -> Any:
    """Redact every held secret from ``text`` (anything not a ``str``, e.g.
    None, is returned unchanged).  Never raises."""
    return REGISTRY.redact(text)


def bytes_hold_secret(data: bytes) -> bool:
    """Whether ``data`` holds a secret this process holds right now, in any of the forms a file is
    checked for (:meth:`Redactor.holds_in`); linear in ``data``.  Never raises."""
    return REGISTRY.redactor.holds_in(data)


def holds_any_secret() -> bool:
    """Whether this process holds any secret right now (with none, no file can hold one)."""
    return bool(REGISTRY.redactor.values)


def file_holds_secret(path: str, max_bytes: int = FILE_SCAN_BYTES) -> bool | None:
    """Whether the regular file ``path`` holds a secret this process holds right now (see
    :meth:`Redactor.file_holds`: True, False, or None when not checked).  Blocking (run it in a
    thread); never raises."""
    return REGISTRY.redactor.file_holds(path, max_bytes)


def redact_wrapped(text: str) -> str:
    """:func:`redact`, and also held secrets spread out by line breaks, whitespace, format
    characters or comment leaders (see :meth:`Redactor.redact_wrapped`); for hand-written text
    such as persona files.  Never raises."""
    return REGISTRY.redactor.redact_wrapped(text)


def redact_pieces(text: str) -> str:
    """``text`` — a tool result — with every held secret hidden: literal, spread out by gap
    characters or JSON escapes, and every long enough piece of one
    (:meth:`Redactor.redact_pieces`).  Never raises; O(len(text)), about 0.1 s per MB here."""
    return REGISTRY.redactor.redact_pieces(text)


def redact_head(text: str, n: int) -> str:
    """At most the first ``n`` characters of ``text`` with every held secret hidden, one that
    starts among them and runs past them included (a preview cut first and redacted after
    would keep most of a long secret).  Costs O(``n`` + the longest secret held)."""
    redactor = REGISTRY.redactor
    return redactor.redact(text[: n + redactor.longest])[:n]


# ---- the daemon's secrets ------------------------------------------------------


def secret_env_names(config: Any) -> list[str]:
    """Names of the environment variables holding the configuration's
    secrets, in a stable order: ``server.tokens_env``, ``llm.api_key_env``,
    then the value of every plugin setting (at any depth) whose key ends in
    ``_env`` and is a non-empty string."""
    names: list[str] = []

    def add(name: Any) -> None:
        if isinstance(name, str) and name.strip() and name not in names:
            names.append(name)

    add(config.server.tokens_env)
    add(config.llm.api_key_env)

    def walk(node: Any, depth: int) -> None:
        if depth > 20:
            return
        if isinstance(node, Mapping):
            for key, value in node.items():
                if isinstance(key, str) and key.endswith("_env"):
                    add(value)
                else:
                    walk(value, depth + 1)
        elif isinstance(node, (list, tuple)):
            for item in node:
                walk(item, depth + 1)

    walk(config.plugins.settings, 0)
    return names


#: query parameters that carry a credential: a database URL's password (libpq and psycopg read
#: ``password`` and ``sslpassword``), and the key or token a model API may take in its URL
#: (``?key=`` as Google's, ``?api-key=`` as Azure's, ``?access_token=``, a signature)
PASSWORD_PARAMS = frozenset({
    "password", "sslpassword", "key", "api_key", "api-key", "apikey", "x-api-key", "access_token", "token",
    "auth", "auth_token", "secret", "client_secret", "sig", "signature"})


def is_password_param(key: str, value: str) -> bool:
    """Whether the query parameter ``key=value`` (as written) carries a credential: a
    :data:`PASSWORD_PARAMS` name with a value."""
    return bool(value) and unquote_plus(key).strip().lower() in PASSWORD_PARAMS


def url_query_passwords(query: str) -> list[str]:
    """The values of the :data:`PASSWORD_PARAMS` parameters of a URL's query string, as written."""
    return [value for key, sep, value in (part.partition("=") for part in query.split("&"))
            if sep and is_password_param(key, value)]


def url_password(url: str | None) -> list[str]:
    """The credentials of a URL (a database's, a model API's) — the password of its user part,
    and the values of its :data:`PASSWORD_PARAMS` query parameters — each as written and
    percent-decoded (empty list when there is none or the URL cannot be parsed)."""
    if not url:
        return []
    try:
        parts = urlsplit(url)
        written = [p for p in (parts.password, *url_query_passwords(parts.query)) if p]
    except ValueError:
        return []
    return sorted({form for p in written for form in (p, unquote(p), unquote_plus(p)) if form})


class DaemonSecrets:
    """What :func:`collect_secrets` read.

    ``env``: ``{variable name: value}`` for every secret variable that was
    set (read from the environment, else remembered from an earlier start
    in this process).  ``tokens_raw``: the ``server.tokens_env`` value or
    None.  ``api_key``: the ``llm.api_key_env`` value or None.  ``values``:
    every individual secret string (each token on its own, the API key,
    plugin secrets, the database password).
    """

    def __init__(self, *, env: dict[str, str], tokens_raw: str | None, api_key: str | None,
                 values: frozenset[str]):
        self.env = env
        self.tokens_raw = tokens_raw
        self.api_key = api_key
        self.values = values

    def __repr__(self) -> str:
        return f"DaemonSecrets(variables={sorted(self.env)}, values={len(self.values)})"


def collect_secrets(config: Any, environ: Mapping[str, str] | None = None) -> DaemonSecrets:
    """Read every secret the configuration names (see :func:`secret_env_names`)
    from ``environ`` (default ``os.environ``).

    The token variable's value is split into its tokens (``user:tok`` pairs)
    so each token is a secret on its own; the raw value is one too.  Never
    raises for a malformed token list (the authenticator reports that, and a
    short token: :func:`ongridd.config.parse_tokens`); raises
    :class:`ShortSecretError` for any other secret shorter than
    :data:`MIN_SECRET_CHARS`.
    """
    env = os.environ if environ is None else environ
    found: dict[str, str] = {}
    for name in secret_env_names(config):
        value = env.get(name)
        if value:
            found[name] = value
    values: set[str] = set(found.values())
    tokens_raw = found.get(config.server.tokens_env)
    if tokens_raw:
        for item in tokens_raw.split(","):
            _, sep, token = item.partition(":")
            if sep and token.strip():
                values.add(token.strip())
    for name, value in found.items():
        if name != config.server.tokens_env and len(value.strip()) < MIN_SECRET_CHARS:
            raise ShortSecretError(too_short_message(f"the secret in ${name}", len(value.strip())))
    for what, url in (("the database URL's password", config.database_url),
                      ("the credential in llm.base_url", config.llm.base_url)):
        for password in url_password(url):
            if len(password) < MIN_SECRET_CHARS:
                raise ShortSecretError(too_short_message(what, len(password)))
            values.add(password)
    return DaemonSecrets(env=found, tokens_raw=tokens_raw, api_key=found.get(config.llm.api_key_env),
                         values=frozenset(v for v in values if v))


def too_short_message(what: str, length: int) -> str:
    """Why the secret ``what`` (e.g. ``"the secret in $NAME"``) of ``length`` characters is refused."""
    return (f"{what} is {length} characters long; a secret needs at least {MIN_SECRET_CHARS} (every text that "
            "holds it is redacted, so a short one would rewrite ordinary words everywhere, and it is easy to guess)")


def remove_from_environ(secrets: DaemonSecrets, environ: Any = None) -> dict[str, str]:
    """Remember each secret variable's value, then delete it from
    ``environ`` (default ``os.environ``, which also unsets it for children
    started later with the inherited environment).  Also deletes
    ``ONGRID_DATABASE_URL`` when that URL carries a password.  Returns
    ``{name: value}`` of what was removed (for :func:`restore_environ`)."""
    env = os.environ if environ is None else environ
    removed: dict[str, str] = {}
    for name, value in secrets.env.items():
        REGISTRY.remember(name, value)
        if name in env:
            removed[name] = env.pop(name)
    if url_password(env.get("ONGRID_DATABASE_URL")):
        removed["ONGRID_DATABASE_URL"] = env.pop("ONGRID_DATABASE_URL")
    return removed


def restore_environ(removed: Mapping[str, str], environ: Any = None) -> None:
    """Undo :func:`remove_from_environ`: put each variable back unless it
    was set again meanwhile, and forget the remembered values."""
    env = os.environ if environ is None else environ
    for name, value in removed.items():
        REGISTRY.forget(name)
        env.setdefault(name, value)


@contextlib.contextmanager
def daemon_secrets(config: Any, environ: Any = None) -> Iterator[tuple[DaemonSecrets, list[str]]]:
    """Collect the configuration's secrets, remove their variables from
    ``environ`` (default ``os.environ``) and hold the values for redaction,
    for the duration of the block; yields ``(secrets, names removed)``.
    On exit the hold is released and the variables are put back."""
    secrets = collect_secrets(config, environ)
    removed = remove_from_environ(secrets, environ)
    try:
        with REGISTRY.hold(secrets.values):
            yield secrets, sorted(removed)
    finally:
        restore_environ(removed, environ)


# ---- child environments -------------------------------------------------------

#: the variables every child of the daemon may see
BASE_ENV_KEYS = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")

#: what ``pip`` needs besides :data:`BASE_ENV_KEYS`: proxies, CA bundles, the
#: locations of its configuration files (``XDG_CONFIG_HOME``/``XDG_CONFIG_DIRS``,
#: ``PIP_CONFIG_FILE``), the interpreter's import path; plus every ``PIP_*``
#: setting (index URLs, find-links, no-index …) through :data:`PIP_ENV_PREFIXES`
PIP_ENV_KEYS = BASE_ENV_KEYS + (
    "http_proxy", "https_proxy", "no_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "XDG_CACHE_HOME", "PYTHONPATH", "VIRTUAL_ENV", "SOURCE_DATE_EPOCH",
)
PIP_ENV_PREFIXES = ("PIP_",)


def scrubbed_env(keys: Iterable[str] = BASE_ENV_KEYS, *, prefixes: Iterable[str] = (),
                 extra: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A minimal environment for a child process.

    Only ``keys`` and variables whose name starts with one of ``prefixes``
    are copied from ``environ`` (default ``os.environ``); ``extra`` is added
    on top.  A copied variable whose value contains a held secret is left
    out (defence in depth: a secret that was copied into another variable).
    ``PATH`` defaults to the usual system folders.  Never raises.
    """
    env = os.environ if environ is None else environ
    keys = tuple(keys)
    prefixes = tuple(prefixes)
    redactor = REGISTRY.redactor
    out: dict[str, str] = {}
    for name, value in env.items():
        if name in keys or (prefixes and name.startswith(prefixes)):
            if redactor and redactor.redact(value) != value:
                continue
            out[name] = value
    out.setdefault("PATH", _DEFAULT_PATH)
    if extra:
        out.update(extra)
    return out


__all__ = [
    "REDACTED",
    "MIN_TOKEN_CHARS",
    "MIN_SECRET_CHARS",
    "ShortSecretError",
    "Redactor",
    "SecretRegistry",
    "REGISTRY",
    "redact",
    "secret_env_names",
    "collect_secrets",
    "remove_from_environ",
    "restore_environ",
    "daemon_secrets",
    "DaemonSecrets",
    "scrubbed_env",
    "BASE_ENV_KEYS",
    "PIP_ENV_KEYS",
    "PIP_ENV_PREFIXES",
]
