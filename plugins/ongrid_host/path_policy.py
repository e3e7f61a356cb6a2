"""Which paths ``host_bash`` may read, judged by what they resolve to.

A path is checked twice: lexically (``//``, ``.`` and ``..`` collapsed,
relative paths joined to the folder the command runs in) and, on the local
host, physically (``os.path.realpath``: symlinks followed, so
``/proc/self/root/etc/shadow`` is ``/etc/shadow``).  Either form landing in
a forbidden area refuses the command.

Forbidden areas: ``/proc``, ``/sys``, ``/dev`` (process environments hold the
daemon's API keys; devices never end), password and sudo files, ssh keys
(``/etc/ssh/*key*``, any ``.ssh`` folder), ``/etc/ssl/private``,
``/etc/ongrid``, the daemon's state folder and its config file.  A
*recursive* read is refused when its target is inside an area or contains
one (``grep -r x /etc`` would read ``/etc/shadow``).

On a remote host symlinks cannot be followed from here, so only the lexical
check applies there, and a relative path with ``..`` (its folder is the ssh
user's home, not known here) is refused.
"""

from __future__ import annotations

import os
import posixpath
import pwd
from collections.abc import Iterable

import attrs

#: (area, why) — reading anything at or under the area is refused
FIXED_AREAS: tuple[tuple[str, str], ...] = (
    ("/proc", "/proc (process environments and memory hold secrets)"),
    ("/sys", "/sys (kernel interfaces)"),
    ("/dev", "/dev (devices: endless or raw data)"),
    ("/etc/shadow", "a password-hash file"),
    ("/etc/shadow-", "a password-hash file"),
    ("/etc/gshadow", "a password-hash file"),
    ("/etc/gshadow-", "a password-hash file"),
    ("/etc/sudoers", "the sudo policy"),
    ("/etc/sudoers.d", "the sudo policy"),
    ("/etc/ssl/private", "TLS private keys"),
    ("/etc/ongrid", "Ongrid's configuration (tokens)"),
    ("/root/.ssh", "ssh keys"),
)
#: folders holding secrets by name (reading the folder recursively is refused)
_KEY_FOLDERS = ("/etc/ssh",)


def normalize(path: str, cwd: str | None) -> str:
    """``path`` joined to ``cwd`` (when relative and cwd is known), with
    ``.``/``..`` and repeated slashes collapsed (``//proc`` → ``/proc``)."""
    if cwd is not None and not path.startswith("/"):
        path = posixpath.join(cwd, path)
    norm = posixpath.normpath(path)
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    return norm


def _under(path: str, root: str) -> bool:
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


@attrs.frozen
class PathPolicy:
    """Where commands run and what they may not read.

    ``cwd``: the folder the command runs in (None: unknown, a remote home).
    ``resolve``: follow symlinks with ``os.path.realpath`` (local host only).
    ``areas``: (path, why) pairs of forbidden areas (see the module docstring).
    """

    cwd: str | None = "/"
    resolve: bool = True
    areas: tuple[tuple[str, str], ...] = FIXED_AREAS

    @classmethod
    def local(cls, *, extra: Iterable[tuple[str, str]] = (), cwd: str = "/") -> PathPolicy:
        """The policy for this host: the fixed areas, every local user's
        ``~/.ssh`` (from the password database) and ``extra`` (state dir…),
        each also by its real path."""
        areas = list(FIXED_AREAS) + list(extra)
        try:
            homes = {u.pw_dir for u in pwd.getpwall() if u.pw_dir.startswith("/") and u.pw_dir != "/"}
        except OSError:  # pragma: no cover - no passwd database
            homes = set()
        areas += [(posixpath.join(h, ".ssh"), "ssh keys") for h in sorted(homes)]
        both = []
        for area, why in areas:
            both.append((normalize(area, cwd), why))
            real = os.path.realpath(area)
            if real != area:
                both.append((real, why))
        return cls(cwd=cwd, resolve=True, areas=tuple(dict.fromkeys(both)))

    @classmethod
    def remote(cls) -> PathPolicy:
        """The policy for a host reached over ssh (lexical checks only)."""
        return cls(cwd=None, resolve=False, areas=FIXED_AREAS)

    def forms(self, path: str) -> tuple[str | None, list[str]]:
        """(problem, the forms of ``path`` to check)."""
        if self.cwd is None and not path.startswith("/") and ".." in path.split("/"):
            return (f"relative path '{path}' with '..' cannot be checked on a remote host "
                    "(its folder is the ssh user's home); write the absolute path"), []
        lex = normalize(path, self.cwd)
        out = [lex]
        if self.resolve:
            try:
                real = os.path.realpath(lex if lex.startswith("/") else path)
            except (OSError, ValueError):
                real = lex
            if real not in out:
                out.append(real)
        return None, out

    def _area_of(self, form: str) -> str | None:
        for area, why in self.areas:
            if _under(form, area):
                return f"{area}: {why}" if area not in why else why
        parts = form.split("/")
        if ".ssh" in parts:
            return "a .ssh folder (ssh keys)"
        base = parts[-1].lower()
        if any(_under(form, k) for k in _KEY_FOLDERS) and "key" in base:
            return "an ssh host key"
        if "environ" in form:
            return "a process environment"
        return None

    def read_problem(self, path: str) -> str | None:
        """Why reading the file ``path`` is refused, or None."""
        problem, forms = self.forms(path)
        if problem:
            return problem
        for form in forms:
            area = self._area_of(form)
            if area:
                shown = f"'{path}'" if form == path else f"'{path}' (resolves to {form})"
                return f"path {shown} would read {area}"
        return None

    def recursive_problem(self, path: str) -> str | None:
        """Why reading everything under ``path`` is refused, or None: it is
        itself forbidden, or it contains a forbidden area."""
        problem = self.read_problem(path)
        if problem:
            return problem
        if self.cwd is None and not path.startswith("/"):
            return (f"recursive read of relative path '{path}' on a remote host: it is under the ssh user's "
                    "home, which holds .ssh keys; name an absolute folder")
        _, forms = self.forms(path)
        for form in forms:
            inner = [a for a, _ in self.areas] + list(_KEY_FOLDERS)
            for area in inner:
                if _under(area, form):
                    return f"recursive read of '{path}' (resolves to {form}) would include {area}"
            home_like = form in ("/home", "/root") or (form.startswith("/home/") and form.count("/") == 2)
            if home_like:
                return f"recursive read of '{path}' would include a home folder's .ssh keys"
        return None
