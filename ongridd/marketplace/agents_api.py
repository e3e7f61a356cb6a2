"""User-agent editing (``GET|PUT|DELETE /api/agents/{name}``) and hot
reload of the user agents folders.

PUT validates the persona first, writes it atomically to the user agents
folder (the first of ``agents.user_dirs``, else ``<state_dir>/agents``),
then replaces it in the live registry; the next turn sees it.

A PUT body is untrusted and is parsed off the Trio thread, so the event loop
(``/healthz``, chats, the watchdog) never waits for it.  A thread cannot be
killed, so the real time and memory bound is the parse's own, by
construction: at most ``MAX_FILE_BYTES`` of input, whose YAML may expand
(aliases included) to at most ``FRONTMATTER_LIMITS`` nodes and characters
and whose every warning is a bounded preview (see :mod:`ongridd.yamlbounds`)
— a parse takes well under a second and a few MB.  On top of that, at most
``PARSE_CONCURRENCY`` bodies are parsed at once (a flood of PUTs cannot take
every core), and ``PARSE_TIME_LIMIT_S`` is a last resort: a parse that has
not answered by then is abandoned — its thread runs on to its bounded end,
still holding its parse slot — and the PUT is refused.  DELETE
removes a user agent; a built-in persona can only be overridden, so
deleting an override restores the built-in.  Every change is recorded as
a ``persona`` change event.
"""

from __future__ import annotations

import builtins  # the class has a ``list`` method
import contextlib
import functools
import json
import os
import secrets
import stat
import unicodedata
from pathlib import Path
from typing import Any

import trio

from ongridd.errors import NotFound, OngridError, PersonaError
from ongridd.logs import get_logger
from ongridd.marketplace.locks import registry_lock
from ongridd.personas.frontmatter import MAX_FILE_BYTES
from ongridd.personas.origin import files_without_persona, persona_origin, persona_warnings
from ongridd.personas.parse import parse_persona_text, persona_to_text
from ongridd.personas.registry import content_digest
from ongridd.secretset import redact_wrapped
from ongridd.tools.spec import CONTROL_TOOL_NAMES
from ongridd.unicodetext import ascii_digits

log = get_logger(__name__)
WATCH_INTERVAL_S = 1.0
#: Changes to the agents folders within this many milliseconds make one reload.
WATCH_DEBOUNCE_MS = 300
#: PUT bodies parsed at the same time (each in a worker thread).
PARSE_CONCURRENCY = 2
#: Seconds a PUT waits for its parse (slot included) before it is refused.
PARSE_TIME_LIMIT_S = 10.0


_HOLDS_SECRET = ("persona rejected: it contains a secret value the daemon holds (a token or key); remove it — a "
                 "persona is shown to every user and sent to the model")


#: why the reviewer persona cannot be written through the API (a PUT's error, a GET's ``read_only``)
_REVIEWER_LOCKED = ("the 'reviewer' persona decides the review gate; it cannot be replaced or deleted through the "
                    "API — an operator can override it with a file in an agents folder, or remove that file")


