"""Text that UTF-8 can carry.

A Python ``str`` may hold UTF-16 surrogate code points (U+D800–U+DFFF) that
no UTF-8 encoder accepts: JSON may escape one alone (``"\\ud800"``), and a
file name's undecodable byte arrives as one (``os.fsdecode``'s
``surrogateescape``).  Such text fails the store (SQLite and PostgreSQL both
encode to UTF-8), the chat socket and the model request alike, after the
work that made it is done.  :func:`valid_text` replaces each with U+FFFD
where text crosses into the daemon (a model's answer, a tool's result) and
where it is stored.  :func:`visible_text` drops the invisible format characters
(bidirectional overrides and isolates, zero-width characters) from a short label
a model writes, so it reads as it is.
"""

from __future__ import annotations

import re
import unicodedata

_SURROGATE = re.compile("[\ud800-\udfff]")

__all__ = ["ascii_digits", "valid_text", "visible_text"]


def ascii_digits(text: str) -> bool:
    """Whether ``text`` is one or more ASCII digits ``0``–``9`` — what ``int()`` and the
    programs Ongrid runs read as a number.  ``str.isdigit`` also takes ``²`` (which ``int()``
    refuses) and ``٣`` (which it takes as 3)."""
    return text.isascii() and text.isdigit()


def valid_text(text: str) -> str:
    """``text`` with every surrogate code point replaced by U+FFFD (a valid
    pair was never a pair of code points in a Python ``str``: decoders join
    it into one character, so any left is unpaired).  ASCII text is returned
    at once."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub("\ufffd", text)


#: letters and marks that show as blank space (Hangul fillers, the braille blank, the combining
#: grapheme joiner): a run of them pads a line so that what follows wraps onto a line of its own
#: C0 controls but tab and newline, DEL, C1 controls (U+0080..U+009F: 8-bit CSI/OSC), the Unicode
#: bidirectional overrides, isolates and marks, and the line and paragraph separators: what, in
#: text a model or a tool wrote, moves a terminal's cursor, sets its clipboard (OSC 52), hides a
#: link (OSC 8), reorders what a reader sees, or starts a line of its own where a viewer breaks on
#: U+2028 — and shows nothing a reader needs
CONTROL_CHARS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
_CONTROLS = re.compile(f"[{CONTROL_CHARS}]")


def without_controls(text: str) -> str:
    """``text`` without the characters of :data:`CONTROL_CHARS` (tab and newline kept; emoji
    joiners and other format characters kept, unlike :func:`visible_text`).  For whole texts a
    model writes that go out as text: a chat bridge's answer, a terminal's view."""
    return _CONTROLS.sub("", text)


_BLANK_LOOKALIKES = frozenset("\u115f\u1160\u3164\uffa0\u2800\u034f")


def visible_text(text: str) -> str:
    """``text`` without the Unicode format characters (category Cf: the bidirectional overrides,
    embeddings, isolates and marks, zero-width spaces and joiners, the BOM, the soft hyphen), which
    show nothing themselves but can make a label read otherwise than it is (a right-to-left
    override turns ``evorppa`` into ``approve``), and without the letters that show as blank space
    (Hangul fillers, the braille blank).  For labels and short texts a model writes (an agent
    tile's description, a chat bridge's progress text); ASCII text is returned at once."""
    if text.isascii():
        return text
    return "".join(ch for ch in text if ch not in _BLANK_LOOKALIKES and unicodedata.category(ch) != "Cf")

