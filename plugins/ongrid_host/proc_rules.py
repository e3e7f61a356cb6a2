"""Strict allowlists for ``ps`` and ``ip`` arguments in ``host_bash``.

Both programs accept many spellings (BSD clusters for ``ps``, unique
prefixes for ``ip``: ``-ba`` is ``-batch``, and ``ip link s`` is ``set``),
so every word must match an allowed form; anything else is refused with the
word named.  :func:`parse_ps` and :func:`parse_ip` return the canonical
argv that runs (``ip`` objects and verbs written in full), or raise
:class:`~ongrid_host.optspec.Refusal`.  Pure functions.
"""

from __future__ import annotations

import re

from ongrid_host.optspec import REFUSED, WRITE, Refusal

# ---- ps -----------------------------------------------------------------------------

#: output fields ``-o``/``--format``/``--sort`` may name
PS_FIELDS = frozenset({
    "pid", "ppid", "pgid", "pgrp", "sid", "sess", "tid", "lwp", "nlwp", "thcount", "spid",
    "user", "uid", "euser", "euid", "ruser", "ruid", "suser", "fuser", "uname", "group", "gid", "egid", "rgid",
    "tty", "tt", "tname", "stat", "state", "s", "ni", "nice", "pri", "priority", "rtprio", "cls", "class",
    "policy", "sched", "psr", "pcpu", "%cpu", "c", "cp", "pmem", "%mem", "rss", "rssize", "rsz", "vsz", "vsize",
    "sz", "size", "drs", "trs", "maj_flt", "min_flt", "majflt", "minflt", "lstart", "start", "stime",
    "start_time", "bsdstart", "etime", "etimes", "time", "cputime", "cputimes", "bsdtime", "cmd", "comm",
    "ucmd", "ucomm", "args", "command", "fname", "wchan", "nwchan", "f", "flags", "label", "cgroup", "cgname",
    "ipcns", "mntns", "netns", "pidns", "userns", "utsns", "blocked", "caught", "ignored", "pending",
    "sig", "sigcatch", "sigignore", "sigmask",
})
#: BSD (dashless) letters with no argument that do not show environments
_PS_BSD = set("auxfwcrTlvjsSHhmnLX")
#: UNIX (one-dash) letters with no argument
_PS_UNIX_FLAGS = set("AadeFfHjLlMNTwyZcP")
#: UNIX letters taking a value, and what the value must look like
_LIST = re.compile(r"^[0-9]+(,[0-9]+)*\Z")
_NAMES = re.compile(r"^[A-Za-z0-9_.@:+-]+(,[A-Za-z0-9_.@:+-]+)*\Z")
_PS_UNIX_VALUED = {"p": _LIST, "q": _LIST, "s": _LIST, "g": _NAMES, "G": _NAMES, "u": _NAMES, "U": _NAMES,
                   "C": _NAMES, "t": _NAMES, "o": None, "O": None}
_PS_LONG_FLAGS = {"--forest", "--no-headers", "--no-heading", "--headers", "--help", "--version", "--deselect"}
_PS_LONG_VALUED = {"--pid": _LIST, "--ppid": _LIST, "--quick-pid": _LIST, "--sid": _LIST, "--user": _NAMES,
                   "--User": _NAMES, "--group": _NAMES, "--Group": _NAMES, "--tty": _NAMES, "--format": None,
                   "--sort": "sort", "--lines": re.compile(r"^[0-9]+\Z"),
                   "--rows": re.compile(r"^[0-9]+\Z")}

_PS_HELP = ("allowed: BSD letters from 'auxfwcrTlvjsSHhmnLX' (never 'e': it prints process environments), "
            "UNIX options like -ef, -eo FIELDS, -p PIDS, -u USER, -C NAME, --sort=-%cpu, --forest, or PIDs")


#: fields that are a process's whole command line: sorted by, their order answers how a command line
#: holding a secret compares with others, a comparison at a time, however the lines are redacted
_COMMAND_LINE_FIELDS = frozenset({"args", "cmd", "command"})


def _fields_problem(value: str, opt: str, sort: bool = False) -> str | None:
    for item in value.split(","):
        name = item.split("=", 1)[0].strip()
        if sort:
            name = name.lstrip("+-")
            if name.lower() in _COMMAND_LINE_FIELDS:
                raise Refusal(REFUSED, f"ps: sorting by '{name}' orders processes by their command lines, which "
                                       "could tell a secret in one a comparison at a time; sort by another field "
                                       "(pid, comm, %cpu, rss …)")
        if name.lower() not in PS_FIELDS and name not in PS_FIELDS:
            return f"field '{name}' of '{opt}' is not an allowed ps field"
    return None


