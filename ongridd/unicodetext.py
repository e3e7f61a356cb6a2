"""Text that UTF-8 can carry.

A Python ``str`` may hold UTF-16 surrogate code points (U+D800–U+DFFF) that
no UTF-8 encoder accepts: JSON may escape one alone (``"\\ud800"``), and a
file name's undecodable byte arrives as one (``os.fsdecode``'s
``surrogateescape``).  Such text fails the store (SQLite and PostgreSQL both
encode to UTF-8), the chat socket and the model request alike, after the
work that made it is done.  :func:`valid_text` replaces each with U+FFFD
where text crosses into the daemon (a model's answer, a tool's result) and
where it is stored.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")

__all__ = ["ascii_digits", "valid_text"]


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
