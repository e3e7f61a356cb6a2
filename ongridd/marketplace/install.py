"""Marketplace install and uninstall with one atomic registry swap (docs/architecture.md §14).

**Install** ``NAME``:

1. look ``NAME`` up in the index;
2. copy the source (a wheel/sdist file, or a folder's hashed files) into a
   work folder ``<state_dir>/plugins/.staging-<name>-<random>/`` and check
   the copy's sha256 against the index — what is checked is what is
   installed;
3. ``pip install --target <work>/pkg`` with the daemon's interpreter (the
   daemon's environment is never written to);
4. read the installed distribution: its name and version must be the
   index's; its modules must not clash with modules already imported or
   present (see :mod:`ongridd.marketplace.packages`: another version of
   this plugin already imported means a restart is needed);
5. validate it in a **separate interpreter**: a full registry build with
   the staged folder, then :func:`~ongridd.marketplace.validate.check_new_plugin`.
   A package that fails to import or raises in a hook never reaches this
   process;
6. rename ``<work>/pkg`` to ``<state_dir>/plugins/<name>`` (same file
   system: atomic), build new registries in a worker thread with every
   installed plugin folder, check the plugin again on that build;
7. ``holder.swap(new registries)`` — tools, redirect stubs, personas,
   skills and plugin routes change in one assignment (user agent files
   that broke since the last load keep their persona, as on a hot reload:
   :func:`keep_last_good_personas`);
8. record a ``plugin`` change event.

A failure at any step raises MarketplaceError (HTTP 400) and leaves the
running registries exactly as they were and no folder behind (the work
folder is removed in every case; the plugin folder when the swap did not
happen).  Turns in flight keep the Registries object they started with;
nothing here mutates one in place.

**Uninstall** ``NAME``: rename the plugin folder aside (a hidden
``.removing-…`` folder the plugin loader skips), build registries from the
remaining folders, swap, record a change event, then delete the folder.  A
build failure renames the folder back.  The plugin's modules stay in memory
unused (Python cannot unload them).

Installs, uninstalls, user-agent edits and hot reloads are serialised by
one lock per registry holder (:func:`~ongridd.marketplace.locks.registry_lock`).
"""

from __future__ import annotations

import builtins  # the class has a ``list`` method
import importlib
import json
import os
import secrets
import shutil
import sys
from pathlib import Path
from typing import Any

import trio

from ongridd.errors import MarketplaceError, NotFound
from ongridd.logs import get_logger
from ongridd.marketplace.index import (
    IndexEntry,
    MarketplaceIndex,
    file_sha256,
    folder_files,
    folder_sha256,
    index_path_for,
    load_index,
    normalize_dist_name,
    valid_plugin_name,
)
from ongridd.marketplace.locks import registry_lock
from ongridd.marketplace.packages import (
    InstalledPackage,
    check_module_conflicts,
    inspect_folder,
    pip_install,
    plugin_folders,
    remember_existing,
    remember_loaded,
)
from ongridd.marketplace.validate import check_new_plugin, config_to_json
from ongridd.secretset import scrubbed_env

__all__ = ["MarketplaceService", "keep_last_good_personas"]

log = get_logger(__name__)

