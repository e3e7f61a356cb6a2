"""Installed marketplace packages: running pip into a plugin folder, reading
what a folder holds, and the "already imported in this process" rule.

Python cannot unload a module.  After an uninstall the plugin's modules stay
in ``sys.modules`` (unused), so this module remembers, per plugin folder,
which version (and which package hash) this process imported from it:

* installing the **same** version (and, when known, the same sha256) again
  reuses the module already in memory: the files come back to the same
  folder, ``importlib`` finds the module in ``sys.modules`` and the plugin's
  hooks are called again;
* installing **another** version while the old one is imported is refused
  with a message saying that a restart is needed;
* a package whose top-level module is already imported from somewhere
  else (the daemon's environment, a built-in plugin, another plugin) or
  exists in the daemon's environment would be shadowed — plugin folders
  are put at the end of ``sys.path`` — and is refused.

Only the plugin's own distribution is checked this way.  Its dependencies
are installed into its folder too (``pip install --target``), but a
dependency the daemon's environment already has is taken from there, since
plugin folders come last on ``sys.path``.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import attrs
import trio

from ongridd.errors import MarketplaceError
from ongridd.logs import get_logger
from ongridd.marketplace.index import normalize_dist_name
from ongridd.plugins.manager import ENTRY_POINT_GROUP
from ongridd.secretset import PIP_ENV_KEYS, PIP_ENV_PREFIXES, scrubbed_env

__all__ = [
    "InstalledPackage",
    "check_module_conflicts",
    "forget_loaded",
    "inspect_folder",
    "loaded_version",
    "pip_install",
    "remember_loaded",
]

log = get_logger(__name__)

PIP_TIMEOUT_S = 240.0
_TAIL_CHARS = 2000


@attrs.frozen(kw_only=True)
class InstalledPackage:
    """The plugin distribution found in a folder.

    ``dist_name``/``version``: from its metadata.  ``entry_points``: names
    of its ``ongrid`` entry points (the plugin names).  ``modules``: its
    top-level import names.  ``others``: ``name version`` of the other
    distributions in the folder (its dependencies).
    """

    folder: Path
    dist_name: str
    version: str
    entry_points: tuple[str, ...]
    modules: tuple[str, ...]
    others: tuple[str, ...] = ()


def _top_level_modules(dist: md.Distribution) -> list[str]:
    names: set[str] = set()
    for f in dist.files or ():
        parts = Path(str(f)).parts
        if not parts or parts[0] in ("..", "bin", "__pycache__"):
            continue
        first = parts[0]
        if first.endswith((".dist-info", ".egg-info", ".data")):
            continue
        if len(parts) == 1:
            if first.endswith(".py"):
                name = first[:-3]
            elif first.endswith((".so", ".pyd")):
                name = first.split(".", 1)[0]
            else:
                continue
        else:
            name = first
        if name.isidentifier():
            names.add(name)
    if not names:
        top = dist.read_text("top_level.txt") or ""
        names.update(n.strip() for n in top.splitlines() if n.strip().isidentifier())
    return sorted(names)


def inspect_folder(folder: Path, expected_name: str | None = None) -> InstalledPackage:
    """Read the distributions pip put in ``folder``.

    The plugin distribution is the one named ``expected_name`` (PEP 503
    normalised) when given, else the only one with an ``ongrid`` entry point.
    Raises MarketplaceError when it is missing, has no ``ongrid`` entry
    point, or is ambiguous.
    """
    folder = Path(folder)
    dists = list(md.distributions(path=[str(folder)]))
    if not dists:
        raise MarketplaceError(f"no installed distribution found in {folder}")
    if expected_name is not None:
        wanted = normalize_dist_name(expected_name)
        chosen = [d for d in dists if normalize_dist_name(d.metadata["Name"] or "") == wanted]
        if not chosen:
            found = ", ".join(sorted(f"{d.metadata['Name']} {d.version}" for d in dists))
            raise MarketplaceError(f"the package does not provide a distribution named {expected_name!r} "
                                   f"(it installed: {found})")
    else:
        chosen = [d for d in dists if any(ep.group == ENTRY_POINT_GROUP for ep in d.entry_points)]
        if len(chosen) != 1:
            raise MarketplaceError(f"{folder}: expected exactly one distribution with an '{ENTRY_POINT_GROUP}' "
                                   f"entry point, found {len(chosen)}")
    dist = chosen[0]
    eps = tuple(sorted(ep.name for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP))
    if not eps:
        raise MarketplaceError(f"{dist.metadata['Name']} {dist.version} has no '{ENTRY_POINT_GROUP}' entry point: "
                               f"it is not an Ongrid plugin (see docs/plugins.md)")
    others = tuple(sorted(f"{d.metadata['Name']} {d.version}" for d in dists if d is not dist))
    return InstalledPackage(folder=folder, dist_name=str(dist.metadata["Name"]), version=str(dist.version),
                            entry_points=eps, modules=tuple(_top_level_modules(dist)), others=others)


# ---- pip -----------------------------------------------------------------------


def _tail(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    return text if len(text) <= _TAIL_CHARS else "…" + text[-_TAIL_CHARS:]


def wheel_has_dependencies(wheel: Path) -> bool:
    """True unless ``wheel``'s METADATA declares no ``Requires-Dist`` (any
    unreadable wheel counts as having some: pip will say what is wrong)."""
    import email.parser
    import zipfile

    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(names) != 1:
                return True
            meta = email.parser.BytesHeaderParser().parsebytes(zf.read(names[0]))
    except (OSError, zipfile.BadZipFile, ValueError):
        return True
    return bool(meta.get_all("Requires-Dist"))


#: the most a package may take on disk once installed, its dependencies included (bytes), and the
#: most entries (files and folders): the plugins folder shares the disk with the database
MAX_INSTALLED_BYTES = 256 * 1024 * 1024
MAX_INSTALLED_FILES = 20_000
#: what one folder is counted as taking (a block), so that a tree of empty folders counts too
FOLDER_BYTES = 4096


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 1024:,.0f} KiB"


def wheel_unpacked_problem(wheel: Path) -> str | None:
    """Why ``wheel`` may not be unpacked — more than :data:`MAX_INSTALLED_BYTES` once
    uncompressed, or more than :data:`MAX_INSTALLED_FILES` files and the folders their paths
    make, as its zip directory declares them (an entry cannot unpack to more than it declares;
    a folder counts :data:`FOLDER_BYTES`) — or None.  An unreadable
    wheel gives None: pip says what is wrong with it."""
    import zipfile

    try:
        with zipfile.ZipFile(wheel) as zf:
            infos = zf.infolist()
    except (OSError, zipfile.BadZipFile, ValueError):
        return None
    folders: set[str] = set()
    for info in infos:  # the folders the entries' paths make, as pip creates them
        parts = info.filename.strip("/").split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folders.add("/".join(parts[:depth]))
        if len(infos) + len(folders) > MAX_INSTALLED_FILES:
            break
    if len(infos) + len(folders) > MAX_INSTALLED_FILES:
        return (f"{wheel.name} holds more than {MAX_INSTALLED_FILES:,} files and folders; a package may hold "
                f"at most {MAX_INSTALLED_FILES:,}")
    size = sum(max(0, i.file_size) for i in infos) + FOLDER_BYTES * len(folders)
    if size > MAX_INSTALLED_BYTES:
        return (f"{wheel.name} unpacks to {_size(size)}; a package may take at most "
                f"{_size(MAX_INSTALLED_BYTES)} installed")
    return None


def installed_size_problem(folder: Path) -> str | None:
    """Why what pip installed in ``folder`` (dependencies included) is too large — more than
    :data:`MAX_INSTALLED_BYTES` or :data:`MAX_INSTALLED_FILES` files and folders (a folder
    counts :data:`FOLDER_BYTES`) — or None.  Stops counting as soon as a limit is passed;
    symbolic links are not followed."""
    total = entries = 0
    for root, dirs, names in os.walk(folder):
        entries += len(dirs)
        total += FOLDER_BYTES * len(dirs)
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
            entries += 1
            if entries > MAX_INSTALLED_FILES or total > MAX_INSTALLED_BYTES:
                break
        if entries > MAX_INSTALLED_FILES:
            return f"the package installed more than {MAX_INSTALLED_FILES:,} files and folders"
        if total > MAX_INSTALLED_BYTES:
            return f"the package took more than {_size(MAX_INSTALLED_BYTES)} installed"
    return None


async def pip_install(source: Path, target: Path, *, folder_source: bool,
                      timeout_s: float = PIP_TIMEOUT_S) -> None:
    """``python -m pip install --target TARGET SOURCE`` with the daemon's own
    interpreter; the daemon's environment is never written to.

    Dependencies are allowed (installed into ``target`` too; they need the
    package index pip is configured with); a wheel that declares none is
    installed with ``--no-deps``, so it never contacts an index.  A folder source is built with
    ``--no-build-isolation``, i.e. with the build backend of the daemon's
    environment (setuptools >= 70.1 builds wheels by itself), so it works
    offline.  Raises MarketplaceError with the end of pip's output when pip
    fails or runs past ``timeout_s``, and when the package is larger than
    :data:`MAX_INSTALLED_BYTES` or :data:`MAX_INSTALLED_FILES` (a wheel
    before pip runs, by its zip directory; whatever pip installed, after).
    Cancellation kills pip.  pip (and the
    build code it runs) sees only a scrubbed environment:
    :data:`~ongridd.secretset.PIP_ENV_KEYS` and ``PIP_*`` settings.
    """
    if source.suffix == ".whl":
        problem = await trio.to_thread.run_sync(wheel_unpacked_problem, source)
        if problem:
            raise MarketplaceError(f"{problem}: not installed")
    cmd = [sys.executable, "-P", "-m", "pip", "install", "--target", str(target), "--disable-pip-version-check",
           "--no-input", "--no-cache-dir", "--no-warn-script-location", "-q"]
    if folder_source:
        cmd.append("--no-build-isolation")
    elif source.suffix == ".whl" and not wheel_has_dependencies(source):
        cmd.append("--no-deps")  # nothing to resolve: never touch an index
    cmd.append(str(source))
    # pip runs third-party build code: it gets a scrubbed environment (no API
    # keys, no tokens), with what it needs to reach an index kept
    env = scrubbed_env(PIP_ENV_KEYS, prefixes=PIP_ENV_PREFIXES,
                       extra={"PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    env.pop("PIP_TARGET", None)
    env.pop("PIP_PREFIX", None)
    env.pop("PIP_USER", None)
    log.info("pip_install", source=str(source), target=str(target))
    with trio.move_on_after(timeout_s) as scope:
        proc = await trio.run_process(cmd, capture_stdout=True, capture_stderr=True, check=False,
                                      cwd=str(target.parent), env=env)
    if scope.cancelled_caught:
        raise MarketplaceError(f"pip install of {source.name} did not finish within {timeout_s:.0f} s")
    if proc.returncode != 0:
        out = _tail(proc.stderr) or _tail(proc.stdout)
        hint = ""
        if folder_source and ("bdist_wheel" in out or "No module named 'setuptools'" in out
                              or "Cannot import 'setuptools" in out):
            hint = (" (a folder source is built with the daemon's own build backend: install "
                    "setuptools >= 70.1 next to the daemon, or ship a wheel)")
        raise MarketplaceError(f"pip could not install {source.name} (exit {proc.returncode}){hint}: {out}")
    problem = await trio.to_thread.run_sync(installed_size_problem, target)
    if problem:  # the caller removes its staging folder, as after any failure
        raise MarketplaceError(f"{source.name}: {problem}: not installed")


# ---- what this process imported ---------------------------------------------

#: resolved plugin folder → (version, sha256 or None) imported from it by this process
_LOADED: dict[str, tuple[str, str | None]] = {}


def remember_loaded(folder: Path, version: str, sha256: str | None) -> None:
    """Record that this process imported ``version`` of the plugin in ``folder``."""
    _LOADED[str(Path(folder).resolve())] = (version, sha256)


def loaded_version(folder: Path) -> tuple[str, str | None] | None:
    """``(version, sha256 | None)`` this process imported from ``folder``, or None."""
    return _LOADED.get(str(Path(folder).resolve()))


def forget_loaded(folder: Path) -> None:
    """Forget ``folder`` (tests only: a fresh interpreter knows nothing)."""
    _LOADED.pop(str(Path(folder).resolve()), None)


def _module_locations(module: ModuleType) -> list[Path]:
    out = []
    file = getattr(module, "__file__", None)
    if file:
        out.append(Path(file))
    for p in list(getattr(module, "__path__", None) or ()):
        out.append(Path(p))
    return out


def _under(path: Path, folder: Path) -> bool:
    try:
        return Path(os.path.abspath(path)).is_relative_to(os.path.abspath(folder))
    except (OSError, ValueError):
        return False


def check_module_conflicts(package: InstalledPackage, final_folder: Path, plugins_root: Path,
                           sha256: str | None) -> bool:
    """Refuse a package this process cannot load correctly.

    ``final_folder``: where the plugin will live (``<plugins_root>/<name>``).
    Returns True when a module of the same version is already imported from
    ``final_folder`` (it will be reused), False when none is imported.
    Raises MarketplaceError when another version was imported from that
    folder (restart needed), or when a top-level module name is already
    imported or importable from elsewhere (it would shadow or be shadowed).
    """
    reuse = False
    for name in package.modules:
        module = sys.modules.get(name)
        if module is not None:
            locations = _module_locations(module)
            if locations and all(_under(p, final_folder) for p in locations):
                loaded = loaded_version(final_folder)
                if loaded is None or loaded[0] != package.version or (
                        loaded[1] is not None and sha256 is not None and loaded[1] != sha256):
                    what = f"version {loaded[0]}" if loaded else "another version"
                    if loaded and loaded[0] == package.version:
                        what = f"a different build of version {loaded[0]}"
                    raise MarketplaceError(
                        f"{package.dist_name}: {what} (module {name!r}) is already loaded in this process; "
                        f"restart the daemon to install version {package.version}")
                reuse = True
                continue
            where = ", ".join(str(p) for p in locations) or "a built-in module"
            if any(_under(p, plugins_root) for p in locations):
                raise MarketplaceError(
                    f"{package.dist_name}: module {name!r} is already loaded in this process from {where} "
                    "(an earlier plugin); restart the daemon to install this package")
            raise MarketplaceError(
                f"{package.dist_name}: its module {name!r} is already imported from {where}; a plugin cannot "
                "replace a module the daemon has (rename the plugin's package)")
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or spec.origin in (None, "namespace"):
            continue
        origin = Path(spec.origin) if spec.origin not in ("built-in", "frozen") else None
        if origin is not None and _under(origin, final_folder):
            continue
        raise MarketplaceError(
            f"{package.dist_name}: a module named {name!r} already exists in the daemon's environment "
            f"({spec.origin}); the plugin's copy would never be imported (rename the plugin's package)")
    return reuse


def plugin_folders(root: Path) -> list[Path]:
    """Installed plugin folders under ``root`` (hidden work folders excluded), sorted."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def remember_existing(root: Path, exclude: Sequence[Path] = ()) -> None:
    """At start-up: record the version of every plugin folder whose modules
    this process has already imported (the daemon loaded them at start)."""
    skip = {str(Path(p).resolve()) for p in exclude}
    for folder in plugin_folders(root):
        if str(folder.resolve()) in skip or loaded_version(folder) is not None:
            continue
        try:
            package = inspect_folder(folder)
        except MarketplaceError:
            continue
        for name in package.modules:
            module = sys.modules.get(name)
            if module is not None and any(_under(p, folder) for p in _module_locations(module)):
                remember_loaded(folder, package.version, None)
                break
