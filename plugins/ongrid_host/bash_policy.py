"""What ``host_bash`` may run, and why not.

A command string is first checked as *syntax*: it is split with ``shlex``
and run without a shell, so everything a shell would interpret — ``;``,
``&&``, ``||``, ``|``, ``&``, redirections, backticks, ``$(…)``, ``${…}``,
``$VAR``, unquoted globs and ``~``, newlines — is refused outright (it would
not do what was meant), and so are look-alike characters (invisible
characters, non-ASCII spaces, a dash that only looks like ``-`` starting a
word, a non-ASCII command name).

Then the command is read against a **strict allowlist**: every allowlisted
command has a table of the options it may take read-only
(:mod:`ongrid_host.commands`; ``find``, ``sed`` scripts, ``ps``, ``ip`` and
``openssl x509`` have their own grammars), and the argv that runs is rebuilt from that parse —
never the raw words.  The verdict is one of:

* ``read``: on the allowlist and every word understood; ``argv`` is the
  canonical form.  Runs at once, also for read-only personas.
* ``write``: not on the allowlist, or an allowlisted command with an option,
  verb or operand that is not read-only (``systemctl restart``, ``sort -o``,
  an option not in its table).  ``argv`` is the words as written; it runs
  only after the review gate approved that very call, and never for a
  read-only persona.  ``reason`` says exactly what is not read-only.
* ``refused``: never runs, for anyone: bad syntax, a malformed or ambiguous
  option, a command that never ends, and every **forbidden path** (a secret,
  ``/proc``, ``/sys``, ``/dev`` except the safe kernel files of
  :mod:`ongrid_host.path_policy`) named by an allowlisted command; and a
  path that holds secrets only (a key, a password file, a process's
  environment or memory, Ongrid's configuration and state:
  :meth:`~ongrid_host.path_policy.PathPolicy.change_problem`) named by any
  other command, in a word or a piece of one (``base64 /etc/shadow``,
  ``--in=/root/.ssh/id_rsa``, a script's ``cat /etc/shadow``).  Reading a
  secret is not a change a reviewer could approve, so it is not proposed.
  (A script can still build a path no check here sees,
  ``sh -c 'cat /e""tc/shadow'``: that is what the reviewer reads a
  proposal for.)
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shlex
import stat
import unicodedata
from typing import Any

import attrs

from ongrid_host.commands import SPECS, SYSTEMCTL, grep_recursive, reads_by_position, systemctl_canonical
from ongrid_host.expr_rules import parse_find
from ongrid_host.optspec import REFUSED, WRITE, Refusal, parse
from ongrid_host.path_args import change_paths_problem, paths_problem, role_problem
from ongrid_host.path_policy import PathPolicy, closed_folder_problem, grep_exclusions, open_pinned
from ongrid_host.proc_rules import parse_ip, parse_ps
from ongrid_host.x509_rules import parse_openssl

from ongridd.plugins.api import ToolError, bytes_hold_secret, holds_any_secret

MAX_CMD_CHARS = 4096


@attrs.frozen
class Verdict:
    """``kind``: ``refused`` (never runs), ``read`` (allowlisted) or ``write``.
    ``argv``: the words to run (empty when refused; the canonical argv for
    ``read``; the words as written for ``write``).  ``reason``: why refused,
    or why not read-only (for ``write``)."""

    kind: str
    argv: tuple[str, ...] = ()
    reason: str = ""
    #: a local read's files, as checked: ``(index in argv, where in that word the path starts, device,
    #: inode)`` (see :func:`_pins`)
    pins: tuple[tuple[int, int, int, int], ...] = ()
    #: ``pgrep -f``: the processes' command lines are checked again after the run (:func:`after_run_problem`)
    recheck_processes: bool = False


# ---- syntax -------------------------------------------------------------------

_OPERATORS = {
    ";": "';' (command separator)",
    "&": "'&' (background / '&&' chain)",
    "|": "'|' (pipe / '||' chain)",
    ">": "'>' (output redirection)",
    "<": "'<' (input redirection)",
    "(": "'(' (subshell)",
    ")": "')' (subshell)",
}


def syntax_problem(cmd: str) -> str | None:
    """Why ``cmd`` is refused as shell syntax, or None.  Quoted characters
    (inside '…' or "…") are literal words and allowed, except that ``$`` and
    backticks are refused inside double quotes too (a shell would expand them)."""
    if not cmd.strip():
        return "empty command"
    if len(cmd) > MAX_CMD_CHARS:
        return f"command longer than {MAX_CMD_CHARS} characters"
    for ch, name in (("\n", "newline"), ("\r", "carriage return"), ("\0", "NUL byte")):
        if ch in cmd:
            return f"{name} in the command: one command per call, no multi-line scripts"
    quote: str | None = None
    i = 0
    word_start = True
    while i < len(cmd):
        c = cmd[i]
        if quote == "'":
            if c == "'":
                quote = None
        elif c == "\\" and quote != "'":
            i += 2
            word_start = False
            continue
        elif c == "`":
            return "backtick command substitution (`…`) is not supported: commands run without a shell"
        elif c == "$" and i + 1 < len(cmd) and (cmd[i + 1] in "({" or cmd[i + 1].isalpha() or cmd[i + 1] in "_"):
            nxt = cmd[i + 1]
            var = re.match(r"\$[A-Za-z_][A-Za-z0-9_]*", cmd[i:])
            what = {"(": "command substitution '$(…)'", "{": "parameter expansion '${…}'"}.get(
                nxt, f"variable expansion '{var.group(0) if var else '$'}'")
            return f"{what} is not supported: commands run without a shell, nothing is expanded"
        elif quote == '"':
            if c == '"':
                quote = None
        elif c in "'\"":
            quote = c
        elif c in _OPERATORS:
            pair = cmd[i:i + 2]
            label = {"&&": "'&&' (command chain)", "||": "'||' (command chain)", ">>": "'>>' (append redirection)"}.get(
                pair, _OPERATORS[c])
            return f"shell operator {label} at position {i}: one command per call, no pipes, chains or redirections"
        elif c == "#" and word_start:
            return f"unquoted '#' at position {i} starts a comment in a shell; quote it if it is an argument"
        elif c in "{}":
            return (f"unquoted brace {c!r} at position {i}: there is no shell, so brace expansion does not "
                    "happen; quote it if it is an argument")
        elif c in "*?[":
            return (f"unquoted glob character {c!r} at position {i}: there is no shell, so it would be passed "
                    "literally and match nothing; name the files, or quote a pattern for a command that takes "
                    "one (find -name '*.log')")
        elif c == "~" and word_start:
            return "unquoted '~' is not expanded (no shell): write the absolute path"
        word_start = c in " \t" and quote is None
        i += 1
    if quote is not None:
        return f"unbalanced {quote} quote"
    return None


def split(cmd: str) -> tuple[list[str] | None, str | None]:
    """(argv, None) or (None, reason)."""
    problem = syntax_problem(cmd)
    if problem:
        return None, problem
    try:
        argv = shlex.split(cmd)
    except ValueError as exc:
        return None, f"cannot parse the command: {exc}"
    if not argv:
        return None, "empty command"
    return argv, None


# ---- look-alike characters ------------------------------------------------------

_DASHES = {"\u2212", "\ufe63", "\uff0d", "\u2010", "\u2011", "\u2012", "\u2013", "\u2014", "\u2015"}


def _char(c: str) -> str:
    return f"U+{ord(c):04X} ({unicodedata.name(c, 'unnamed')})"


def lookalike_problem(argv: list[str]) -> str | None:
    """Why a word is refused for a character that looks like something it
    is not, or None: invisible (format) characters, non-ASCII spaces, a word
    line and paragraph separators (U+2028, U+2029), a word starting with a dash
    look-alike, a non-ASCII command name."""
    for k, word in enumerate(argv):
        for c in word:
            cat = unicodedata.category(c)
            if cat in ("Cf", "Cc", "Cs", "Zl", "Zp") or (cat == "Zs" and c != " "):
                return f"word {k + 1} {word!r} contains the invisible, unpaired or non-ASCII space character {_char(c)}"
        if word and (word[0] in _DASHES or unicodedata.category(word[0]) == "Pd" and word[0] != "-"):
            return (f"word {k + 1} {word!r} starts with {_char(word[0])}, which looks like '-' but is not one; "
                    "write options with the ASCII '-'")
    if argv and not argv[0].isascii():
        bad = next(c for c in argv[0] if not c.isascii())
        return f"command name {argv[0]!r} contains the non-ASCII character {_char(bad)}"
    return None


# ---- the allowlist ----------------------------------------------------------------------

#: every allowlisted command (the getopt-style tables plus the own grammars)
ALLOWLIST = frozenset({*SPECS, "find", "ps", "ip", "mount", "openssl"})

_CMD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\Z")

_DEFAULT_POLICY: PathPolicy | None = None


def default_policy() -> PathPolicy:
    """The local-host :class:`PathPolicy` without daemon-specific areas
    (built once; see :meth:`PathPolicy.local`)."""
    global _DEFAULT_POLICY
    if _DEFAULT_POLICY is None:
        _DEFAULT_POLICY = PathPolicy.local()
    return _DEFAULT_POLICY


#: a word lsof takes as the address of the ``-i`` before it (``lsof -i :6379``, ``-i tcp:80``, ``-i 4``)
_LSOF_ADDRESS = re.compile(r"(?:[46]|[46]?(?:tcp|udp|TCP|UDP))?(?:@\S+)?(?::\S+)?\Z")


def _lsof_address_attached(args: list[str]) -> list[str]:
    """``args`` with an address written after ``-i`` as its own word joined to it (``-i :6379`` →
    ``-i:6379``), as lsof reads it: left apart, the canonical form put it after ``--``, where lsof
    took it for a file name and reported nothing listening."""
    out: list[str] = []
    for word in args:
        if out and out[-1] == "-i" and word and word[0] in ":@46tuTU" and _LSOF_ADDRESS.match(word):
            out[-1] = "-i" + word
        else:
            out.append(word)
    return out


def _refuse_oracles(name: str, parsed: Any) -> None:
    """Refuse a search of what is never checked for the daemon's own secrets, while it holds any:
    its answer (a match or none, a count) would tell a secret a pattern at a time (``journalctl -g
    'bot1234[0-4]'``, ``pgrep -c -f``), however the lines it prints are redacted.  ``journalctl
    -g`` (the journal is not checked: ``search_logs`` searches it as its hits are shown), and
    ``pgrep -f`` while a process's command line holds a secret."""
    if not holds_any_secret():
        return
    if name == "journalctl" and parsed.has("g", "grep"):
        raise Refusal(REFUSED, "journalctl: -g searches the journal's unredacted text, which is not checked for "
                               "the secrets Ongrid itself is configured with, so whether it matches could tell one; "
                               "use search_logs (it searches entries as they are shown), or filter by -u, -p and "
                               "--since and read the entries")
    if name == "pgrep" and parsed.has("f", "full") and (pid := _process_holding_secret()) is not None:
        raise Refusal(REFUSED, f"pgrep: -f matches full command lines, and process {pid}'s holds a secret Ongrid "
                               "itself is configured with, so whether it matches could tell the secret; match the "
                               "process name (without -f), or list processes with ps")


