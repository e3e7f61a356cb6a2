"""The marketplace index (docs/architecture.md §14) and the package hash rules.

``marketplace/index.yaml``::

    plugins:
      - name: ongrid-example-diskreport      # also the folder <state_dir>/plugins/<name>
        version: 0.1.0
        description: One line shown by `ongrid marketplace list`.
        source: dist/ongrid_example_diskreport-0.1.0-py3-none-any.whl   # relative to the index
        sha256: 5f0c…                         # 64 hex digits

``source`` is a wheel, an sdist, or a folder holding a buildable project.
``sha256`` is the SHA-256 of the file, or for a folder the *folder hash*
(:func:`folder_sha256`).  Every key is required, no other key is allowed;
``name`` is the distribution name the package declares (compared after
PEP 503 normalisation) and must be usable as a folder name.

**Folder hash.**  SHA-256 over the lines ``<relative path>\\0<sha256 hex of
the file>\\n``, one per regular file, sorted by relative path (``/``
separators, UTF-8, sorted by code point).  Left out — and therefore never
copied into the package that is installed — are build by-products, and
only these: folders named ``__pycache__`` or ending in ``.egg-info`` and
files ending in ``.pyc``/``.pyo`` at any depth, and the top-level folders
``build``, ``dist`` and ``.git``.  Anything else that is not a regular file
or a folder (a symlink, a socket) is an error, not silently skipped.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import attrs

from ongridd.errors import MarketplaceError
from ongridd.typenames import type_name
from ongridd.yamlbounds import read_yaml_file

__all__ = [
    "IndexEntry",
    "MarketplaceIndex",
    "file_sha256",
    "folder_files",
    "folder_sha256",
    "index_path_for",
    "load_index",
    "normalize_dist_name",
    "source_sha256",
    "valid_plugin_name",
]

ENTRY_KEYS = ("name", "version", "description", "source", "sha256")
NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?\Z")
SHA256_RE = re.compile(r"^[0-9a-fA-F]{64}\Z")
#: excluded at any depth (folders)
EXCLUDED_DIR_NAMES = ("__pycache__",)
EXCLUDED_DIR_SUFFIXES = (".egg-info",)
#: excluded at any depth (files)
EXCLUDED_FILE_SUFFIXES = (".pyc", ".pyo")
#: excluded at the top level of the folder only
EXCLUDED_TOP_DIRS = ("build", "dist", ".git")
_CHUNK = 1 << 20


def valid_plugin_name(name: Any) -> bool:
    """True when ``name`` can name a plugin folder: letters, digits, ``.-_``,
    starting and ending with a letter or digit, at most 100 characters."""
    return isinstance(name, str) and bool(NAME_RE.match(name))


def normalize_dist_name(name: str) -> str:
    """PEP 503 normalisation: ``Ongrid_Example.Disk`` → ``ongrid-example-disk``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@attrs.frozen(kw_only=True)
class IndexEntry:
    """One installable package.  ``source`` as written (relative to the
    index); ``line``: 1-based line of the entry in the index file."""

    name: str
    version: str
    description: str
    source: str
    sha256: str
    index_path: Path
    line: int | None = None

    @property
    def source_path(self) -> Path:
        """The source's absolute path (resolved against the index's folder)."""
        return (self.index_path.parent / self.source).resolve()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "description": self.description,
                "source": self.source, "sha256": self.sha256}


@attrs.frozen
class MarketplaceIndex:
    """``path``: the index file; ``entries``: in file order."""

    path: Path
    entries: tuple[IndexEntry, ...]

    def get(self, name: str) -> IndexEntry | None:
        """The entry called ``name`` (exact, then PEP 503-normalised match), or None."""
        for entry in self.entries:
            if entry.name == name:
                return entry
        if isinstance(name, str):
            wanted = normalize_dist_name(name)
            for entry in self.entries:
                if normalize_dist_name(entry.name) == wanted:
                    return entry
        return None

    def names(self) -> list[str]:
        return [e.name for e in self.entries]


def _where(path: Path, node: Any, key: Any = None) -> str:
    """``file:line`` of a ruamel node (or of one key of a mapping node)."""
    line = None
    lc = getattr(node, "lc", None)
    if lc is not None:
        try:
            line = (lc.key(key)[0] if key is not None and key in node else lc.line) + 1
        except (AttributeError, KeyError, TypeError, IndexError):
            line = None
    return f"{path}:{line}" if line else str(path)


