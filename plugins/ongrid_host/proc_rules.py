"""Strict allowlists for ``ps`` and ``ip`` arguments in ``host_bash``.

Both programs accept many spellings (BSD clusters for ``ps``, unique
prefixes for ``ip``: ``-ba`` is ``-batch``), so instead of refusing known
bad options every word must match an allowed form; anything else is refused
with the word named.
"""

from __future__ import annotations

import re

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
_LIST = re.compile(r"^[0-9]+(,[0-9]+)*$")
_NAMES = re.compile(r"^[A-Za-z0-9_.@:+-]+(,[A-Za-z0-9_.@:+-]+)*$")
_PS_UNIX_VALUED = {"p": _LIST, "q": _LIST, "s": _LIST, "g": _NAMES, "G": _NAMES, "u": _NAMES, "U": _NAMES,
                   "C": _NAMES, "t": _NAMES, "o": None, "O": None}
_PS_LONG_FLAGS = {"--forest", "--no-headers", "--no-heading", "--headers", "--help", "--version", "--deselect"}
_PS_LONG_VALUED = {"--pid": _LIST, "--ppid": _LIST, "--quick-pid": _LIST, "--sid": _LIST, "--user": _NAMES,
                   "--User": _NAMES, "--group": _NAMES, "--Group": _NAMES, "--tty": _NAMES, "--format": None,
                   "--sort": "sort", "--cols": re.compile(r"^[0-9]+$"), "--columns": re.compile(r"^[0-9]+$"),
                   "--width": re.compile(r"^[0-9]+$"), "--lines": re.compile(r"^[0-9]+$"),
                   "--rows": re.compile(r"^[0-9]+$")}

_PS_HELP = ("allowed: BSD letters from 'auxfwcrTlvjsSHhmnLX' (never 'e': it prints process environments), "
            "UNIX options like -ef, -eo FIELDS, -p PIDS, -u USER, -C NAME, --sort=-%cpu, --forest, or PIDs")


def _fields_problem(value: str, opt: str, sort: bool = False) -> str | None:
    for item in value.split(","):
        name = item.split("=", 1)[0].strip()
        if sort:
            name = name.lstrip("+-")
        if name.lower() not in PS_FIELDS and name not in PS_FIELDS:
            return f"field '{name}' of '{opt}' is not an allowed ps field"
    return None


def _ps_value_problem(kind, value: str, opt: str) -> str | None:
    if kind is None:
        return _fields_problem(value, opt)
    if kind == "sort":
        return _fields_problem(value, opt, sort=True)
    if not kind.match(value):
        return f"value '{value}' of '{opt}' is not allowed"
    return None


def ps_problem(args: list[str]) -> str | None:
    """Why these ``ps`` arguments are refused, or None (see the module docstring)."""
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if a.startswith("--"):
            name, eq, value = a.partition("=")
            if name in _PS_LONG_FLAGS and not eq:
                continue
            if name in _PS_LONG_VALUED:
                if not eq:
                    if i >= len(args):
                        return f"option '{a}' needs a value"
                    value = args[i]
                    i += 1
                problem = _ps_value_problem(_PS_LONG_VALUED[name], value, name)
                if problem:
                    return problem
                continue
            return f"option '{a}' is not allowed ({_PS_HELP})"
        if a.startswith("-") and len(a) > 1:
            letters = a[1:]
            for j, letter in enumerate(letters):
                if letter in _PS_UNIX_FLAGS:
                    continue
                if letter in _PS_UNIX_VALUED:
                    value = letters[j + 1:]
                    if not value:
                        if i >= len(args):
                            return f"option '-{letter}' needs a value"
                        value = args[i]
                        i += 1
                    problem = _ps_value_problem(_PS_UNIX_VALUED[letter], value, f"-{letter}")
                    if problem:
                        return problem
                    break
                return f"option '-{letter}' (in '{a}') is not allowed ({_PS_HELP})"
            continue
        if _LIST.match(a):
            continue  # process ids
        if "e" in a:
            return f"BSD option 'e' (in '{a}') prints process environments, which hold secrets"
        bad = sorted(set(a) - _PS_BSD)
        if bad:
            return f"BSD option '{bad[0]}' (in '{a}') is not allowed ({_PS_HELP})"
    return None


# ---- ip -----------------------------------------------------------------------------

#: global options allowed exactly as written (ip accepts unique prefixes, so
#: '-b', '-ba' mean '-batch' and '-n' means '-netns': none of those match)
_IP_OPTIONS = frozenset({
    "-4", "-6", "-0", "-br", "-brief", "-s", "-stats", "-statistics", "-d", "-details", "-j", "-json",
    "-p", "-pretty", "-c", "-color", "-color=auto", "-color=always", "-color=never", "-o", "-oneline",
    "-h", "-human", "-human-readable", "-t", "-timestamp", "-ts", "-tshort",
})
IP_OBJECTS = {"addr", "address", "a", "route", "ro", "r", "link", "l", "neigh", "neighbor", "neighbour", "n",
              "rule", "ru", "maddress", "maddr", "m", "netconf", "tunnel", "tun", "mroute", "mr"}
IP_VERBS = {"show", "sh", "list", "ls", "lst", "get"}
_IP_BAD_WORDS = {"netns", "exec", "vrf", "batch", "-batch", "-force", "-netns"}


def ip_problem(args: list[str]) -> str | None:
    """Why these ``ip`` arguments are refused, or None: only the allowed
    global options, then a read-only object and verb."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        opt = rest.pop(0)
        if opt.startswith("--"):
            opt = opt[1:]  # ip treats '--x' as '-x'
        if opt not in _IP_OPTIONS:
            return (f"option '{opt}' is not an allowed ip option: '-b…'/'-batch' runs commands from a file, "
                    f"'-n…'/'-netns' enters another namespace, '-force' goes on after errors; allowed: "
                    f"{', '.join(sorted(_IP_OPTIONS))}")
    if not rest:
        return "needs an object: addr, route, link, neigh or rule"
    if rest[0] not in IP_OBJECTS:
        return f"object '{rest[0]}' is not one of the read-only objects (addr, route, link, neigh, rule)"
    if len(rest) > 1 and rest[1] not in IP_VERBS and rest[1] != "dev":
        return f"'ip {rest[0]} {rest[1]}': only show/list/get are read-only"
    for word in rest[1:]:
        if word in _IP_BAD_WORDS:
            return f"word '{word}' runs commands or enters another namespace"
    return None