VALIDATE_TIMEOUT_S = 120.0
STAGING_PREFIX = ".staging-"
REMOVING_PREFIX = ".removing-"


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _copy_file(src: Path, dst: Path) -> str:
    """Copy ``src`` to ``dst`` and return the copy's sha256."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return file_sha256(dst)


def _copy_folder(src: Path, dst: Path) -> str:
    """Copy the files the folder hash covers into ``dst``; return the
    folder hash of the copy."""
    for rel in folder_files(src):
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, target)
    dst.mkdir(parents=True, exist_ok=True)
    return folder_sha256(dst)


def keep_last_good_personas(old_agents: Any, new_agents: Any, user_roots: list[Path]) -> list[str]:
    """Carry over user personas whose file loaded before and fails now (docs/architecture.md §6).

    A marketplace rebuild loads every persona from scratch; without this a
    user agent file that broke since the last load would lose the persona
    it produced, unlike on a hot reload.  For every persona of ``old_agents``
    that came from a file under ``user_roots``, that file still exists, now
    produces nothing and was reported ``file skipped`` in ``new_agents``'
    last load, the old persona is put back into ``new_agents`` (before the
    swap).  Returns one warning per persona kept.
    """
    roots = [Path(os.path.abspath(r)) for r in user_roots]
    new_snapshot = new_agents.snapshot()
    produced = {p.source for p in new_snapshot.values()}
    skipped = [w for w in new_agents.last_report.warnings if w.endswith("file skipped")]
    warnings = []
    for persona in old_agents.snapshot().values():
        source = persona.source
        if not source or source in produced:
            continue
        path = Path(os.path.abspath(source))
        if not any(path.is_relative_to(r) for r in roots) or not path.is_file():
            continue
        if not any(w.startswith((f"{source}:", f"{source} ")) for w in skipped):
            continue
        current = new_snapshot.get(persona.name)
        if current is not None and current.source and any(
                Path(os.path.abspath(current.source)).is_relative_to(r) for r in roots):
            continue  # another user file provides that name now
        new_agents.replace(persona)
        warnings.append(f"{source}: keeping the persona {persona.name!r} it produced last time")
    return warnings


class MarketplaceService:
    """The marketplace used by ``/api/marketplace`` and ``ongrid marketplace``.

    ``config``: the Config (``state_dir``, ``marketplace.index``).
    ``holder``: the RegistryHolder to swap.  ``builder``: the RegistryBuilder
    (``build_sync(extra_paths=...)``).  ``store``: for change events (may be
    None).  ``index_path``: overrides the configured index (tests).

    Construction removes work folders a crash left behind and notes which
    installed plugins this process already imported.
    """

    def __init__(self, *, config: Any, holder: Any, builder: Any, store: Any = None,
                 index_path: str | os.PathLike | None = None):
        self.config = config
        self.holder = holder
        self.builder = builder
        self.store = store
        self.index_path = Path(index_path).absolute() if index_path is not None else index_path_for(config)
        self.plugins_root = Path(os.path.abspath(config.state_path / "plugins"))
        self._lock = registry_lock(holder)
        self._cleanup_leftovers()
        remember_existing(self.plugins_root)

    def _cleanup_leftovers(self) -> None:
        if not self.plugins_root.is_dir():
            return
        for p in self.plugins_root.iterdir():
            if p.is_dir() and p.name.startswith((STAGING_PREFIX, REMOVING_PREFIX)):
                log.warning("marketplace_leftover_removed", path=str(p))
                _rmtree(p)

    # ---- listing -----------------------------------------------------------

    async def index(self) -> MarketplaceIndex:
        """The index, read now.  Raises MarketplaceError (missing or invalid)."""
        return await trio.to_thread.run_sync(load_index, self.index_path)

    def _installed(self) -> dict[str, InstalledPackage | None]:
        out: dict[str, InstalledPackage | None] = {}
        for folder in plugin_folders(self.plugins_root):
            try:
                out[folder.name] = inspect_folder(folder)
            except MarketplaceError:
                out[folder.name] = None
        return out

    async def list(self) -> list[dict[str, Any]]:
        """Every index entry as ``{name, version, description, installed,
        installed_version}``, then installed packages the index does not
        list (``description`` says so).  Raises MarketplaceError when the
        index is missing or invalid."""
        index = await self.index()
        installed = await trio.to_thread.run_sync(self._installed)
        out = []
        for entry in index.entries:
            present = entry.name in installed
            pkg = installed.get(entry.name)
            out.append({"name": entry.name, "version": entry.version, "description": entry.description,
                        "installed": present, "installed_version": pkg.version if pkg else None})
        listed = set(index.names())
        for name, pkg in sorted(installed.items()):
            if name not in listed:
                out.append({"name": name, "version": pkg.version if pkg else None,
                            "description": "(installed; not in the marketplace index)", "installed": True,
                            "installed_version": pkg.version if pkg else None})
        return out

    # ---- install -----------------------------------------------------------

    async def install(self, name: str, *, actor: str) -> dict[str, Any]:
        """Install the index package ``name`` and swap the new registries in.

        Returns ``{name, version, action: "installed", plugins: [entry point
        names], registered: {kind: [...]}, warnings: [...], generation,
        reused_loaded_module}`` once the new registries are live.  Raises
        NotFound (not in the index) or MarketplaceError (anything else;
        nothing changed, no folder left).  Cancellation before the swap
        undoes everything (pip and the validator are killed); after the
        swap the install stands.
        """
        if not valid_plugin_name(name):
            raise MarketplaceError(f"invalid package name {name!r}")
        async with self._lock:
            index = await self.index()
            entry = index.get(name)
            if entry is None:
                known = ", ".join(index.names()) or "none"
                raise NotFound(f"no package {name!r} in the marketplace index {index.path} (available: {known})")
            result = await self._install(entry)
        await self._record("install", entry.name, actor, {
            "version": result["version"], "sha256": entry.sha256, "source": entry.source,
            "plugins": result["plugins"], "registered": result["registered"]})
        log.info("marketplace_installed", package=entry.name, version=result["version"], actor=actor,
                 generation=result["generation"])
        return result

    async def _install(self, entry: IndexEntry) -> dict[str, Any]:
        final = self.plugins_root / entry.name
        existing = self._find_installed(entry.name)
        if existing is not None:
            version = self._version_of(existing)
            raise MarketplaceError(f"{entry.name} is already installed ({version or 'unknown version'}); "
                                   "uninstall it first")
        source = entry.source_path
        where = f"{entry.index_path}:{entry.line}" if entry.line else str(entry.index_path)
        if not source.exists():
            raise MarketplaceError(f"{entry.name}: its source {source} does not exist (index entry at {where})")
        await trio.to_thread.run_sync(lambda: self.plugins_root.mkdir(parents=True, exist_ok=True))
        work = self.plugins_root / f"{STAGING_PREFIX}{entry.name}-{secrets.token_hex(4)}"
        staged = work / "pkg"
        placed = swapped = False
        try:
            await trio.to_thread.run_sync(work.mkdir)
            pip_source, is_folder = await self._verified_copy(entry, source, work, where)
            await pip_install(pip_source, staged, folder_source=is_folder)
            package = await trio.to_thread.run_sync(inspect_folder, staged, entry.name)
            if package.version != entry.version:
                raise MarketplaceError(f"{entry.name}: the index says version {entry.version}, the package is "
                                       f"version {package.version} (index entry at {where})")
            reuse = check_module_conflicts(package, final, self.plugins_root, entry.sha256)
            others = plugin_folders(self.plugins_root)
            check = await self._validate_isolated(entry, others + [staged], staged)
            if check["problems"]:
                raise MarketplaceError(self._refusal(entry, check["problems"], staged, final))
            await trio.to_thread.run_sync(os.rename, staged, final)
            placed = True
            importlib.invalidate_caches()
            try:
                build = await trio.to_thread.run_sync(
                    lambda: self.builder.build_sync(extra_paths=others + [final]))
            finally:
                remember_loaded(final, package.version, entry.sha256)
            in_process = check_new_plugin(build, final)
            if in_process.problems:
                raise MarketplaceError(self._refusal(entry, list(in_process.problems), final, final))
            kept = keep_last_good_personas(self.holder.current.agents, build.registries.agents,
                                           list(self.builder.agent_roots()))
            self.holder.swap(build.registries)
            swapped = True
        except MarketplaceError:
            raise
        except Exception as exc:  # noqa: BLE001 - any other failure: the same promise, nothing changed
            raise MarketplaceError(f"{entry.name} was not installed: {type(exc).__name__}: {exc}") from None
        finally:
            with trio.move_on_after(30, shield=True):
                if placed and not swapped:
                    await trio.to_thread.run_sync(_rmtree, final)
                    importlib.invalidate_caches()
                await trio.to_thread.run_sync(_rmtree, work)
        warnings = list(in_process.warnings) + list(build.warnings) + kept + [
            w for w in build.agents_report.warnings if str(final) in w]
        return {"name": entry.name, "version": package.version, "action": "installed",
                "plugins": list(in_process.plugins), "registered": in_process.registered,
                "warnings": list(dict.fromkeys(warnings)), "generation": self.holder.current.generation,
                "reused_loaded_module": reuse}

    def _find_installed(self, name: str) -> Path | None:
        wanted = normalize_dist_name(name)
        for folder in plugin_folders(self.plugins_root):
            if folder.name == name or normalize_dist_name(folder.name) == wanted:
                return folder
        return None

    @staticmethod
    def _version_of(folder: Path) -> str | None:
        try:
            return inspect_folder(folder).version
        except MarketplaceError:
            return None

    @staticmethod
    def _refusal(entry: IndexEntry, problems: builtins.list[str], shown: Path, final: Path) -> str:
        text = "\n  ".join(p.replace(str(shown), str(final)) for p in problems)
        return f"{entry.name} {entry.version} was not installed:\n  {text}"

    async def _verified_copy(self, entry: IndexEntry, source: Path, work: Path, where: str) -> tuple[Path, bool]:
        """Copy the source into ``work`` and check the copy's sha256."""
        is_dir = await trio.Path(source).is_dir()
        if is_dir:
            copy = work / "src"
            actual = await trio.to_thread.run_sync(_copy_folder, source, copy)
            kind = "folder hash"
        else:
            copy = work / source.name
            actual = await trio.to_thread.run_sync(_copy_file, source, copy)
            kind = "sha256"
        if actual != entry.sha256:
            raise MarketplaceError(f"{entry.name}: {kind} mismatch for {source}: the index ({where}) says "
                                   f"{entry.sha256}, the package has {actual}; not installed")
        return copy, is_dir

    async def _validate_isolated(self, entry: IndexEntry, extra_paths: builtins.list[Path], plugin_dir: Path) -> dict:
        """Run the validator in a separate interpreter (scrubbed environment:
        :data:`~ongridd.secretset.BASE_ENV_KEYS` and ``PYTHONPATH`` only); its
        answer as a dict.  Raises MarketplaceError on a timeout or an
        unusable answer."""
        request = {"config": config_to_json(self.config), "extra_paths": [str(p) for p in extra_paths],
                   "plugin_dir": str(plugin_dir)}
        # the validator imports and registers third-party plugin code: a
        # scrubbed environment (no API keys, no tokens), our import path
        existing = await trio.to_thread.run_sync(lambda: [p for p in sys.path if p and os.path.exists(p)])
        env = scrubbed_env(extra={"PYTHONPATH": os.pathsep.join(existing)})
        cmd = [sys.executable, "-P", "-m", "ongridd.marketplace.validate"]
        with trio.move_on_after(VALIDATE_TIMEOUT_S) as scope:
            proc = await trio.run_process(cmd, stdin=json.dumps(request).encode(), capture_stdout=True,
                                          capture_stderr=True, check=False, env=env, cwd=os.getcwd())
        if scope.cancelled_caught:
            raise MarketplaceError(f"{entry.name}: validating the package took more than "
                                   f"{VALIDATE_TIMEOUT_S:.0f} s (a plugin hook that hangs?); not installed")
        try:
            answer = json.loads(proc.stdout.decode("utf-8"))
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not isinstance(answer.get("problems"), list):
            tail = proc.stderr.decode("utf-8", "replace").strip()[-2000:]
            raise MarketplaceError(f"{entry.name}: the package could not be validated (validator exit "
                                   f"{proc.returncode}): {tail}")
        return answer

    # ---- uninstall ---------------------------------------------------------

    async def uninstall(self, name: str, *, actor: str) -> dict[str, Any]:
        """Remove the installed package ``name`` and swap registries without it.

        Returns ``{name, version, action: "uninstalled", plugins, warnings,
        generation}`` once the new registries are live.  Raises NotFound when
        it is not installed, MarketplaceError when the registries could not
        be rebuilt (then nothing changed).  The plugin's modules stay loaded
        in this process, unused.
        """
        if not valid_plugin_name(name):
            raise MarketplaceError(f"invalid package name {name!r}")
        async with self._lock:
            folder = self._find_installed(name)
            if folder is None:
                raise NotFound(f"package {name!r} is not installed")
            try:
                package: InstalledPackage | None = await trio.to_thread.run_sync(inspect_folder, folder)
            except MarketplaceError:
                package = None
            aside = self.plugins_root / f"{REMOVING_PREFIX}{folder.name}-{secrets.token_hex(4)}"
            await trio.to_thread.run_sync(os.rename, folder, aside)
            importlib.invalidate_caches()
            swapped = False
            try:
                others = plugin_folders(self.plugins_root)
                build = await trio.to_thread.run_sync(lambda: self.builder.build_sync(extra_paths=others))
                kept = keep_last_good_personas(self.holder.current.agents, build.registries.agents,
                                               list(self.builder.agent_roots()))
                self.holder.swap(build.registries)
                swapped = True
            except Exception as exc:  # noqa: BLE001 - reported; the folder is put back below
                raise MarketplaceError(f"{folder.name} was not uninstalled: rebuilding the registries failed: "
                                       f"{type(exc).__name__}: {exc}") from None
            finally:
                with trio.move_on_after(30, shield=True):
                    if swapped:
                        await trio.to_thread.run_sync(_rmtree, aside)
                    else:
                        await trio.to_thread.run_sync(os.rename, aside, folder)
                    importlib.invalidate_caches()
        result = {"name": folder.name, "version": package.version if package else None, "action": "uninstalled",
                  "plugins": list(package.entry_points) if package else [], "warnings": list(build.warnings) + kept,
                  "generation": self.holder.current.generation}
        await self._record("uninstall", folder.name, actor, {"version": result["version"],
                                                            "plugins": result["plugins"]})
        log.info("marketplace_uninstalled", package=folder.name, version=result["version"], actor=actor,
                 generation=result["generation"])
        return result

    async def _record(self, action: str, subject: str, actor: str, detail: dict[str, Any]) -> None:
        if self.store is None:
            return
        try:
            await self.store.plugin_store.record_change_event(kind="plugin", subject=subject, actor=actor,
                                                              detail={"action": action, **detail})
        except Exception:  # the change is live; a lost audit line must not undo it
            log.exception("change_event_failed", subject=subject, action=action)