def _entry(path: Path, plugins: Any, i: int, item: Any, seen: dict[str, str], problems: list[str]) -> IndexEntry | None:
    """Validate ``plugins[i]``: an :class:`IndexEntry`, or None with its problems appended to ``problems``.

    ``seen``: normalised package name → where it was first listed (updated).
    """
    label = f"plugins[{i}]"
    if not isinstance(item, dict):
        problems.append(f"{_where(path, plugins)}: {label} must be an object, got {type_name(item)}")
        return None
    at = _where(path, item)
    bad = False
    for key in item:
        if key not in ENTRY_KEYS:
            problems.append(f"{_where(path, item, key)}: {label}: unknown key {str(key)!r} "
                            f"(allowed: {', '.join(ENTRY_KEYS)})")
            bad = True
    values: dict[str, str] = {}
    for key in ENTRY_KEYS:
        value = item.get(key)
        if value is None:
            problems.append(f"{at}: {label}: missing required key {key!r}")
            bad = True
        elif not isinstance(value, str):
            if isinstance(value, bool):
                got = f"the boolean {str(value).lower()} (quote it)"
            elif isinstance(value, (int, float)):
                got = f"the number {value} (quote it)"
            else:
                got = f"an {type_name(value)}" if isinstance(value, (list, dict)) else f"a {type_name(value)}"
            problems.append(f"{_where(path, item, key)}: {label}.{key} must be a string, got {got}")
            bad = True
        elif not value.strip():
            problems.append(f"{_where(path, item, key)}: {label}.{key} is empty")
            bad = True
        else:
            values[key] = str(value).strip()
    if bad:
        return None
    name = values["name"]
    if not valid_plugin_name(name):
        problems.append(f"{_where(path, item, 'name')}: {label}.name {name!r} is not a valid package name "
                        "(letters, digits, '.', '-', '_'; starting and ending with a letter or digit)")
        return None
    if not SHA256_RE.match(values["sha256"]):
        problems.append(f"{_where(path, item, 'sha256')}: {label}.sha256 must be 64 hex digits, "
                        f"got {values['sha256']!r}")
        return None
    source = values["source"]
    if os.path.isabs(source) or PurePosixPath(source).is_absolute():
        problems.append(f"{_where(path, item, 'source')}: {label}.source must be relative to the index, "
                        f"got {source!r}")
        return None
    norm = normalize_dist_name(name)
    if norm in seen:
        problems.append(f"{_where(path, item, 'name')}: {label}: duplicate package name {name!r} "
                        f"(also at {seen[norm]})")
        return None
    seen[norm] = at
    line = getattr(getattr(item, "lc", None), "line", None)
    return IndexEntry(name=name, version=values["version"], description=values["description"],
                      source=source, sha256=values["sha256"].lower(), index_path=path,
                      line=None if line is None else line + 1)


def load_index(path: str | os.PathLike) -> MarketplaceIndex:
    """Read and validate an index file.

    Raises MarketplaceError naming the file, the line and the entry for
    every problem found (all of them, one per line of the message): the
    file missing, unreadable, not a regular file or over 1 MiB, invalid YAML, a top level that is not a
    mapping with a ``plugins`` list, a missing/unknown/mistyped key, an
    invalid name, version or sha256, a source that is absolute or empty,
    or two entries with the same (normalised) name.
    """
    path = Path(path).absolute()
    data = read_yaml_file(path, what="marketplace index", error=MarketplaceError, typ="rt",
                          not_found_hint=" (config key marketplace.index)")
    if data is None:
        data = {"plugins": []}
    if not isinstance(data, dict) or set(data) - {"plugins"}:
        extra = sorted(str(k) for k in data) if isinstance(data, dict) else type_name(data)
        raise MarketplaceError(f"{path}: the index must be a mapping with the single key 'plugins' "
                               f"(a list of packages), got {extra}")
    plugins = data.get("plugins")
    if plugins is None:
        plugins = []
    if not isinstance(plugins, list):
        raise MarketplaceError(f"{_where(path, data, 'plugins')}: 'plugins' must be an array, "
                               f"got {type_name(plugins)}")
    problems: list[str] = []
    entries: list[IndexEntry] = []
    seen: dict[str, str] = {}
    for i, item in enumerate(plugins):
        entry = _entry(path, plugins, i, item, seen, problems)
        if entry is not None:
            entries.append(entry)
    if problems:
        raise MarketplaceError(f"invalid marketplace index {path}:\n  " + "\n  ".join(problems))
    return MarketplaceIndex(path, tuple(entries))


# ---- hashes ----------------------------------------------------------------


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 (hex) of a file's bytes.  Raises OSError."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _excluded(rel_parts: tuple[str, ...], is_dir: bool) -> bool:
    name = rel_parts[-1]
    if is_dir:
        if name in EXCLUDED_DIR_NAMES or name.endswith(EXCLUDED_DIR_SUFFIXES):
            return True
        return len(rel_parts) == 1 and name in EXCLUDED_TOP_DIRS
    return name.endswith(EXCLUDED_FILE_SUFFIXES)


#: the most files and folders, and bytes of files, a package folder may hold: a source that names a
#: large tree by mistake (``../../..``) is refused rather than hashed whole, holding the install lock
FOLDER_MAX_ENTRIES = 20_000
FOLDER_MAX_BYTES = 256 * 1024 * 1024


