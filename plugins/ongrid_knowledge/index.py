"""A BM25 index (bm25s) over the markdown passages of the knowledge folders.

The index is built on the first search and rebuilt when the set of files, a
file's modification time or its size changes (checked on every search; a
stat walk, cheap next to a rebuild).  Folders are scanned recursively for
``*.md``.  Files that cannot be used are skipped with a note: not UTF-8, too
large, unreadable.  A missing folder is a note too, never an error.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from ongrid_knowledge.passages import SECTION_SEP, Passage, split_markdown
from ongrid_knowledge.tokens import tokenize, tokens_of_word, words

MAX_NOTES_SHOWN = 8


@attrs.frozen(kw_only=True)
class Hit:
    """One search result: the passage, its BM25 score and the query words it contains."""

    passage: Passage
    score: float
    matched_terms: tuple[str, ...]


@attrs.frozen(kw_only=True)
class SearchResult:
    """``hits`` best first; ``files``/``passages`` indexed; ``notes`` about skipped input."""

    hits: tuple[Hit, ...]
    files: int
    passages: int
    notes: tuple[str, ...] = ()


@attrs.define
class _Built:
    signature: tuple[Any, ...]
    passages: list[Passage]
    token_sets: list[frozenset[str]]  # per passage
    doc_of: list[int]  # passage → document number
    doc_token_sets: list[frozenset[str]]  # per document: title and tags
    passage_index: Any  # bm25s.BM25 over passages (None when there are none)
    doc_index: Any  # bm25s.BM25 over document titles and tags
    files: int
    notes: list[str]


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def _scan(dirs: Sequence[str], max_files: int,
          max_bytes: int | None = None) -> tuple[tuple[Any, ...], list[tuple[Path, str]], list[str]]:
    """(signature, [(file, shown path)], notes) for the folders, in a stable order.

    Only regular files (after following symlinks) are kept: a FIFO would
    block the read forever and a link to ``/dev/zero`` would never end.
    Files larger than ``max_bytes`` are skipped here, before any read."""
    notes: list[str] = []
    files: list[tuple[Path, str]] = []
    signature: list[Any] = []
    for folder in dirs:
        root = Path(folder)
        if not root.is_dir():
            notes.append(f"knowledge folder {folder} does not exist" if not root.exists()
                         else f"knowledge folder {folder} is not a folder")
            signature.append((folder, None))
            continue
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.lower().endswith(".md") and not name.startswith("."):
                    found.append(Path(dirpath) / name)
        for file in found:
            if len(files) >= max_files:
                notes.append(f"more than {max_files} markdown files; the rest of {folder} is not indexed")
                break
            shown = str(Path(folder) / file.relative_to(root))
            try:
                st = os.stat(file)  # follows symlinks: the target is what would be read
            except OSError as exc:
                notes.append(f"skipped {shown}: {exc.strerror or exc}")
                continue
            if not stat.S_ISREG(st.st_mode):
                notes.append(f"skipped {shown}: {_kind(st.st_mode)}, not a regular file")
                signature.append((str(file), "not-regular", st.st_mode))
                continue
            if max_bytes is not None and st.st_size > max_bytes:
                notes.append(f"skipped {shown}: {st.st_size} bytes, more than the {max_bytes} allowed")
                signature.append((str(file), st.st_mtime_ns, st.st_size))
                continue
            files.append((file, shown))
            signature.append((str(file), st.st_mtime_ns, st.st_size))
    return tuple(signature), files, notes


def _read(file: Path, shown: str, max_bytes: int) -> tuple[str | None, str | None]:
    """(text, note): the file's text, or None and why it was skipped.

    Opened non-blocking (a FIFO swapped in after the scan cannot hang the
    read), checked to be a regular file on the open descriptor, and read
    at most ``max_bytes`` + 1 bytes (a file that grew is skipped)."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return None, f"skipped {shown}: cannot read it ({exc.strerror or exc})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, f"skipped {shown}: {_kind(st.st_mode)}, not a regular file"
        if st.st_size > max_bytes:
            return None, f"skipped {shown}: {st.st_size} bytes, more than the {max_bytes} allowed"
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        return None, f"skipped {shown}: cannot read it ({exc.strerror or exc})"
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        return None, f"skipped {shown}: more than the {max_bytes} bytes allowed"
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        return None, f"skipped {shown}: not valid UTF-8 (byte 0x{data[exc.start]:02X} at offset {exc.start})"


def _bm25(corpus: list[list[str]]) -> Any:
    import bm25s  # imported on first build: it costs ~0.3 s at start-up

    retriever = bm25s.BM25(method="lucene")
    retriever.index(corpus, show_progress=False)
    return retriever