def _ps_value(kind, value: str, opt: str) -> str:
    if kind is None:
        problem = _fields_problem(value, opt)
    elif kind == "sort":
        problem = _fields_problem(value, opt, sort=True)
    else:
        problem = None if kind.fullmatch(value) else f"value '{value}' of '{opt}' is not allowed"
    if problem:
        raise Refusal(WRITE, f"ps: {problem}")
    return value


def parse_ps(args: list[str]) -> tuple[str, ...]:
    """The canonical ``ps`` argv for ``args`` (see the module docstring)."""
    out = ["ps"]
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if a.startswith("--"):
            name, eq, value = a.partition("=")
            if name in _PS_LONG_FLAGS and not eq:
                out.append(name)
                continue
            if name in _PS_LONG_VALUED:
                if not eq:
                    if i >= len(args):
                        raise Refusal(REFUSED, f"ps: option '{a}' needs a value")
                    value = args[i]
                    i += 1
                out.append(f"{name}={_ps_value(_PS_LONG_VALUED[name], value, name)}")
                continue
            raise Refusal(WRITE, f"ps: option '{a}' is not allowed ({_PS_HELP})")
        if a.startswith("-") and len(a) > 1:
            letters = a[1:]
            for j, letter in enumerate(letters):
                if letter in _PS_UNIX_FLAGS:
                    out.append(f"-{letter}")
                    continue
                if letter in _PS_UNIX_VALUED:
                    value = letters[j + 1:]
                    if not value:
                        if i >= len(args):
                            raise Refusal(REFUSED, f"ps: option '-{letter}' needs a value")
                        value = args[i]
                        i += 1
                    out += [f"-{letter}", _ps_value(_PS_UNIX_VALUED[letter], value, f"-{letter}")]
                    break
                raise Refusal(WRITE, f"ps: option '-{letter}' (in '{a}') is not allowed ({_PS_HELP})")
            continue
        if _LIST.fullmatch(a):
            out += ["-p", a]  # process ids
            continue
        if "e" in a:
            raise Refusal(REFUSED, f"ps: BSD option 'e' (in '{a}') prints process environments, which hold secrets")
        bad = sorted(set(a) - _PS_BSD)
        if bad:
            raise Refusal(WRITE, f"ps: BSD option '{bad[0]}' (in '{a}') is not allowed ({_PS_HELP})")
        # one w cuts lines at 132 columns: ww, never cut (see _command_line_cut)
        out.append(a.replace("w", "") + "ww" if "w" in a else a)
    if out.count("-w") == 1:
        out.insert(out.index("-w"), "-w")
    _command_line_cut(out)
    return tuple(out)


def _command_line_cut(argv: list[str]) -> None:
    """Refuse a format that would cut a process's command line where the caller chooses: a
    command-line field (``args``, ``cmd``, ``command``) with a header of its own (``args=XXXX…``:
    the header's length sets the column's width) or followed by another field (its width then
    fixed).  A cut line is redacted only from 8 of a secret's characters on, so choosing the cut
    would give a held secret's first characters away.  (``--cols``/``--width`` are not allowed, and
    ``w`` is widened to ``ww``: a line is printed whole.)"""
    fields = [f.strip() for i, w in enumerate(argv) for value in (
        [argv[i + 1]] if w == "-o" and i + 1 < len(argv) else [w.partition("=")[2]] if w.startswith("--format=")
        else []) for f in value.split(",")]
    for k, field in enumerate(fields):
        name, eq, _ = field.partition("=")
        if name.lower() in _COMMAND_LINE_FIELDS and (eq or k != len(fields) - 1):
            raise Refusal(REFUSED, f"ps: '{field}' would cut each command line at a width the format sets "
                                   f"({'its header' if eq else 'a field after it'}); put {name} last, without a "
                                   "header")


# ---- ip -----------------------------------------------------------------------------