def after_run_problem(verdict: Verdict) -> str | None:
    """Why the output of a local read that has run must be withheld, or None: ``pgrep -f`` while
    a process whose command line holds one of the daemon's secrets is running now — it may have
    started after the check before the run (:func:`_refuse_oracles`) and matched.  A process that
    started and ended within the run is not seen.  Blocking (reads ``/proc``): call it in a thread."""
    if verdict.kind != "read" or not verdict.recheck_processes or not holds_any_secret():
        return None
    pid = _process_holding_secret()
    if pid is None:
        return None
    return (f"pgrep: -f matches full command lines, and process {pid}'s, which started while it ran, holds a "
            "secret Ongrid itself is configured with, so whether it matched could tell the secret; match the "
            "process name (without -f), or list processes with ps")


def _process_holding_secret() -> str | None:
    """The id of a process on this host whose command line holds one of the daemon's secrets, or
    None (``/proc/<pid>/cmdline``; processes that end or cannot be read meanwhile are skipped)."""
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if bytes_hold_secret(fh.read(1 << 20).replace(b"\0", b" ")):
                    return pid
        except OSError:
            continue
    return None


def parse_allowlisted(name: str, args: list[str], *, local: bool = True) -> tuple[
        tuple[str, ...], list[tuple[str, str]], tuple[tuple[int, int, str, bool], ...]]:
    """(canonical argv, [(path, role)] to check, [(index in argv, where the path starts in that
    word, role, an operand)] of the files it reads) for an allowlisted command.

    Raises :class:`~ongrid_host.optspec.Refusal` for the first word that is
    not read-only, and (``local``: on this host) for a search whose answer could tell one of the
    daemon's secrets (:func:`_refuse_oracles`)."""
    if name == "find":
        argv, paths = parse_find(args)
        return argv, paths, _value_pins(argv, "-files0-from", "read")
    if name == "ps":
        return parse_ps(args), [], ()
    if name == "ip":
        return parse_ip(args), [], ()
    if name == "openssl":
        argv, paths = parse_openssl(args)
        return argv, paths, _value_pins(argv, "-in", "certificate")
    if name == "mount":
        if args:
            raise Refusal(WRITE, "mount: only allowed without arguments (with arguments it changes mounts)")
        return ("mount",), [], ()
    spec = SPECS[name]
    if name == "lsof":
        args = _lsof_address_attached(args)
    parsed = parse(spec, args)
    if local:  # (an ssh host holds neither the daemon's configuration nor its environment)
        _refuse_oracles(name, parsed)
    if spec is SYSTEMCTL:
        parsed = systemctl_canonical(parsed)
    paths = parsed.paths()
    if name in ("grep", "egrep") and grep_recursive(parsed) and "recursive" not in parsed.roles:
        paths.append((".", "recursive"))  # no folder named: grep -r reads the folder it runs in
    if name in _FILES_ONLY and not local:
        # on this host the pin refuses a folder; on another, a folder cannot be told from a file
        # before the command runs there, and the names of the files it would read in one are not seen
        raise Refusal(REFUSED, f"{name} runs on this host only: on an ssh host a folder cannot be told from a "
                               f"file before it runs, and {name} reads the files in a folder it is given; compare "
                               "checksums there (sha256sum FILE1 FILE2) or read each file")
    if not reads_by_position(parsed):  # its output depends on what the files hold: they must have been checked
        paths = [(path, f"{role}-checked" if role in ("read", "recursive") else role) for path, role in paths]
    argv = parsed.argv()
    if name in ("grep", "egrep") and grep_recursive(parsed):
        if parsed.has("z", "null-data"):
            raise Refusal(REFUSED, f"{name}: -z with a recursive search would read binary files (a journal, an "
                                   "archive) as text; name the files to read")
        # after every option written: of contradictory --include and --exclude options GNU grep
        # applies the last one that matches, so a written --include='*' cannot undo them; and binary
        # files it comes across (a copied journal, an archive, a database) are skipped, -a or not:
        # only the files a command names are looked at before it runs
        end = len(argv) - len(parsed.operands) - (1 if parsed.operands and parsed.end_marker else 0)
        # and devices and FIFOs it walks into are skipped (-D read would open them, unchecked)
        argv = (*argv[:end], *grep_exclusions(), "--binary-files=without-match", "--devices=skip", *argv[end:])
    if name == "sed":
        argv = (argv[0], "--sandbox", *[w for w in argv[1:] if w != "--sandbox"])
    return argv, paths, () if name in _NOT_PINNED else _pin_targets(parsed, argv)