def _redacted(value: Any) -> Any:
    """``value`` (a persona as the API shows it) with every held secret hidden in every string,
    keys included, one an editor's line wrap splits too: a file dropped into an agents folder is
    shown to every user, and a PUT of one that holds a secret is refused for that reason."""
    if isinstance(value, str):
        return redact_wrapped(value)
    if isinstance(value, dict):
        return {redact_wrapped(k) if isinstance(k, str) else k: _redacted(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redacted(v) for v in value]
    return value


class AgentsAPI:
    """``holder``: the RegistryHolder; ``builder``: the RegistryBuilder
    (its user roots); ``store``: for change events (may be None)."""

    #: Largest PUT body accepted (the size of a persona file); the HTTP
    #: route answers 413 past it without parsing.
    max_body_bytes = MAX_FILE_BYTES

    def __init__(self, *, config: Any, holder: Any, builder: Any, store: Any = None,
                 parse_time_limit_s: float = PARSE_TIME_LIMIT_S):
        self.config = config
        self.holder = holder
        self.builder = builder
        self.store = store
        self._lock = registry_lock(holder)  # shared with the marketplace's swaps
        self.last_reload_warnings: tuple[str, ...] = ()
        self.parse_time_limit_s = parse_time_limit_s
        self._parse_limiter = trio.CapacityLimiter(PARSE_CONCURRENCY)
        #: the user agents folders where they really are, fixed when the daemon starts: a folder
        #: swapped for a symlink later does not move where writes may go
        self._real_roots = [Path(r).resolve() for r in config.agent_user_roots]

    @property
    def agents(self) -> Any:
        return self.holder.current.agents

    def list(self) -> list[dict]:
        """Every persona as ``ongrid agents list --json`` shows it, plus ``origin``
        (``builtin|user|plugin:<name>``) and the load ``warnings`` about its file."""
        return [self._described(p) for p in sorted(self.agents.snapshot().values(), key=lambda p: p.name)]

    def skipped(self) -> builtins.list[dict]:
        """The files of the last load of the agents folders that gave no persona (unusable, a
        duplicate name, an unreadable folder): ``[{path, warnings}]`` by path, every held
        secret redacted from the warnings (they may quote the file)."""
        report = getattr(self.agents, "last_report", None)
        sources = [p.source for p in self.agents.snapshot().values()]
        return [{"path": redact_wrapped(f["path"]), "warnings": [redact_wrapped(w) for w in f["warnings"]]}
                for f in files_without_persona(getattr(report, "warnings", ()) or (), sources)]

    def _described(self, persona: Any) -> dict:
        out = persona.to_dict()
        agents = self.agents
        out["origin"] = persona_origin(persona.source, getattr(agents, "builtin_root", None),
                                       getattr(self.holder.current, "plugins", ()))
        report = getattr(agents, "last_report", None)
        out["warnings"] = persona_warnings(persona.source, getattr(report, "warnings", ()) or ())
        return _redacted(out)

    async def get(self, name: str) -> dict:
        """The persona ``name`` as :meth:`list` describes it, with its ``body``
        and ``text``: the whole file as it is on disk, comments and layout
        kept, ready to edit and PUT back (``text_from: "file"``); or, when
        the file cannot be read as it was loaded (gone, too large, not
        UTF-8, or not the bytes the registry loaded or this API wrote:
        changed or swapped since) or its fields hold a held secret (the file
        may spell it so that only its parse shows it), the file rebuilt from
        the persona's fields, redacted (``text_from: "fields"``).  Raises NotFound.  The file is read in a
        worker thread; cancelling the caller abandons the read."""
        persona = self.agents.by_name(name)
        if persona is None:
            raise NotFound(f"no persona {name!r}")
        out = self._described(persona)
        out["body"] = persona.body
        raw = await trio.to_thread.run_sync(_file_bytes, persona.source, abandon_on_cancel=True)
        on_disk = None
        # only the very bytes that were loaded: a file changed or swapped since (another persona, a
        # symlink to anything else the daemon can read) is not shown
        if raw is not None and content_digest(raw) == self.agents.loaded_digest(persona.source):
            try:
                on_disk = raw.decode("utf-8-sig")
            except UnicodeDecodeError:
                on_disk = None
        fields = {**persona.to_dict(), "body": persona.body}
        if on_disk is not None and _redacted(fields) != fields:
            # the file spells a held secret in a way its parse decodes (a YAML escape, a line
            # continuation) that the file's own text does not show literally: shown from the
            # (redacted) fields instead, never as written
            on_disk = None
        out["text"] = redact_wrapped(on_disk) if on_disk is not None else persona_to_text(persona)
        if name == "reviewer":  # shown read-only, with why, rather than refused on Save
            out["read_only"] = _REVIEWER_LOCKED
        out["text_from"] = "file" if on_disk is not None else "fields"
        return _redacted(out)

    def _known_tools(self) -> set[str]:
        return set(self.holder.current.tools) | set(CONTROL_TOOL_NAMES)

    async def put(self, name: str, text: str | bytes, *, actor: str) -> dict:
        """Validate ``text`` as a persona named ``name``, write it, replace it live.

        Raises PersonaError (nothing written, registry unchanged) with every
        warning that made it unusable (``.warnings``), when its ``name``
        differs from ``name``, when it is larger than a persona file may be
        (``.too_large``), when its parse did not answer within
        ``parse_time_limit_s``, when a later agents folder defines the same
        name (the edit would be undone by the next reload), or for the review
        gate's ``reviewer`` (only an operator's file may replace it).  The
        parse runs in a worker thread (see the module doc); cancelling the
        caller abandons it.
        """
        name = unicodedata.normalize("NFC", name)
        raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
        if len(raw) > MAX_FILE_BYTES:
            raise PersonaError(f"persona too large: {len(raw):,} bytes; a persona file may have at most "
                               f"{MAX_FILE_BYTES:,}", too_large=True)
        decoded = raw.decode("utf-8", "replace")
        if redact_wrapped(decoded) != decoded:  # personas are shared with every user and go into prompts
            raise PersonaError(_HOLDS_SECRET)
        if name == "reviewer":
            raise PersonaError(_REVIEWER_LOCKED)
        if len(name.encode("utf-8")) > 200 or "/" in name or "\0" in name or name.startswith("."):
            raise PersonaError(f"persona name {name[:60]!r} cannot be used as a file name")
        target_dir = self.config.agents_write_dir
        path = target_dir / f"{name}.md"
        current = self.agents.by_name(name)
        if current is not None:
            later = self._later_root(Path(current.source), target_dir)
            if later is not None:
                raise PersonaError(f"{name!r} is defined in {current.source}, a folder read after {target_dir}; "
                                   "edit that file instead (an API edit would be undone by the next reload)")
            source = Path(current.source)
            if await trio.to_thread.run_sync(_in_user_roots, source, list(self.config.agent_user_roots)):
                # a user file already defines it (whatever its file name): edit that file, never add a
                # second file of the same name, which the next reload would resolve against the edit
                path = source
        persona, warnings = await self._parse(raw, path)
        if persona is None:  # the text sent is at fault, not the file (nothing was written)
            said = [_as_sent(w, path) for w in warnings]
            # the message says what made it unusable; what else there is to know stays in the warnings
            blocking = [s for w, s in zip(warnings, said) if w.endswith("; file skipped")] or said
            raise PersonaError("persona rejected: " + "; ".join(blocking), path=str(path), warnings=said)
        if persona.name != name:
            raise PersonaError(f"the file's name {persona.name!r} does not match the URL's {name!r}", path=str(path),
                               warnings=warnings)
        parsed_text = json.dumps(persona.to_dict(), ensure_ascii=False, default=str) + persona_to_text(persona)
        if redact_wrapped(parsed_text) != parsed_text:  # a secret spelled with YAML escapes decodes to the value itself
            raise PersonaError(_HOLDS_SECRET)
        async with self._lock:
            await trio.to_thread.run_sync(_write_atomic, path.parent, path, raw, self._real_roots)
            self.agents.replace(persona)
            self.agents.note_written(str(path), raw)
        await self._record("update", name, actor, {"path": str(path), "warnings": warnings})
        out = persona.to_dict()
        out["warnings"] = warnings
        return out

    async def _parse(self, raw: bytes, path: Path) -> tuple[Any, builtins.list[str]]:
        """``parse_persona_text`` of an untrusted body in a worker thread.

        Returns ``(persona | None, warnings)``.  Waits for one of
        ``PARSE_CONCURRENCY`` slots; raises PersonaError (with the reason as
        its one warning) when slot and parse took more than
        ``parse_time_limit_s`` — the thread is then abandoned, not killed,
        and keeps its slot until its bounded parse ends.
        """
        parse = functools.partial(parse_persona_text, raw, str(path), known_tools=self._known_tools())
        try:
            with trio.fail_after(self.parse_time_limit_s):
                return await trio.to_thread.run_sync(parse, limiter=self._parse_limiter, abandon_on_cancel=True)
        except trio.TooSlowError:
            log.warning("persona_parse_timeout", path=str(path), limit_s=self.parse_time_limit_s, bytes=len(raw))
            reason = (f"{path}: not parsed within {self.parse_time_limit_s:g} s (the daemon is busy parsing other "
                      "personas, or this file is too costly); file skipped")
            raise PersonaError("persona rejected: " + reason, path=str(path), warnings=[reason]) from None

    def _later_root(self, source: Path, target_dir: Path) -> Path | None:
        """The user root holding ``source`` when it is read after ``target_dir``."""
        roots = [Path(r).resolve() for r in self.config.agent_user_roots]
        try:
            target_index = roots.index(Path(target_dir).resolve())
        except ValueError:
            return None
        src = source.resolve()
        for index, root in enumerate(roots):
            if index > target_index and (src.parent == root or root in src.parents):
                return root
        return None

    async def delete(self, name: str, *, actor: str) -> dict:
        """Remove the user file that defines persona ``name``, then reload the agents folders.

        Returns ``{name, deleted: True, restored_builtin}`` (the built-in of that name is back),
        plus ``now_from`` (a path) when another user file of the same name now defines it.
        Raises NotFound for an unknown name, OngridError for a built-in (only overridden), for the
        review gate's ``reviewer`` (only an operator removes its file) or a
        persona whose file is not in a user agents folder (a plugin's).  The reload parses every
        user persona in a worker thread; cancelling the caller abandons it."""
        name = unicodedata.normalize("NFC", name)
        current = self.agents.by_name(name)
        if current is None:
            raise NotFound(f"no persona {name!r}")
        if name == "reviewer":  # deleting an operator's override swaps the gate's reviewer as surely as a PUT
            raise OngridError(_REVIEWER_LOCKED)
        builtin = self.agents.builtin(name)
        if builtin is not None and current is builtin:
            raise OngridError(f"{name!r} is a built-in persona: it cannot be deleted, only overridden "
                              "(PUT a persona with the same name)")
        source = Path(current.source)
        if not await trio.to_thread.run_sync(_in_user_roots, source, list(self.config.agent_user_roots)):
            raise OngridError(f"{name!r} comes from {source}, not from a user agents folder; "
                              "it cannot be deleted through the API")
        async with self._lock:
            await trio.to_thread.run_sync(_remove_in_roots, source, self._real_roots)
            self.agents.remove(name)
        await self._record("delete", name, actor, {"path": str(source)})
        await self.reload()  # another user file of the same name, if any, now defines it (as after a restart)
        restored = self.agents.by_name(name)
        out = {"name": name, "deleted": True, "restored_builtin": restored is not None
               and restored is self.agents.builtin(name)}
        if restored is not None and not out["restored_builtin"]:  # another file of the same name takes over
            out["now_from"] = restored.source
        return out

    async def _record(self, action: str, name: str, actor: str, detail: dict) -> None:
        if self.store is None:
            return
        try:
            await self.store.plugin_store.record_change_event(kind="persona", subject=name, actor=actor,
                                                              detail={"action": action, **detail})
        except Exception:
            log.exception("change_event_failed", subject=name)

    # ---- hot reload --------------------------------------------------------
    def _fingerprint(self) -> tuple:
        entries: builtins.list[tuple[Any, ...]] = []
        for root in self.config.agent_user_roots:
            root = Path(root)
            if not root.is_dir():
                entries.append((str(root), None))
                continue
            for path in sorted(root.rglob("*.md")):
                try:
                    st = path.stat()
                except OSError:
                    continue
                entries.append((str(path), st.st_mtime_ns, st.st_size))
        return tuple(entries)

    async def reload(self) -> Any:
        """Reload the personas atomically; a file that used to load and now
        fails keeps its last persona, with a warning."""
        async with self._lock:
            agents = self.agents
            report = await trio.to_thread.run_sync(
                lambda: agents.reload(self.builder.agent_roots(), known_tools=self._known_tools()))
        self.last_reload_warnings = tuple(report.warnings)
        for line in report.warnings:
            log.warning("agents_reload_warning", message=line)
        log.info("agents_reloaded", loaded=report.loaded, skipped=report.skipped)
        return report

    async def watch(self, interval_s: float = WATCH_INTERVAL_S) -> None:
        """Reload the personas when a user agents folder changes.  Runs until cancelled.

        Event-driven: the kernel's inotify events
        (:func:`~ongridd.marketplace.fswatch.folder_changes`, read on the event
        loop) over the user roots that exist and the folders below them, changes
        within ``WATCH_DEBOUNCE_MS`` coalesced into one reload.  A root that does not
        exist is waited for by watching its nearest existing parent folder
        (that folder only, not below it): when an entry there comes or goes,
        the roots are looked at again (one ``stat`` each, in a worker thread,
        so a hung network mount stalls only the watcher) — as they are after
        each change event, which is how a watched root that goes away is
        seen.  When the set of existing roots changes, the personas reload
        and the watch restarts over the new set.  Nothing wakes between
        changes: no thread, no timer.  When inotify cannot be used (not
        Linux, its limits reached, a folder it may not read), it falls back
        to polling every root's files every ``interval_s`` seconds.  Each
        reload swaps the registry in one assignment (see :meth:`reload`).
        Cancelling stops the watcher at once.
        """
        roots = [Path(r) for r in self.config.agent_user_roots]
        if not roots:
            await self._poll(interval_s)
            return
        layout, changed_roots = await _layout(roots), False
        while True:
            now = await self._watch_events(roots, layout, reload=changed_roots)
            if now is None:  # an event watcher failed, or ended on its own
                break
            # a root appeared or went away: its files came or went with it (the next watch reloads)
            layout, changed_roots = now, now[0] != layout[0]
        await self._poll(interval_s)

    async def _watch_events(self, roots: builtins.list[Path],
                            layout: tuple[tuple[Path, ...], tuple[Path, ...]], *,
                            reload: bool) -> tuple[Any, Any] | None:
        """Reload on each batch of change events under the roots that exist (``layout[0]``),
        and watch the parents of those that do not (``layout[1]``), until the layout changes
        (returns the new one) or an event watcher fails or ends (``None``).  Once the
        watches are set up, ``reload`` reloads and the layout is looked at again: a change
        made while the watch was being (re)started is not missed."""
        from ongridd.marketplace.fswatch import folder_changes

        present, parents = layout
        changed: builtins.list[tuple[Any, Any]] = []

        # set once each watcher's watches are in place (at once for a watcher not started)
        parents_set, present_set = trio.Event(), trio.Event()
        for folders, event in ((parents, parents_set), (present, present_set)):
            if not folders:
                event.set()

        def events(paths: tuple[Path, ...], recursive: bool, ready: trio.Event) -> Any:
            # closed on the way out (aclosing): a break leaves no suspended generator, nor its inotify fd
            return contextlib.aclosing(folder_changes(*paths, debounce_ms=WATCH_DEBOUNCE_MS, recursive=recursive,
                                                      ready=ready))

        async def until_a_root_appears(cancel: trio.CancelScope) -> None:
            async with events(parents, False, parents_set) as batches:
                async for _changes in batches:
                    if (now := await _layout(roots)) != layout:
                        changed.append(now)
                        break
            cancel.cancel()

        async def once_watching(cancel: trio.CancelScope) -> None:
            # the watches are set up in worker threads: wait until every watcher has them
            await parents_set.wait()
            await present_set.wait()
            if reload:
                await self._reload_logged()
            if (now := await _layout(roots)) != layout:
                changed.append(now)
                cancel.cancel()

        try:
            async with trio.open_nursery() as nursery:
                if parents:
                    nursery.start_soon(until_a_root_appears, nursery.cancel_scope)
                nursery.start_soon(once_watching, nursery.cancel_scope)
                if present:
                    async with events(present, True, present_set) as batches:
                        async for _changes in batches:
                            if (now := await _layout(roots)) != layout:  # a watched root went away
                                changed.append(now)
                                break
                            await self._reload_logged()
                    nursery.cancel_scope.cancel()
        except* (OSError, RuntimeError) as group:  # no inotify, a root removed mid-start: poll instead
            log.warning("agents_watch_fallback_to_polling", error=str(group.exceptions[0])[:200])
            changed.clear()
        return changed[0] if changed else None

    async def _reload_logged(self) -> None:
        try:
            await self.reload()
        except Exception:
            log.exception("agents_reload_failed")

    async def _poll(self, interval_s: float) -> None:
        """The fallback watcher: compare the folders' (path, mtime, size) every ``interval_s``."""
        last = await trio.to_thread.run_sync(self._fingerprint)
        while True:
            await trio.sleep(interval_s)
            now = await trio.to_thread.run_sync(self._fingerprint)
            if now != last:
                last = now
                await self._reload_logged()


async def _layout(roots: builtins.list[Path]) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """``(the roots that are folders now, the nearest existing parent folder of each
    one that is not)``, in a worker thread: a ``stat`` that hangs, on a network mount
    gone away, never stalls the event loop (a cancel abandons it there)."""
    def look() -> tuple[tuple[Path, ...], tuple[Path, ...]]:
        present, parents = [], []
        for root in roots:
            if root.is_dir():
                present.append(root)
                continue
            parent = root.parent
            while not parent.is_dir() and parent != parent.parent:
                parent = parent.parent
            if parent not in parents:
                parents.append(parent)
        return tuple(present), tuple(parents)

    return await trio.to_thread.run_sync(look, abandon_on_cancel=True)


def _file_bytes(source: Any) -> bytes | None:
    """The bytes of a persona's file, or None when it is not a regular file
    of at most MAX_FILE_BYTES."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)  # a FIFO in its place cannot block
    except (OSError, TypeError, ValueError):
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
                return None
            raw = fh.read(MAX_FILE_BYTES + 1)
        return raw if len(raw) <= MAX_FILE_BYTES else None
    except OSError:
        return None


def _as_sent(warning: str, path: Path) -> str:
    """A parse warning about a PUT body as the body's, not the file's: ``PATH:3: invalid YAML …; file
    skipped`` → ``line 3 of the text sent: invalid YAML …`` (the file was not touched)."""
    text, prefix = warning, f"{path}:"
    text = text.removesuffix("; file skipped")
    if text.startswith(prefix):
        rest = text[len(prefix):]
        line, sep, after = rest.partition(": ")
        text = f"line {line} of the text sent: {after}" if sep and ascii_digits(line) else f"the text sent:{rest}"
    return text


def _open_dir_in_roots(directory: Path, roots: list[Path]) -> int:
    """A file descriptor of ``directory`` (created if missing) that lies in one of ``roots``
    (real paths, resolved once when the daemon started).

    Checked before a missing folder is created (none is made outside the roots) and again on
    the open descriptor, not on the path: a folder swapped for a symlink after the caller looked
    at it cannot redirect the write or the removal that follows through the descriptor (a symlink
    that leads to a folder inside the roots is fine).  Raises OngridError when the folder lies
    outside every root; the caller closes the descriptor."""
    def inside(real: Path) -> bool:
        return any(real == r or r in real.parents for r in roots)

    if not inside(Path(os.path.realpath(directory))):
        raise OngridError(f"{directory} is not in a user agents folder (it resolves to {os.path.realpath(directory)})")
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            real = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # no /proc: the path, resolved now, must still be this very folder
            real = directory.resolve()
            here, there = os.fstat(fd), os.stat(real)
            if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino):
                raise OngridError(f"{directory} changed while it was being written to") from None
        if not inside(real):
            raise OngridError(f"{directory} is not in a user agents folder (it resolves to {real})")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _write_atomic(directory: Path, path: Path, text: bytes, roots: list[Path]) -> None:
    """Replace ``path`` (a file in ``directory``) by a file holding ``text`` (a
    temporary file renamed over it), through a descriptor of ``directory``
    checked to lie in ``roots`` (:func:`_open_dir_in_roots`): no symlink swapped
    in on the way makes it write elsewhere.  The file keeps the mode of the one
    it replaces; a new one gets 0666 less the process umask, as any file the
    daemon creates.  Raises OngridError (outside the roots) or OSError."""
    dir_fd = _open_dir_in_roots(directory, roots)
    try:
        tmp = f".tmp-{secrets.token_hex(8)}.md"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666,
                     dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                with contextlib.suppress(FileNotFoundError):
                    old = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
                    if stat.S_ISREG(old.st_mode):
                        os.fchmod(fh.fileno(), stat.S_IMODE(old.st_mode))
                fh.write(text)
            os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)


def _remove_in_roots(path: Path, roots: list[Path]) -> None:
    """Remove the file ``path`` through a descriptor of its folder checked to lie
    in ``roots`` (:func:`_open_dir_in_roots`); a file already gone is no error."""
    dir_fd = _open_dir_in_roots(path.parent, roots)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path.name, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def _in_user_roots(source: Path, roots: list[Path]) -> bool:
    """Whether ``source`` lies in one of the user agents folders (resolves paths: file system calls)."""
    resolved = source.resolve()
    return any(r == resolved.parent or r in resolved.parents for r in (Path(x).resolve() for x in roots))