#: global options allowed exactly as written (ip accepts unique prefixes, so
#: '-b', '-ba' mean '-batch' and '-n' means '-netns': none of those match)
_IP_OPTIONS = {
    "-4": "-4", "-6": "-6", "-0": "-0", "-br": "-brief", "-brief": "-brief", "-s": "-stats", "-stats": "-stats",
    "-statistics": "-stats", "-d": "-details", "-details": "-details", "-j": "-json", "-json": "-json",
    "-p": "-pretty", "-pretty": "-pretty", "-c": "-color=auto", "-color": "-color=auto",
    "-color=auto": "-color=auto", "-color=always": "-color=always", "-color=never": "-color=never",
    "-o": "-oneline", "-oneline": "-oneline", "-h": "-human", "-human": "-human",
    "-human-readable": "-human", "-t": "-timestamp", "-timestamp": "-timestamp", "-ts": "-tshort",
    "-tshort": "-tshort",
}
#: object spellings → the full name written in the argv that runs
IP_OBJECTS = {
    "addr": "address", "address": "address", "a": "address", "route": "route", "ro": "route", "r": "route",
    "link": "link", "l": "link", "neigh": "neighbour", "neighbor": "neighbour", "neighbour": "neighbour",
    "n": "neighbour", "rule": "rule", "ru": "rule", "maddress": "maddress", "maddr": "maddress", "m": "maddress",
    "netconf": "netconf", "tunnel": "tunnel", "tun": "tunnel", "mroute": "mroute", "mr": "mroute",
}
#: verb spellings → the full verb (never a prefix: 'ip link s' is 'set')
IP_VERBS = {"show": "show", "sh": "show", "list": "show", "ls": "show", "lst": "show", "get": "get"}
#: selector words after the verb (they only filter what is shown)
_IP_WORD = re.compile(r"[A-Za-z0-9_.:/%@+-]+")
_IP_BAD_WORDS = {"netns": "enters another network namespace", "exec": "runs a command",
                 "vrf": "runs in another routing domain", "batch": "runs commands from a file",
                 "-batch": "runs commands from a file", "-force": "goes on after errors",
                 "-netns": "enters another network namespace"}
_IP_BAD_WORDS.update({w: "is a verb that changes state" for w in (
    "set", "add", "del", "delete", "change", "replace", "flush", "append", "prepend", "test", "save", "restore")})
_IP_OBJECT_LIST = "address, route, link, neighbour, rule, maddress, netconf, tunnel, mroute"


def parse_ip(args: list[str]) -> tuple[str, ...]:
    """The canonical ``ip`` argv: allowed global options, a read-only object,
    ``show``/``get`` and selector words."""
    rest = list(args)
    out = ["ip"]
    while rest and rest[0].startswith("-"):
        word = rest.pop(0)
        opt = word[1:] if word.startswith("--") else word  # ip treats '--x' as '-x'
        if opt not in _IP_OPTIONS:
            raise Refusal(WRITE, f"ip: option '{opt}' is not an allowed ip option: '-b…'/'-batch' runs commands "
                                 "from a file, '-n…'/'-netns' enters another namespace, '-force' goes on after "
                                 f"errors; allowed: {', '.join(sorted(_IP_OPTIONS))}")
        out.append(_IP_OPTIONS[opt])
    if not rest:
        raise Refusal(REFUSED, f"ip: needs an object: {_IP_OBJECT_LIST}")
    obj = IP_OBJECTS.get(rest[0])
    if obj is None:
        raise Refusal(WRITE, f"ip: object '{rest[0]}' is not one of the read-only objects ({_IP_OBJECT_LIST})")
    out.append(obj)
    words = rest[1:]
    verb = "show"
    if words and words[0] in IP_VERBS:
        verb = IP_VERBS[words.pop(0)]
    elif words and words[0] not in ("dev", "to", "from", "table", "scope", "label", "up", "type", "master"):
        raise Refusal(WRITE, f"ip {rest[0]} {words[0]}: changes state or is not read-only; read-only verbs: "
                             "show, list, get")
    if verb == "get" and obj not in ("route", "neighbour"):
        raise Refusal(WRITE, f"ip {rest[0]} get: only 'ip route get' and 'ip neigh get' are read-only")
    out.append(verb)
    for word in words:
        if word in _IP_BAD_WORDS:
            raise Refusal(WRITE, f"ip: word '{word}' {_IP_BAD_WORDS[word]}")
        if word in IP_VERBS.values() or not _IP_WORD.fullmatch(word):
            raise Refusal(WRITE, f"ip: word '{word}' is not a selector 'ip {obj} {verb}' may take read-only")
        out.append(word)
    return tuple(out)