def _value_pins(argv: tuple[str, ...], option: str, role: str) -> tuple[tuple[int, int, str, bool], ...]:
    """The pin target of the word after ``option`` in ``argv`` (a grammar of its own: ``find
    -files0-from F``, ``openssl x509 -in F``), in ``role``; none when it is not there."""
    return tuple((at + 1, 0, role, False) for at, word in enumerate(argv[:-1]) if word == option)


#: commands that open the operands they only report on (``df FILE`` opens it to find its mount):
#: pinned, in their role, so that nothing but the file checked is opened
_OPENS_META = frozenset({"df"})


def _pin_targets(parsed: Any, argv: tuple[str, ...]) -> tuple[tuple[int, int, str, bool], ...]:
    """``(index in argv, where in that word the path starts, role, an operand)`` of every file (role ``read``
    or ``read-checked``) and folder (``recursive``) the command reads where ``argv`` names it: an
    operand (after ``--``: the whole word) or an option's value (``-f FILE``; ``--files0-from=FILE``:
    after the ``=``).  Each is pinned to what was checked (see :func:`_pins`)."""
    checked = "read" if reads_by_position(parsed) else "read-checked"
    out: list[tuple[int, int, str, bool]] = []
    taken: set[int] = set()
    for opt, value in parsed.options:
        if value is None or opt.role not in ("read", "recursive", "journal"):
            continue
        words = opt.words(value)
        for at in range(1, len(argv) - len(words) + 1):
            if tuple(argv[at:at + len(words)]) == tuple(words) and at not in taken:
                taken.add(at)
                last = argv[at + len(words) - 1]
                start = len(last) - len(value) if last.endswith(value) else 0
                out.append((at + len(words) - 1, start, checked if opt.role == "read" else opt.role, False))
                break
    if parsed.end_marker:
        first = len(argv) - len(parsed.operands)
        for k, role in enumerate(parsed.roles):
            if role in ("read", "recursive") or (role == "meta" and parsed.name in _OPENS_META):
                out.append((first + k, 0, checked if role == "read" else role, True))
    return tuple(out)


