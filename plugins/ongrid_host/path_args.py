"""Check the paths a parsed ``host_bash`` command would read.

The parse (:mod:`ongrid_host.optspec`, :mod:`ongrid_host.expr_rules`) says
which words are paths and how they are read — it knows the tables, so no
word is guessed to be a path:

* ``read``: a file (or folder) whose contents the command reads — every
  file operand of ``cat``/``grep``/``sed``…, option values such as
  ``--files0-from``, ``-f FILE``, ``journalctl -D DIR``;
* ``recursive``: a folder read with everything under it (``grep -r``): it
  must neither be nor contain a forbidden area;
* ``journal``: a journal file ``journalctl --file`` reads (it prints only
  the fields of its own allowlist; any other command is refused one);
* ``certificate``: the file ``openssl x509`` reads, which prints a
  certificate's fields and never a key (TLS folders and names allowed).

Operands that are only names (``ls``, ``stat``, ``du``, ``find`` starting
points) are not checked: listing names and metadata reads no secret.

Each path is checked with :class:`~ongrid_host.path_policy.PathPolicy`
(lexically and, locally, by its real path — this may block on a hung
mount, so callers run it off the event loop) and against the secret-file
patterns below.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from urllib.parse import unquote
from collections.abc import Callable, Iterator, Sequence

from ongrid_host.path_policy import JOURNAL_NAMES, PathPolicy

#: paths whose contents are secrets, by name (also where the policy's areas
#: do not cover them, e.g. a user's key outside a home folder)
SECRET_PATTERNS = ("*environ*", "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
                   "*/.ssh/id_*", "/etc/ssh/ssh_host_*_key")


def secret_problem(path: str) -> str | None:
    """Why ``path`` names a secrets file by its spelling, or None."""
    norm = posixpath.normpath(path) if path.startswith("/") else path
    for pat in SECRET_PATTERNS:
        if (fnmatch.fnmatchcase(path, pat) or fnmatch.fnmatchcase(norm, pat)) and not norm.endswith(".pub"):
            return f"'{path}' names a secrets file ({pat})"
    return None


#: how a path of each role is checked (any other role: :meth:`PathPolicy.read_problem`)
_ROLE_CHECKS: dict[str, Callable[[PathPolicy, str], str | None]] = {
    "recursive": PathPolicy.recursive_problem,
    "certificate": PathPolicy.certificate_problem,
    "journal": lambda policy, path: policy.read_problem(path, JOURNAL_NAMES),
    # its contents are printed: a file holding one of the daemon's own secrets is not read
    "read": lambda policy, path: policy.read_problem(path, scan_secrets=True),
    # searched, sorted, or cut into pieces (grep, sed, sort, head -c): nor is a file that could not be checked
    "read-checked": lambda policy, path: policy.read_problem(path, scan_secrets=True, checked=True),
    "recursive-checked": lambda policy, path: policy.recursive_problem(path, checked=True),
}


def role_problem(path: str, role: str, policy: PathPolicy) -> str | None:
    """Why ``path`` may not be read in ``role`` (see :data:`_ROLE_CHECKS`; any other role:
    :meth:`PathPolicy.read_problem`), or None."""
    return _ROLE_CHECKS.get(role, PathPolicy.read_problem)(policy, path)


def paths_problem(paths: Sequence[tuple[str, str]], policy: PathPolicy) -> str | None:
    """Why one of ``paths`` ((word, role) pairs) may not be read, or None."""
    for path, role in dict.fromkeys(paths):
        if not path or path == "-":
            continue
        problem = secret_problem(path)
        if problem is None:
            problem = role_problem(path, role, policy)
        if problem:
            return problem if not role.startswith("recursive") else f"recursive search: {problem}"
    return None


#: what ends a path inside a word that is not a path itself (``--file=/etc/shadow``, ``@/etc/shadow``,
#: ``cat /etc/shadow`` as an interpreter's script, ``a:/b`` lists)
_NOT_IN_PATH = re.compile(r"""[\s'"`;|&<>(){}$=@:,]+""")


#: the most folder × name pairs a change's words may make (:func:`change_paths_problem`); more is
#: refused rather than left unchecked
MAX_JOINED = 8192


def change_paths_problem(argv: Sequence[str], policy: PathPolicy) -> str | None:
    """Why a command that is not read-only may not name one of its paths
    (:meth:`PathPolicy.change_problem`), or None.  Its paths are every piece of ``argv[1:]``
    that is an absolute or ``~`` path, or a relative one holding a ``/``, inside option values
    and scripts too: a command off the allowlist has no table saying which words are paths.
    And since it may run in any folder it names (``tar -C DIR``, ``env --chdir=DIR``, ``tar
    czfC X DIR``, a script's ``cd -P DIR``, in any spelling or abbreviation), every name it
    writes is also taken inside every folder it writes: ``tar -czC /etc -f x ongrid`` names
    ``/etc/ongrid``.  More than :data:`MAX_JOINED` such pairs is refused."""
    paths, folders, names = _named_paths(argv)
    if policy.resolve and policy.cwd:  # a relative name is read where the command starts, too
        folders = list(dict.fromkeys([*folders, policy.cwd]))
    if len(folders) * len(names) > MAX_JOINED:
        return (f"it writes {len(folders)} folders and {len(names)} names, too many to check each name in each "
                "folder; split the command")
    joined = [posixpath.join(folder, name) for folder in folders for name in names]
    for path in dict.fromkeys([*paths, *joined]):
        problem = secret_problem(path) or policy.change_problem(path)
        if problem:
            return problem
    return None


#: a URL inside a word: a ``file:`` URL's path is a path (percent-decoded, as curl reads it); another
#: scheme's path names no file here (``https://x/v1/credentials``, ``s3://bucket/secrets/``)
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,31})://([^\s'\"]*)")

