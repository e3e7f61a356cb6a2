"""Cut a tool result to a size limit as head + tail around a marker
(docs/architecture.md §8)::

    <head>
    [truncated: 6,291,456 chars → 15,904; showing first 7,952 and last 7,952]
    <tail>

Sizes are in characters (Python ``str`` code points), so no UTF-8 character
is ever split.  The cut points also avoid splitting a surrogate pair, a
base character from its combining marks, a ZWJ emoji sequence, a
regional-indicator flag or a CRLF.
"""

from __future__ import annotations

import unicodedata

#: the smallest limit that leaves room for the marker and some text
MIN_MAX_CHARS = 120
#: how far a cut point may move to avoid splitting a character sequence
_MAX_SHIFT = 32


def marker(original: int, head: int, tail: int) -> str:
    """The truncation marker for ``original`` chars cut to ``head`` + ``tail``."""
    return f"[truncated: {original:,} chars → {head + tail:,}; showing first {head:,} and last {tail:,}]"


def _is_regional(ch: str) -> bool:
    return "\U0001f1e6" <= ch <= "\U0001f1ff"


def _joins_previous(text: str, i: int) -> bool:
    """True when ``text[i]`` must stay with ``text[i-1]`` (cutting between them splits a sequence)."""
    if i <= 0 or i >= len(text):
        return False
    ch, prev = text[i], text[i - 1]
    if "\udc00" <= ch <= "\udfff" and "\ud800" <= prev <= "\udbff":  # surrogate pair
        return True
    if prev == "\r" and ch == "\n":
        return True
    if prev == "\u200d" or ch == "\u200d":  # zero-width joiner sequences
        return True
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Mc"):
        return True
    if "\ufe00" <= ch <= "\ufe0f" or "\U000e0100" <= ch <= "\U000e01ef":  # variation selectors
        return True
    if "\U0001f3fb" <= ch <= "\U0001f3ff":  # skin-tone modifiers
        return True
    if "\U000e0020" <= ch <= "\U000e007f":  # emoji tag sequences
        return True
    if _is_regional(ch) and _is_regional(prev):
        # a flag is a pair of regional indicators: cut only at an even count
        run = 0
        j = i - 1
        while j >= 0 and _is_regional(text[j]):
            run += 1
            j -= 1
        return run % 2 == 1
    return False


def safe_cut_back(text: str, i: int) -> int:
    """The largest cut point ``<= i`` that splits no character sequence.

    Moves back at most a few characters; in a pathological run (hundreds of
    combining marks) it cuts at ``i`` anyway, but never inside a surrogate pair.
    """
    j = i
    while j > 0 and _joins_previous(text, j) and i - j < _MAX_SHIFT:
        j -= 1
    if _joins_previous(text, j):
        j = i
        if 0 < j < len(text) and "\udc00" <= text[j] <= "\udfff":
            j -= 1
    return j


def safe_cut_forward(text: str, i: int) -> int:
    """The smallest cut point ``>= i`` that splits no character sequence."""
    j = i
    while j < len(text) and _joins_previous(text, j) and j - i < _MAX_SHIFT:
        j += 1
    if _joins_previous(text, j):
        j = i
        if 0 < j < len(text) and "\udc00" <= text[j] <= "\udfff":
            j += 1
    return j


def truncate_result(text: str, max_chars: int) -> str:
    """Return ``text`` unchanged if it has at most ``max_chars`` characters,
    else head + marker + tail, at most ``max_chars`` characters in all.

    The head gets the (rounded-up) half of what is left after the marker and
    two newlines, the tail the rest; both cut points are then moved so no
    character sequence is split.  Raises ValueError when ``max_chars`` is
    below :data:`MIN_MAX_CHARS` (no room for the marker).
    """
    if max_chars < MIN_MAX_CHARS:
        raise ValueError(f"max_chars must be at least {MIN_MAX_CHARS}, got {max_chars}")
    n = len(text)
    if n <= max_chars:
        return text
    # the marker only gets shorter when the numbers shrink, so size it for the upper bound
    room = max_chars - len(marker(n, max_chars, max_chars)) - 2
    head_n = (room + 1) // 2
    tail_n = room - head_n
    head_end = safe_cut_back(text, head_n)
    tail_start = safe_cut_forward(text, n - tail_n)
    head, tail = text[:head_end], text[tail_start:]
    return f"{head}\n{marker(n, len(head), len(tail))}\n{tail}"