#: commands that change a file's metadata or remove it and never print or copy what it holds: they
#: may name a secret's path (chmod 600 of a key, rm of an old sudoers file) and still go to review
METADATA_ONLY = frozenset({"chmod", "chown", "chgrp", "chattr", "setfacl", "touch", "rm", "rmdir", "unlink",
                           "truncate", "shred"})


def _proposed(argv: list[str], reason: str, policy: PathPolicy) -> Verdict:
    """A command that is not read-only, for the review gate — unless a path it names holds
    secrets only and the command is not one of :data:`METADATA_ONLY`."""
    problem = None if argv[0].rsplit("/", 1)[-1] in METADATA_ONLY else change_paths_problem(argv, policy)
    if problem:
        return Verdict("refused", reason=f"{argv[0]}: forbidden path: {problem}; reading a secret is not a change "
                                         "a reviewer could approve")
    return Verdict("write", tuple(argv), reason)


def analyze(cmd: str, policy: PathPolicy | None = None) -> Verdict:
    """Classify one ``host_bash`` command string (see the module docstring).

    ``policy``: where the command runs and which paths it may not read
    (default: this host, run in ``/``); every path is checked by what it
    resolves to (see :mod:`ongrid_host.path_args`).  Path resolution can
    block on a hung mount: call this off the event loop.
    """
    if not isinstance(cmd, str):
        return Verdict("refused", reason="cmd must be a string")
    argv, problem = split(cmd)
    if argv is None:
        return Verdict("refused", reason=problem or "cannot parse")
    problem = lookalike_problem(argv)
    if problem:
        return Verdict("refused", reason=problem)
    name, args = argv[0], argv[1:]
    policy = policy or default_policy()
    if "=" in name:
        return Verdict("refused", reason=f"'{name}' looks like a variable assignment; there is no shell, "
                                         "so environment assignments are not supported")
    if "/" in name:
        return _proposed(argv, f"'{name}' is a path; the allowlist names bare commands "
                               f"(write '{name.rsplit('/', 1)[-1]}')", policy)
    if not _CMD_NAME.match(name) or name not in ALLOWLIST:
        return _proposed(argv, f"'{name}' is not on the read-only allowlist ({', '.join(sorted(ALLOWLIST))})",
                         policy)
    try:
        canonical, paths, pin_targets = parse_allowlisted(name, args, local=policy.resolve)
    except Refusal as exc:
        reason = exc.message if exc.message.startswith((f"{name}:", f"{name} ")) else f"{name}: {exc.message}"
        if exc.kind == REFUSED:
            return Verdict("refused", reason=reason)
        return _proposed(argv, reason, policy)
    problem = paths_problem(paths, policy)
    if problem:
        return Verdict("refused", reason=f"{name}: forbidden path: {problem}")
    pins = _pins(canonical, pin_targets, policy) if policy.resolve else ()
    if isinstance(pins, str):
        return Verdict("refused", reason=f"{name}: {pins}")
    return Verdict("read", canonical, pins=pins,
                   recheck_processes=name == "pgrep" and parse(SPECS[name], args).has("f", "full"))