def _scores(retriever: Any, query_tokens: list[str], size: int) -> list[float]:
    known = [t for t in query_tokens if t in retriever.vocab_dict]
    if not known:
        return [0.0] * size
    return [float(x) for x in retriever.get_scores(known)]


def _build(signature: tuple[Any, ...], files: list[tuple[Path, str]], scan_notes: list[str], *,
           max_file_bytes: int, max_passage_chars: int) -> _Built:
    notes = list(scan_notes)
    passages: list[Passage] = []
    doc_of: list[int] = []
    doc_tokens: list[list[str]] = []
    used_files = 0
    for file, shown in files:
        text, note = _read(file, shown, max_file_bytes)
        if note:
            notes.append(note)
            continue
        used_files += 1
        doc = split_markdown(text or "", shown, default_title=file.stem, max_chars=max_passage_chars)
        notes.extend(doc.notes)
        if not doc.passages:
            continue
        doc_tokens.append(tokenize(" ".join((doc.title, *doc.passages[0].tags))))
        passages.extend(doc.passages)
        doc_of.extend([len(doc_tokens) - 1] * len(doc.passages))
    corpus = [tokenize(" ".join((_sub_sections(p), p.text))) for p in passages]
    return _Built(signature=signature, passages=passages, token_sets=[frozenset(t) for t in corpus],
                  doc_of=doc_of, doc_token_sets=[frozenset(t) for t in doc_tokens],
                  passage_index=_bm25(corpus) if passages else None,
                  doc_index=_bm25(doc_tokens) if passages else None,
                  files=used_files, notes=notes)


def _sub_sections(passage: Passage) -> str:
    """The heading path below the document title (the title is scored per document)."""
    heads = passage.section.split(SECTION_SEP)
    return " ".join(heads[1:] if heads and heads[0] == passage.title else heads)


@attrs.define
class KnowledgeBase:
    """Searchable runbooks from ``dirs`` (paths as configured, relative to the working folder).

    ``max_files``: files indexed at most; ``max_file_bytes``: larger files are
    skipped; ``max_passage_chars``: sections are cut into passages of about
    this size.
    """

    dirs: tuple[str, ...]
    max_files: int = 2000
    max_file_bytes: int = 1_048_576
    max_passage_chars: int = 2000
    _built: _Built | None = attrs.field(default=None, init=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)

    async def search(self, query: str, top_k: int) -> SearchResult:
        """The ``top_k`` best passages for ``query`` (only those scoring above 0).

        Rebuilds the index first when the files changed.  File I/O and
        scoring run in a worker thread; searches are serialised.  Cancelling
        abandons the thread at once (a stuck read on a hung filesystem can
        never block the caller's cancellation or the daemon's shutdown); the
        abandoned thread finishes on its own and its result is dropped.
        """
        async with self._lock:
            return await trio.to_thread.run_sync(self._search_sync, query, top_k, abandon_on_cancel=True)

    def _search_sync(self, query: str, top_k: int) -> SearchResult:
        signature, files, scan_notes = _scan(self.dirs, self.max_files, self.max_file_bytes)
        if self._built is None or self._built.signature != signature:
            self._built = _build(signature, files, scan_notes, max_file_bytes=self.max_file_bytes,
                                 max_passage_chars=self.max_passage_chars)
        built = self._built
        notes = _bounded_notes(built.notes)
        if not built.passages:
            notes.append("no runbooks found in " + ", ".join(self.dirs))
            return SearchResult(hits=(), files=built.files, passages=0, notes=tuple(notes))
        query_words = [(w, tokens_of_word(w)) for w in dict.fromkeys(words(query))]
        query_tokens = [t for _, toks in query_words for t in toks]
        passage_scores = _scores(built.passage_index, query_tokens, len(built.passages))
        doc_scores = _scores(built.doc_index, query_tokens, len(built.doc_token_sets))
        scores = [p + doc_scores[built.doc_of[i]] for i, p in enumerate(passage_scores)]
        if not any(scores):
            notes.append("none of the query's words occur in the runbooks")
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        hits = []
        for i in order[:top_k]:
            if scores[i] <= 0:
                break
            tokens = built.token_sets[i] | built.doc_token_sets[built.doc_of[i]]
            matched = tuple(w for w, toks in query_words if any(t in tokens for t in toks))
            hits.append(Hit(passage=built.passages[i], score=round(scores[i], 3), matched_terms=matched))
        return SearchResult(hits=tuple(hits), files=built.files, passages=len(built.passages), notes=tuple(notes))


def _bounded_notes(notes: list[str]) -> list[str]:
    if len(notes) <= MAX_NOTES_SHOWN:
        return list(notes)
    return notes[:MAX_NOTES_SHOWN] + [f"... and {len(notes) - MAX_NOTES_SHOWN} more skipped or noted files"]