def folder_files(root: str | os.PathLike) -> list[str]:
    """The relative paths (``/``-separated, sorted) the folder hash covers.

    Raises MarketplaceError for a symlink or a special file (naming it), when
    ``root`` is not a folder, and past :data:`FOLDER_MAX_ENTRIES` entries or
    :data:`FOLDER_MAX_BYTES` of files; OSError when a folder cannot be listed.
    """
    root = Path(root)
    if not root.is_dir() or root.is_symlink():
        raise MarketplaceError(f"{root} is not a folder")
    out: list[str] = []
    seen = [0, 0]  # entries, bytes

    def walk(folder: Path, parts: tuple[str, ...]) -> Iterator[str]:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        seen[0] += len(entries)
        if seen[0] > FOLDER_MAX_ENTRIES:
            raise MarketplaceError(f"{root}: more than {FOLDER_MAX_ENTRIES:,} files and folders: not a package folder")
        for entry in entries:
            rel = parts + (entry.name,)
            st = os.lstat(entry.path)
            if stat.S_ISLNK(st.st_mode):
                raise MarketplaceError(f"{entry.path}: symbolic links are not allowed in a package folder")
            if stat.S_ISDIR(st.st_mode):
                if not _excluded(rel, True):
                    yield from walk(Path(entry.path), rel)
            elif stat.S_ISREG(st.st_mode):
                if not _excluded(rel, False):
                    seen[1] += st.st_size
                    if seen[1] > FOLDER_MAX_BYTES:
                        raise MarketplaceError(f"{root}: more than {FOLDER_MAX_BYTES >> 20} MiB of files: "
                                               "not a package folder")
                    yield "/".join(rel)
            else:
                raise MarketplaceError(f"{entry.path}: not a regular file or folder")

    out.extend(walk(root, ()))
    return sorted(out)


def folder_sha256(root: str | os.PathLike) -> str:
    """The folder hash of ``root`` (see the module docstring).  Raises
    MarketplaceError (symlink, special file) or OSError."""
    root = Path(root)
    digest = hashlib.sha256()
    for rel in folder_files(root):
        digest.update(f"{rel}\0{file_sha256(root / rel)}\n".encode())
    return digest.hexdigest()


def source_sha256(path: str | os.PathLike) -> str:
    """``file_sha256`` for a file, ``folder_sha256`` for a folder.  Raises
    MarketplaceError when ``path`` does not exist or is neither."""
    path = Path(path)
    if path.is_symlink() and path.is_dir():
        raise MarketplaceError(f"{path}: a package folder may not be a symbolic link")
    if path.is_dir():
        return folder_sha256(path)
    if path.is_file():
        return file_sha256(path)
    raise MarketplaceError(f"package source not found: {path}")


#: what an unset ``marketplace.index`` means (relative to the working directory)
DEFAULT_INDEX = "marketplace/index.yaml"


def index_path_for(config: Any, warn: Callable[[str], None] | None = None) -> Path:
    """The index file the configuration names (``marketplace.index``).

    A relative path is relative to the working directory.  When the value
    is ``marketplace/index.yaml`` (also what an unset ``marketplace.index``
    means) and no such file exists there, the index of the source checkout
    the daemon runs from is used if there is one (else the one packaged in
    the wheel), so the examples work from any folder.  The fallback is said
    through ``warn(sentence)`` (default: a ``marketplace_index_fallback``
    log warning) only when the operator set ``marketplace.index``; with the
    key unset it is logged at debug level (``marketplace_index_builtin``).
    """
    configured = config.marketplace.index
    explicit = configured is not None
    if configured is None:
        configured = DEFAULT_INDEX
    path = Path(configured)
    if path.is_absolute() or path.exists():
        return path.absolute()
    if configured == DEFAULT_INDEX:
        checkout = Path(__file__).resolve().parents[2] / "marketplace" / "index.yaml"
        packaged = Path(__file__).resolve().parents[1] / "builtin_marketplace" / "index.yaml"
        for builtin in (checkout, packaged):  # packaged: an installed wheel ships the example index
            if builtin.is_file():
                from ongridd.logs import get_logger

                if not explicit:
                    get_logger(__name__).debug("marketplace_index_builtin", used=str(builtin))
                    return builtin
                sentence = (f"marketplace.index {configured!r} is relative and there is no such file in "
                            f"{Path.cwd()}; using the built-in index {builtin} instead (set marketplace.index "
                            "to an absolute path to use your own)")
                if warn is not None:
                    warn(sentence)
                else:
                    get_logger(__name__).warning("marketplace_index_fallback", configured=configured,
                                                 cwd=str(Path.cwd()), used=str(builtin), message=sentence)
                return builtin
    return path.absolute()
