"""Agent registry (docs/architecture.md §6): immutable snapshots swapped in one assignment.

Readers (``by_name``, ``snapshot``, ``spawnable``) never lock: they read one
attribute holding an immutable state.  Writers (``load``, ``reload``,
``replace``, ``remove``) build the next state off to the side and assign it
once, under a lock so two writers cannot lose each other's change.  Loading
reads files, so it is synchronous: from Trio call it through
``trio.to_thread.run_sync(registry.reload, roots)``.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import threading
import time
import unicodedata
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar

import attrs

from ongridd.logs import get_logger
from ongridd.personas.frontmatter import FrontmatterProblem, read_file_stat, where
from ongridd.personas.parse import RESERVED_NAMES, Persona, parse_persona_text

__all__ = ["AgentRegistry", "FileRegistry", "LoadReport", "builtin_agents_dir", "markdown_files"]

log = get_logger(__name__)


@attrs.frozen
class LoadReport:
    """What one load or reload did.

    ``loaded``: files that produced a persona (or skill) in use; ``skipped``:
    files that could not be used (bad content, unreadable, or a duplicate name
    within one root); ``warnings``: every warning, each starting with a path.
    """

    loaded: int = 0
    skipped: int = 0
    warnings: tuple[str, ...] = ()


class _Named(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def source(self) -> str: ...


T = TypeVar("T", bound=_Named)


@attrs.frozen
class _State(Generic[T]):
    items: Mapping[str, T]  # MappingProxyType over a dict nobody else holds; sorted by name
    by_path: Mapping[str, T]  # source path → what that file last produced
    first_root: Mapping[str, T]  # what the first root produced (the built-ins)


def _empty_state() -> _State:
    return _State(MappingProxyType({}), MappingProxyType({}), MappingProxyType({}))


def _hidden(name: str) -> bool:
    return name.startswith(".")


def markdown_files(root: Path, warnings: list[str]) -> list[Path]:
    """The files a root contributes, in sorted path order.

    A folder gives every ``**/*.md`` below it (not following symlinked
    folders, skipping names that start with ``.``); a file gives itself
    (plugins register single files); a missing root gives nothing.  Folders
    that cannot be listed add a warning.
    """
    if not os.path.lexists(root):
        return []
    if not root.is_dir():
        return [root]
    found: list[Path] = []

    def onerror(exc: OSError) -> None:
        warnings.append(f"{exc.filename}: cannot list folder: {exc.strerror or exc}")

    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror, followlinks=False):
        dirnames[:] = [d for d in dirnames if not _hidden(d)]
        for fname in filenames:
            if fname.endswith(".md") and not _hidden(fname):
                found.append(Path(dirpath) / fname)
    return sorted(found)


def _realpath(path: str, real_dirs: dict[str, str]) -> str:
    """``os.path.realpath(path)``, resolving each folder once (``real_dirs``
    memoises folder → real folder): a file that is not a symlink is its real
    folder joined with its name."""
    folder, base = os.path.split(path)
    if not base or base in (".", "..") or os.path.islink(path):
        return os.path.realpath(path)
    real = real_dirs.get(folder)
    if real is None:
        real = real_dirs[folder] = os.path.realpath(folder)
    return os.path.join(real, base)


#: A file is trusted unchanged on a later load from ``stat`` alone (device,
#: inode, size, mtime, ctime) only if its last change was this long before it
#: was read: a write after the read then gets a later timestamp even on
#: file systems whose timestamps are coarse (2 s on FAT).  A file changed
#: more recently is read again and compared by content digest.
_SETTLED_NS = 2_000_000_000


def content_digest(raw: bytes) -> bytes:
    """The digest files are compared by (BLAKE2b, 20 bytes)."""
    return hashlib.blake2b(raw, digest_size=20).digest()


def _signature(st: os.stat_result) -> tuple[int, int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@attrs.frozen
class _CacheEntry(Generic[T]):
    """What one file gave when last read: ``signature`` (``None`` when the
    file had changed too recently to be trusted from ``stat``), the content
    digest, the parse options, the result and its warnings."""

    signature: tuple[int, int, int, int, int, int] | None
    digest: bytes
    opts: tuple
    obj: T | None
    warnings: tuple[str, ...]


def _nfc(name: str) -> str:
    return name if name.isascii() else unicodedata.normalize("NFC", name)


class FileRegistry(Generic[T]):
    """A registry of named objects loaded from markdown files (personas, skills).

    Subclasses give ``kind`` (a word for messages) and ``_parse_text(raw,
    path, **options) -> (obj | None, warnings)``.  Parse results are cached by
    file content and options, so a reload re-parses only changed files; a
    file whose ``stat`` (device, inode, mode, size, mtime, ctime) is the same
    as when it was read, and whose last change was well before that read, is
    not even read again.
    """

    kind = "item"

    def __init__(self) -> None:
        self._state: _State[T] = _empty_state()
        self._write_lock = threading.Lock()
        self._report = LoadReport()
        # path → what the file gave when last read; replaced whole on each load.
        self._cache: dict[str, _CacheEntry[T]] = {}

    # -- subclass hooks --------------------------------------------------------
    def _parse_text(self, raw: bytes, path: str, **options: Any) -> tuple[T | None, list[str]]:
        raise NotImplementedError

    def _parse_file(self, path: Path, options: Mapping[str, Any],
                    cache: dict[str, _CacheEntry[T]]) -> tuple[T | None, list[str]]:
        spath = str(path)
        opts = tuple(options.items())
        hit = self._cache.get(spath)
        if hit is not None and hit.signature is not None and hit.opts == opts:
            try:
                unchanged = _signature(os.stat(spath)) == hit.signature
            except OSError:
                unchanged = False
            if unchanged:  # same file, size and times as when it was read, long after its last change
                cache[spath] = hit
                return hit.obj, list(hit.warnings)
        started_ns = time.time_ns()
        got = read_file_stat(path)
        if isinstance(got, FrontmatterProblem):
            return None, [f"{where(spath, got.line)}: {got.message}; file skipped"]
        raw, st = got
        digest = content_digest(raw)
        if hit is not None and hit.digest == digest and hit.opts == opts:
            obj, warnings = hit.obj, list(hit.warnings)
        else:
            obj, warnings = self._parse_text(raw, spath, **options)
        settled = max(st.st_mtime_ns, st.st_ctime_ns) < started_ns - _SETTLED_NS
        cache[spath] = _CacheEntry(_signature(st) if settled else None, digest, opts, obj, tuple(warnings))
        return obj, warnings

    # -- reading (lock-free) ---------------------------------------------------
    def snapshot(self) -> Mapping[str, T]:
        """The current name → object mapping, immutable and sorted by name.

        A turn takes it once and keeps it: later loads never change it.
        """
        return self._state.items

    def by_name(self, name: str) -> T | None:
        """The object called ``name`` in the current snapshot, or ``None``."""
        if not isinstance(name, str):
            return None
        return self._state.items.get(_nfc(name))

    def names(self) -> list[str]:
        return list(self._state.items)

    def loaded_digest(self, path: str) -> bytes | None:
        """The :func:`content_digest` of the file at ``path`` as the registry last
        read it (or as :meth:`note_written` recorded it), or None."""
        hit = self._cache.get(path)
        return hit.digest if hit is not None else None

    def note_written(self, path: str, raw: bytes) -> None:
        """Record that the daemon wrote ``raw`` to ``path`` (its object replaced
        live): :meth:`loaded_digest` answers for it until the next load reads it."""
        self._cache[path] = _CacheEntry(None, content_digest(raw), ("written",), None, ())

    @property
    def last_report(self) -> LoadReport:
        """The report of the latest ``load``/``reload`` (an empty one before any)."""
        return self._report

    # -- loading ---------------------------------------------------------------
    def _build(self, roots: Sequence[Path], previous: Mapping[str, T] | None,
               options: Mapping[str, Any], builtin_first: bool) -> tuple[_State[T], LoadReport]:
        items: dict[str, T] = {}
        by_path: dict[str, T] = {}
        first_root: dict[str, T] = {}
        warnings: list[str] = []
        loaded = skipped = 0
        seen_files: set[str] = set()
        cache: dict[str, _CacheEntry[T]] = {}
        real_dirs: dict[str, str] = {}
        for index, root in enumerate(roots):
            root = Path(root)
            in_root: dict[str, T] = {}
            for path in markdown_files(root, warnings):
                real = _realpath(str(path), real_dirs)
                if real in seen_files:  # overlapping roots: a file counts once
                    continue
                seen_files.add(real)
                spath = str(path)
                obj, file_warnings = self._parse_file(path, options, cache)
                warnings.extend(file_warnings)
                counted_loaded = obj is not None
                if obj is None:
                    skipped += 1
                    kept = previous.get(spath) if previous is not None else None
                    if kept is None:
                        continue
                    warnings.append(f"{spath}: keeping the {self.kind} {kept.name!r} it produced last time")
                    obj = kept
                else:
                    loaded += 1
                by_path[spath] = obj
                if obj.name in in_root:
                    winner = in_root[obj.name].source
                    warnings.append(
                        f"{spath}: duplicate {self.kind} name {obj.name!r} (also in {winner}); "
                        f"{winner} is used, being first in sorted path order"
                    )
                    if counted_loaded:
                        loaded -= 1
                        skipped += 1
                    continue
                in_root[obj.name] = obj
            if index == 0 and builtin_first:
                first_root = dict(in_root)
            for name, obj in in_root.items():  # a later root overrides an earlier one by name
                earlier = items.get(name)
                if earlier is not None and earlier.source != obj.source:
                    log.info(f"{self.kind}_overridden", name=name, overridden=earlier.source, by=obj.source,
                             winner=obj.source)
            items.update(in_root)
        state = _State(
            MappingProxyType(dict(sorted(items.items()))),
            MappingProxyType(by_path),
            MappingProxyType(first_root),
        )
        self._cache = cache
        return state, LoadReport(loaded=loaded, skipped=skipped, warnings=tuple(warnings))

    def _swap_in(self, roots: Sequence[Path], *, keep_last: bool, options: Mapping[str, Any],
                 builtin_first: bool = False) -> LoadReport:
        previous = self._state.by_path if keep_last else None
        state, report = self._build(roots, previous, options, builtin_first)
        with self._write_lock:
            self._state = state
            self._report = report
        log.info(f"{self.kind}_registry_loaded", roots=[str(r) for r in roots], loaded=report.loaded,
                 skipped=report.skipped, warnings=len(report.warnings), names=len(state.items))
        return report

    # -- live edits ------------------------------------------------------------
    def _edit(self, fn: Callable[[dict[str, T], dict[str, T]], bool]) -> bool:
        with self._write_lock:
            state = self._state
            items = dict(state.items)
            by_path = dict(state.by_path)
            changed = fn(items, by_path)
            if changed:
                self._state = _State(MappingProxyType(dict(sorted(items.items()))),
                                     MappingProxyType(by_path), state.first_root)
            return changed

    def _replace(self, obj: T) -> None:
        def fn(items: dict[str, T], by_path: dict[str, T]) -> bool:
            items[obj.name] = obj
            if obj.source:
                by_path[obj.source] = obj
            return True

        self._edit(fn)


class AgentRegistry(FileRegistry[Persona]):
    """Personas by name (docs/architecture.md §6).

    ``builtin_root``: the built-in ``agents/`` folder (see
    :func:`builtin_agents_dir`), loaded first, or ``None`` for none.
    ``extra_paths``: persona files or folders registered by plugins
    (``ongrid_register_personas``), loaded after the built-ins and before the
    user roots.  Every load reads, in order, ``builtin_root``, ``extra_paths``,
    then the ``roots`` given; a later one overrides an earlier one by name.
    """

    kind = "persona"

    def __init__(self, builtin_root: Path | None = None, *, extra_paths: Sequence[Path] = ()):
        super().__init__()
        self.builtin_root = Path(builtin_root) if builtin_root is not None else None
        self.extra_paths: tuple[Path, ...] = tuple(Path(p) for p in extra_paths)

    def _parse_text(self, raw: bytes, path: str, **options: Any) -> tuple[Persona | None, list[str]]:
        return parse_persona_text(raw, path, **options)

    def all_roots(self, roots: Sequence[Path]) -> list[Path]:
        """The roots a load reads: built-in root, plugin paths, then ``roots``."""
        out = [self.builtin_root] if self.builtin_root is not None else []
        return out + list(self.extra_paths) + [Path(r) for r in roots]

    def _prepare(self, roots: Sequence[Path], known_tools: Collection[str] | None,
                 known_skills: Collection[str] | None, extra_paths: Sequence[Path] | None):
        if extra_paths is not None:
            self.extra_paths = tuple(Path(p) for p in extra_paths)
        options: dict[str, Any] = {"known_tools": None if known_tools is None else frozenset(known_tools),
                                   "known_skills": None if known_skills is None else frozenset(known_skills)}
        return self.all_roots(roots), options

    def load(self, roots: Sequence[Path], known_tools: Collection[str] | None = None, *,
             known_skills: Collection[str] | None = None,
             extra_paths: Sequence[Path] | None = None) -> LoadReport:
        """Load every persona from scratch and swap the new snapshot in.

        ``roots``: folders (recursive ``**/*.md``) or files, after the
        built-in root and the plugin paths.  ``known_tools``: registered tool
        names for unknown-tool warnings (``None`` skips the check; the control
        tools always count as known).  ``known_skills``: likewise for
        ``skills``.  ``extra_paths``: replaces :attr:`extra_paths` when given.
        Returns the report (also kept as :attr:`last_report`).  Never raises
        for bad files or missing roots.
        """
        roots_all, options = self._prepare(roots, known_tools, known_skills, extra_paths)
        return self._swap_in(roots_all, keep_last=False, options=options,
                             builtin_first=self.builtin_root is not None)

    def reload(self, roots: Sequence[Path], known_tools: Collection[str] | None = None, *,
               known_skills: Collection[str] | None = None,
               extra_paths: Sequence[Path] | None = None) -> LoadReport:
        """Like :meth:`load`, but a file that produced a persona before and now
        fails keeps that persona (found by its path), with a warning.

        The new snapshot is built off to the side and swapped in one
        assignment: a reader sees either the old or the new one, whole.
        """
        roots_all, options = self._prepare(roots, known_tools, known_skills, extra_paths)
        return self._swap_in(roots_all, keep_last=True, options=options,
                             builtin_first=self.builtin_root is not None)

    def replace(self, persona: Persona) -> None:
        """Insert or replace ``persona`` by name in the live registry (upsert).

        Used after a user agent was written (``PUT /api/agents/{name}``): the
        next snapshot has it.  Snapshots already taken are not changed.
        """
        if not isinstance(persona, Persona):
            raise TypeError(f"replace() needs a Persona, got {type(persona).__name__}")
        self._replace(persona)

    def remove(self, name: str) -> bool:
        """Remove the persona ``name`` from the live registry.

        Built-in personas can only be overridden: removing an override
        restores the built-in one, and removing a built-in persona that is not
        overridden changes nothing.  Returns True when the registry changed.
        """
        name = _nfc(name) if isinstance(name, str) else name

        def fn(items: dict[str, Persona], _by_path: dict[str, Persona]) -> bool:
            current = items.get(name)
            if current is None:
                return False
            builtin = self._state.first_root.get(name) if self.builtin_root is not None else None
            if builtin is not None:
                if current is builtin:
                    return False
                items[name] = builtin
                return True
            del items[name]
            return True

        return self._edit(fn)

    def builtin(self, name: str) -> Persona | None:
        """The built-in persona called ``name`` from the latest load, or ``None``."""
        if self.builtin_root is None or not isinstance(name, str):
            return None
        return self._state.first_root.get(_nfc(name))

    def spawnable(self, snapshot: Mapping[str, Persona] | None = None) -> list[Persona]:
        """Personas a coordinator may dispatch, sorted by name.

        Every persona of ``snapshot`` (default: the current one) except the
        reserved roles ``default`` and ``reviewer``.
        """
        snap = self.snapshot() if snapshot is None else snapshot
        return sorted((p for p in snap.values() if p.name not in RESERVED_NAMES), key=lambda p: p.name)


def builtin_agents_dir() -> Path:
    """The folder of the built-in persona files.

    Installed (non-editable wheel): ``agents/`` is packaged as
    ``ongridd/builtin_agents``.  Source checkout or editable install: the
    ``agents/`` folder next to the ``ongridd`` package directory.  The path
    returned may not exist (a broken install); loading it then gives an empty
    registry.
    """
    try:
        packaged = importlib.resources.files("ongridd") / "builtin_agents"
        if isinstance(packaged, Path) and packaged.is_dir():
            return packaged
    except (ModuleNotFoundError, OSError, TypeError):  # pragma: no cover - exotic importers
        pass
    import ongridd

    return Path(ongridd.__file__).resolve().parent.parent / "agents"