#: fds no process has (beyond any limit on open files): ``/dev/fd/N`` for such an N cannot be opened
_NO_SUCH_FD = 2_000_000_000


def pin_checked_files(verdict: Verdict, cwd: str | None) -> tuple[tuple[str, ...], list[int], list[tuple[str, str]]]:
    """The argv to run for ``verdict``, the open files it inherits, and ``(as named in that argv,
    as written)`` for each path renamed: each pinned file (see :func:`_pins`) opened and, if it is
    still the file that was checked (device and inode), named as ``/dev/fd/N``; one that could not
    be opened at its check nor now, as a ``/dev/fd/N`` no process has (the command says there is no
    such file, and cannot open whatever is put at the path by the time it runs).  Raises ToolError
    (nothing run, nothing left open) when a file is not the one checked.  The caller closes the
    files after the run.  Blocking (opens files): call it in a thread."""
    argv = list(verdict.argv)
    fds: list[int] = []
    renames: list[tuple[str, str]] = []
    try:
        for k, (index, start, dev, ino) in enumerate(verdict.pins):
            word = argv[index][start:]
            path = word if os.path.isabs(word) else os.path.join(cwd or "/", word)
            try:
                opened = open_pinned(path)
            except OSError as exc:
                if dev != ABSENT:
                    raise ToolError(f"refused: cannot open {word!r} ({exc.strerror}); nothing was run") from None
                named = f"/dev/fd/{_NO_SUCH_FD + k}"  # still not there: never by its name, swapped in meanwhile
            else:
                if dev == ABSENT:
                    os.close(opened)
                    raise ToolError(f"refused: {word!r} could not be opened when it was checked and can be now "
                                    "(something was put there meanwhile); nothing was run")
                try:  # at 10 or above: a shell script it runs (zgrep) takes 3, 4 and 5 for itself
                    fd = fcntl.fcntl(opened, fcntl.F_DUPFD_CLOEXEC, 10)
                finally:
                    os.close(opened)
                fds.append(fd)
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) != (dev, ino):
                    raise ToolError(f"refused: {word!r} is another file than the one checked a moment ago (it was "
                                    "replaced or a link in its path was changed meanwhile); nothing was run")
                named = f"/dev/fd/{fd}"
            argv[index] = argv[index][:start] + named
            renames.append((named, word))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    # by the names they were given: /dev/fd/12 before /dev/fd/1
    return tuple(argv), fds, sorted(renames, reverse=True)


