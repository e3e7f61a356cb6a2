"""What ``host_bash`` may run, and why not (DESIGN.md §8).

A command string is first checked as *syntax*: it is split with ``shlex``
and run without a shell, so everything a shell would interpret — ``;``,
``&&``, ``||``, ``|``, ``&``, redirections, backticks, ``$(…)``, ``${…}``,
``$VAR``, unquoted globs and ``~``, newlines — is refused outright (it would
not do what was meant).  A command that passes is ``read`` when it is on the
read-only allowlist and passes that command's own checks (no writing
options, no sub-commands that change state, no secrets files); anything
else is ``write`` (a proposal through the review gate, refused for a
read-only persona).  Every refusal names the token and the rule.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import shlex
from collections.abc import Callable, Sequence

import attrs

from ongrid_host.path_args import paths_problem
from ongrid_host.path_policy import PathPolicy
from ongrid_host.proc_rules import ip_problem, ps_problem

MAX_CMD_CHARS = 4096


@attrs.frozen
class Verdict:
    """``kind``: ``refused`` (never runs), ``read`` (allowlisted) or ``write``.
    ``argv``: the words to run (empty when refused).  ``reason``: why refused,
    or why not read-only (for ``write``)."""

    kind: str
    argv: tuple[str, ...] = ()
    reason: str = ""


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


# ---- per-command rules ------------------------------------------------------------

Check = Callable[[list[str]], str | None]


def _short_letters(arg: str) -> str:
    """Letters of a short-option cluster (``-uo`` → ``uo``); '' if not one."""
    if arg.startswith("-") and not arg.startswith("--") and len(arg) > 1 and not arg[1].isdigit():
        return arg[1:]
    return ""


def _options(args: Sequence[str]) -> list[str]:
    """The option words before ``--`` (GNU getopt style)."""
    out = []
    for a in args:
        if a == "--":
            break
        if a.startswith("-") and a != "-":
            out.append(a)
    return out


def _positionals(args: Sequence[str], takes_arg: frozenset[str] = frozenset()) -> list[str]:
    """Operands (non-option words).  ``takes_arg``: options whose value is
    the next word (``-t service``), which is then not an operand."""
    out, after, skip = [], False, False
    for a in args:
        if skip:
            skip = False
        elif after or not (a.startswith("-") and a != "-"):
            out.append(a)
        elif a == "--":
            after = True
        elif a in takes_arg:
            skip = True
    return out


def getopt_rule(short: str = "", long: Sequence[str] = (), why: str = "writes or changes state",
                max_positionals: int | None = None) -> Check:
    """Refuse short letters in ``short`` (anywhere in a cluster, so ``-uo``
    is caught) and long options in ``long`` (also as GNU's unambiguous
    prefixes, ``--out`` for ``--output``)."""

    def check(args: list[str]) -> str | None:
        for opt in _options(args):
            if opt.startswith("--"):
                name = opt[2:].split("=", 1)[0]
                for bad in long:
                    if name and bad.startswith(name):
                        return f"option '{opt}' (--{bad}) {why}"
            else:
                for letter in _short_letters(opt):
                    if letter in short:
                        where = "" if opt == f"-{letter}" else f" (in '{opt}')"
                        return f"option '-{letter}'{where} {why}"
        operands = _positionals(args)
        if max_positionals is not None and len(operands) > max_positionals:
            return f"operand '{operands[max_positionals]}' {why}"
        return None

    return check


def _all(*checks: Check) -> Check:
    def check(args: list[str]) -> str | None:
        for c in checks:
            r = c(args)
            if r:
                return r
        return None

    return check


def _no_args(args: list[str]) -> str | None:
    return "only allowed without arguments (with arguments it changes mounts)" if args else None


_FIND_BAD = ("-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls")


def _find(args: list[str]) -> str | None:
    for a in args:
        if a in _FIND_BAD:
            return f"find action '{a}' runs commands or writes files"
    return None


_SYSTEMCTL_VERBS = {"status", "show", "is-active", "is-enabled", "is-failed", "list-units", "list-unit-files",
                    "list-timers", "list-sockets", "list-dependencies", "cat"}


def _systemctl(args: list[str]) -> str | None:
    r = getopt_rule("H", ("host", "machine"), why="runs the command on another machine")(args)
    if r:
        return r
    verbs = _positionals(args, frozenset({"-t", "--type", "-p", "--property", "-n", "--lines", "-o", "--output",
                                          "--state", "-s", "--signal", "--root", "-P", "--what"}))
    if not verbs:
        return "'systemctl' alone lists units: write 'systemctl list-units'"
    if verbs[0] not in _SYSTEMCTL_VERBS:
        return f"'systemctl {verbs[0]}' changes state; read-only verbs: {', '.join(sorted(_SYSTEMCTL_VERBS))}"
    return None


def _date(args: list[str]) -> str | None:
    r = getopt_rule("s", ("set",), why="sets the system clock")(args)
    if r:
        return r
    for p in _positionals(args, frozenset({"-d", "--date", "-f", "--file", "-r", "--reference"})):
        if not p.startswith("+"):
            return f"operand '{p}' would set the system clock (only +FORMAT is read-only)"
    return None


def _sysctl(args: list[str]) -> str | None:
    r = getopt_rule("wpf", ("write", "load", "system"), why="writes kernel parameters")(args)
    if r:
        return r
    for p in _positionals(args):
        if "=" in p:
            return f"operand '{p}' sets a kernel parameter"
    return None


def _getent(args: list[str]) -> str | None:
    for p in _positionals(args):
        if p in ("shadow", "gshadow"):
            return f"database '{p}' holds password hashes"
    return None


_NEVER_ENDS = "follows forever (the call would only time out); use -n / --since to read a window"

RULES: dict[str, Check] = {
    # files and text
    "ls": getopt_rule(), "cat": getopt_rule(), "head": getopt_rule(),
    "tail": getopt_rule("fF", ("follow", "retry"), why=_NEVER_ENDS),
    "wc": getopt_rule(), "stat": getopt_rule(), "readlink": getopt_rule(), "realpath": getopt_rule(),
    "file": getopt_rule("C", ("compile",)), "md5sum": getopt_rule(), "sha256sum": getopt_rule(),
    "grep": getopt_rule(), "egrep": getopt_rule(), "zgrep": getopt_rule(), "zcat": getopt_rule(),
    "sort": getopt_rule("o", ("output", "compress-program"), why="writes a file or runs a program"),
    "sed": getopt_rule("i", ("in-place",), why="edits files in place"),
    "find": _find,
    "du": getopt_rule(), "df": getopt_rule(),
    # system state
    "free": getopt_rule(), "uptime": getopt_rule(), "uname": getopt_rule(), "nproc": getopt_rule(),
    "lscpu": getopt_rule(), "lsblk": getopt_rule(), "lsmod": getopt_rule(), "findmnt": getopt_rule(),
    "vmstat": getopt_rule(), "ps": ps_problem, "pgrep": getopt_rule(),
    "id": getopt_rule(), "whoami": getopt_rule(), "who": getopt_rule(), "w": getopt_rule(),
    "last": getopt_rule(), "getent": _getent,
    "hostname": getopt_rule("Fb", ("file", "boot"), why="sets the host name", max_positionals=0),
    "date": _date, "mount": _no_args, "sysctl": _sysctl,
    "dmesg": getopt_rule("cCDEnwW", ("clear", "read-clear", "console-off", "console-on", "console-level",
                                     "follow", "follow-new"), why="clears the ring buffer, changes the console "
                                                                   "level or follows forever"),
    "journalctl": getopt_rule("f", ("follow", "rotate", "vacuum-size", "vacuum-time", "vacuum-files", "flush",
                                      "sync", "relinquish-var", "smart-relinquish-var", "update-catalog",
                                      "setup-keys", "cursor-file", "new-id128"),
                              why="changes the journal, writes a file or follows forever"),
    "systemctl": _systemctl,
    # network
    "ss": getopt_rule("KD", ("kill", "diag"), why="kills sockets or writes a file"),
    "netstat": getopt_rule("c", ("continuous",), why=_NEVER_ENDS),
    "ip": ip_problem,
    "lsof": _all(getopt_rule("r", (), why=_NEVER_ENDS),
                 lambda a: "option '+r' repeats forever" if any(x.startswith("+r") for x in a) else None),
}

#: paths whose contents are secrets; reading them is not a read-only query
#: (any word containing "environ" is refused too: /proc/<pid>/environ holds
#: the daemon's API keys, and symlinks like /dev/fd/.. can reach it)
SECRET_PATTERNS = ("*environ*", "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
                   "*/.ssh/id_*", "/etc/ssh/ssh_host_*_key")


def _secret_arg(args: Sequence[str]) -> str | None:
    for a in args:
        value = a.split("=", 1)[1] if a.startswith("-") and "=" in a else a
        norm = posixpath.normpath(value) if value.startswith("/") else value
        for pat in SECRET_PATTERNS:
            if (fnmatch.fnmatchcase(value, pat) or fnmatch.fnmatchcase(norm, pat)) and not norm.endswith(".pub"):
                return f"argument '{a}' names a secrets file ({pat})"
    return None


_CMD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


_DEFAULT_POLICY: PathPolicy | None = None


def default_policy() -> PathPolicy:
    """The local-host :class:`PathPolicy` without daemon-specific areas
    (built once; see :meth:`PathPolicy.local`)."""
    global _DEFAULT_POLICY
    if _DEFAULT_POLICY is None:
        _DEFAULT_POLICY = PathPolicy.local()
    return _DEFAULT_POLICY


def analyze(cmd: str, policy: PathPolicy | None = None) -> Verdict:
    """Classify one ``host_bash`` command string (see the module docstring).

    ``policy``: where the command runs and which paths it may not read
    (default: this host, run in ``/``); every path argument is checked by
    what it resolves to (see :mod:`ongrid_host.path_args`)."""
    if not isinstance(cmd, str):
        return Verdict("refused", reason="cmd must be a string")
    argv, problem = split(cmd)
    if argv is None:
        return Verdict("refused", reason=problem or "cannot parse")
    name, args = argv[0], argv[1:]
    if "/" in name:
        return Verdict("write", tuple(argv), f"'{name}' is a path; the allowlist names bare commands "
                                             f"(write '{name.rsplit('/', 1)[-1]}')")
    if "=" in name:
        return Verdict("refused", reason=f"'{name}' looks like a variable assignment; there is no shell, "
                                         "so environment assignments are not supported")
    if not _CMD_NAME.match(name) or name not in RULES:
        return Verdict("write", tuple(argv), f"'{name}' is not on the read-only allowlist "
                                             f"({', '.join(sorted(RULES))})")
    secret = _secret_arg(args)
    if secret:
        return Verdict("write", tuple(argv), f"{name}: {secret}")
    problem = RULES[name](args) or paths_problem(name, args, policy or default_policy())
    if problem:
        return Verdict("write", tuple(argv), f"{name}: {problem}")
    if name == "sed":
        argv = [name, "--sandbox", *args]  # GNU sed: refuse the e/w/r commands that run or write
    return Verdict("read", tuple(argv))