#: a piece that makes the next one the folder later names are read from: ``tar -C DIR``,
#: ``--directory=DIR``, ``env --chdir DIR``, ``git -C DIR``, a script's ``cd DIR`` / ``os.chdir(DIR)``
_DIRECTORY_SWITCHES = frozenset({"-C", "cd", "pushd", "chdir", "os.chdir", "Dir.chdir"})

#: a name a command run in a folder may read there (``tar -C /etc -c shadow``, ``ssl/private/k.pem``)
_NAME = re.compile(r"[\w.@+~/-]+")


def _switch(piece: str) -> bool:
    """Whether ``piece`` makes the next word the folder a command runs in: a name of
    :data:`_DIRECTORY_SWITCHES`, ``--directory`` or ``--chdir``, or an abbreviation of one."""
    return piece in _DIRECTORY_SWITCHES or (len(piece) >= 3 and "--directory".startswith(piece)) or (
        len(piece) >= 4 and "--chdir".startswith(piece))


def _pieces(argv: Sequence[str]) -> Iterator[tuple[str, bool]]:
    """``(piece, folder)`` for each piece of ``argv[1:]`` that may be a path or a name — a ``file:``
    URL's path, each word's pieces between the characters of :data:`_NOT_IN_PATH`, the value glued
    to a short option (``-Cetc``, ``-Ttmp/x``, ``-czC/etc``) — ``folder`` when it is the value of a
    folder switch."""
    switched = False
    for word in argv[1:]:
        if "://" in word:
            for url in _URL.finditer(word):
                if url.group(1).lower() == "file":
                    yield unquote("/" + url.group(2).partition("/")[2]), False
            word = _URL.sub(" ", word)
        for piece in _NOT_IN_PATH.split(word):
            if not piece:
                continue
            if _switch(piece):
                switched = True
                continue
            if "%" in piece:  # percent-encoded: checked both ways
                yield unquote(piece), False
            if piece[0] == "-":
                if piece[:2] != "--" and piece.endswith("C"):  # a bundle ending in -C: -czC DIR
                    switched = True
                    continue
                if piece[:2] != "--" and len(piece) > 2:  # a value glued to a short option, or to -C in a bundle
                    at = piece.find("C", 1)
                    if 0 < at < len(piece) - 1:
                        yield piece[at + 1:], True
                    yield piece[2:], False
                    if "/" in piece:
                        yield piece[piece.index("/"):], False
                continue
            yield piece, switched
            switched = False


def _named_paths(argv: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """``(paths, folders, names)`` that ``argv[1:]`` writes (its :func:`_pieces`): every path (see
    :func:`change_paths_problem`); every folder a command could run in — each absolute path, each
    relative name taken from ``/``, each folder a chain of switches leads to (``-C/etc -Cssl``,
    ``cd /etc; cd ssl``); and every relative name, which it could read inside any of them."""
    paths: list[str] = []
    folders: list[str] = []
    names: list[str] = []  # each also a folder, from /: checked after the folders written as such
    folder: str | None = None
    for piece, switched in _pieces(argv):
        if piece.startswith("~"):
            user, _, rest = piece[1:].partition("/")
            piece = ("/root" if not user else f"/home/{user}") + ("/" + rest if rest else "")
        if switched:
            folder = posixpath.join(folder or "/", piece)
            folders.append(folder)
        if "/" in piece:
            paths.append(piece)
        if piece.startswith("/"):
            folders.append(piece)
        elif _NAME.fullmatch(piece):
            names.append(piece)
    return paths, list(dict.fromkeys([*folders, *("/" + name for name in names)])), list(dict.fromkeys(names))