#: readers that would not read a file through ``/dev/fd/N`` as they read it by name (``file``
#: describes the link itself)
_NOT_PINNED = frozenset({"file"})
#: readers that, given a folder where a file is expected, read the files in it (``diff DIR1 DIR2``
#: compares every file the two hold, ``diff DIR FILE`` the file of that name in DIR): their
#: operands must be files
_FILES_ONLY = frozenset({"diff"})


def _pins(argv: tuple[str, ...], targets: tuple[tuple[int, int, str, bool], ...],
          policy: PathPolicy) -> tuple[tuple[int, int, int, int], ...] | str:
    """``(index in argv, where the path starts in it, device, inode)`` of each file and folder a
    local read names (see :func:`_pin_targets`), each opened (:func:`open_pinned`: a regular file,
    a folder or a FIFO, never a device) and checked as the open file it is, where the kernel says
    it is (:meth:`PathPolicy.pinned_problem` for a file; a folder read recursively: checked again
    there), or why one may not be read.  One that cannot be opened is pinned as absent (see
    :func:`pin_checked_files`).  The run opens each again and runs the command on
    it (``/dev/fd/N``) only if it is still that file: a path swapped for a symbolic link between
    the checks, or between them and the run (a race another local user can run), is refused,
    never read."""
    out = []
    for index, start, role, operand in targets:
        word = argv[index][start:]
        if word == "-" and argv[0] in (_DASH_IS_STDIN if operand else _DASH_VALUE_IS_STDIN):
            continue
        path = word if os.path.isabs(word) else os.path.join(policy.cwd or "/", word)
        try:
            fd = open_pinned(path)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a device or a socket: never opened to read
                return f"forbidden path: '{word}' is {exc.strerror}, not a file; name a file"
            # the command is told there is no such file (see pin_checked_files); in a folder the reads
            # may not enter, refused as a file that is there would be (no answer about what it holds)
            problem = closed_folder_problem(word, os.path.realpath(path))
            if problem:
                return f"forbidden path: {problem}"
            out.append((index, start, ABSENT, ABSENT))
            continue
        try:
            st = os.fstat(fd)
            real = os.readlink(f"/proc/self/fd/{fd}")
            # judged where the kernel says the open file is, whatever the path's spelling led the checks to
            # (a regular file read: in pinned_problem below); a file only reported on (df), a certificate or
            # a journal by its role's own check, and that is all (their commands print no file as it is)
            place_only = role not in ("read", "read-checked", "recursive")
            problem = closed_folder_problem(word, real)
            if problem is None and (place_only or not stat.S_ISREG(st.st_mode)):
                problem = role_problem(real, role, policy) if place_only else policy.read_problem(real)
            if problem:
                return f"forbidden path: {problem}"
            if place_only:
                problem = None
            elif role == "recursive" and stat.S_ISDIR(st.st_mode):
                # the checks walked it by name: the folder open now is checked where the kernel says it is
                problem = policy.recursive_problem(real, checked=True)
            elif stat.S_ISREG(st.st_mode):
                problem = policy.pinned_problem(fd, word, checked=role != "read")
            elif argv[0] in _FILES_ONLY and stat.S_ISDIR(st.st_mode):
                # not a forbidden path: a read of folders this command does not take
                return (f"'{word}' is a folder: {argv[0]} compares the files in a folder (given a folder and a "
                        "file, the file of that name in it), which are not checked here; name the two files")
            else:
                problem = None  # a folder or a FIFO (open_pinned opens no other kind): pinned all the same
            if problem:
                return f"forbidden path: {problem}"
            out.append((index, start, st.st_dev, st.st_ino))
        finally:
            os.close(fd)
    return tuple(out)


#: the device and inode of a pin whose path could not be opened when it was checked
ABSENT = -1
#: commands that read standard input (empty for host_bash) for a file operand of ``-``, and those
#: that do for an option's file value of ``-`` (``grep -f -``, ``du --files0-from=-``); to any other
#: (``sort --random-source=-``, ``last -f -``) ``-`` is a file name, pinned as any other
_DASH_IS_STDIN = frozenset({"cat", "head", "tail", "wc", "grep", "egrep", "zgrep", "zcat", "sort", "sed", "cut",
                            "uniq", "tac", "nl", "comm", "cmp", "diff", "md5sum", "sha1sum", "sha256sum",
                            "sha512sum"})
_DASH_VALUE_IS_STDIN = frozenset({"grep", "egrep", "zgrep", "du"})
