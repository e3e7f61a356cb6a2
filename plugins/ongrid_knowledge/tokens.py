"""Tokens for BM25 over runbooks written in English, Chinese, Japanese or Korean.

- Text is NFKC-normalised (full-width ``ＮＧＩＮＸ`` → ``nginx``) and case-folded.
- A run of CJK characters becomes its overlapping character bigrams
  (``磁盘已满`` → ``磁盘 盘已 已满``), the usual approach for scripts without
  spaces (as Lucene's CJK analyzer does); a lone CJK character is kept as is.
- Other words (letters and digits) drop English stop words and single
  letters, then are stemmed with the Snowball English stemmer (PyStemmer), so
  ``restarting`` and ``restart`` meet.
"""

from __future__ import annotations

import functools
import re
import threading
import unicodedata

import Stemmer

_CJK_RANGES = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uac00-\ud7af"  # hangul syllables
    "\u1100-\u11ff\u3130-\u318f"  # hangul jamo
)
_TOKEN_RE = re.compile(rf"[{_CJK_RANGES}]+|(?:(?![{_CJK_RANGES}])[^\W_])+")
_CJK_RUN_RE = re.compile(rf"^[{_CJK_RANGES}]+$")
_local = threading.local()  # PyStemmer objects are not thread-safe: one per thread


@functools.cache
def _stopwords() -> frozenset[str]:
    # importing bm25s costs ~0.3 s: only when the first text is tokenised, not at daemon start
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


def _stemmer() -> Stemmer.Stemmer:
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer


def words(text: str) -> list[str]:
    """The raw words of ``text`` (normalised, case-folded): latin words and CJK runs."""
    return _TOKEN_RE.findall(unicodedata.normalize("NFKC", text).casefold())


def tokens_of_word(word: str) -> list[str]:
    """The index tokens of one word from :func:`words`."""
    if _CJK_RUN_RE.match(word):
        if len(word) == 1:
            return [word]
        return [word[i:i + 2] for i in range(len(word) - 1)]
    if word in _stopwords() or (len(word) == 1 and not word.isdigit()):
        return []
    return [_stemmer().stemWord(word)]


def tokenize(text: str) -> list[str]:
    """The BM25 tokens of ``text``, in order, repeats kept (term frequency counts)."""
    out: list[str] = []
    for word in words(text):
        out.extend(tokens_of_word(word))
    return out
