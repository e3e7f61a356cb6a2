"""Find the paths in a ``host_bash`` argv and check them with a
:class:`~ongrid_host.path_policy.PathPolicy`.

Three kinds of words are paths:

* every file operand of a command that reads file contents (``cat``,
  ``grep``, ``sed``…; the grep pattern and sed script excepted), spelled
  with or without a slash (it is relative to the command's folder);
* any other word with a slash, and any option value with one
  (``--file=/x``, ``-f/x``), for every command except those that only read
  names and metadata (``ls``, ``stat``, ``du``, ``find``…);
* the targets of a recursive ``grep`` (``-r``, ``-d recurse``,
  ``--directories=rec``; none given means the current folder), which must
  neither be nor contain a forbidden area.  ``-R`` (follows every symlink
  met on the way) is refused outright.
"""

from __future__ import annotations

from collections.abc import Sequence

from ongrid_host.path_policy import PathPolicy

#: commands that only read names and metadata: their operands may name /proc…
METADATA_ONLY = frozenset({"ls", "stat", "du", "df", "find", "readlink", "realpath", "lsblk", "findmnt", "lsof",
                           "mount"})
#: options of the metadata commands that read a file's contents anyway
_READS_LIST = ("--files0-from", "-files0-from")
#: option values that are patterns or scripts, not paths
_PATTERN_OPTS = frozenset({"e", "regexp", "expression", "include", "exclude", "exclude-dir", "label",
                           "group-separator", "k", "key", "t", "field-separator"})

#: content readers: (short letters taking a value, long options taking a value,
#: options that supply the script/pattern so no operand is the script)
_GREP = ("ABCDdefm", ("after-context", "before-context", "context", "devices", "directories", "regexp", "file",
                      "max-count", "label", "include", "exclude", "exclude-from", "exclude-dir", "binary-files",
                      "group-separator"), ("e", "f", "regexp", "file"))
CONTENT_READERS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...] | None]] = {
    "cat": ("", (), None), "zcat": ("S", ("suffix",), None), "wc": ("", ("files0-from",), None),
    "head": ("nc", ("lines", "bytes"), None), "tail": ("ncs", ("lines", "bytes", "sleep-interval", "pid"), None),
    "md5sum": ("", (), None), "sha256sum": ("", (), None),
    "sort": ("kotTS", ("key", "field-separator", "output", "temporary-directory", "buffer-size", "files0-from",
                       "compress-program", "batch-size", "parallel", "random-source"), None),
    "sed": ("efl", ("expression", "file", "line-length"), ("e", "f", "expression", "file")),
    "file": ("mfFeP", ("magic-file", "files-from", "separator", "exclude", "exclude-quiet", "parameter"), None),
    "grep": _GREP, "egrep": _GREP, "zgrep": _GREP,
}


def parse(args: Sequence[str], short_valued: str, long_valued: Sequence[str]
          ) -> tuple[list[tuple[str, str | None]], list[str]]:
    """GNU getopt-style split: ([(option, value or None)], operands).  Long
    options may be abbreviated (``--dir`` for ``--directories``); options are
    named without dashes (``r``, ``directories``)."""
    opts: list[tuple[str, str | None]] = []
    operands: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if a == "--":
            operands += args[i:]
            break
        if a.startswith("--"):
            name, eq, value = a[2:].partition("=")
            full = [n for n in long_valued if n.startswith(name)] if name else []
            exact = name if name in long_valued else (full[0] if len(full) == 1 else None)
            if exact and not eq and i < len(args):
                value = args[i]
                i += 1
                opts.append((exact, value))
            else:
                opts.append((exact or name, value if eq else None))
        elif a.startswith("-") and a != "-":
            letters = a[1:]
            for j, letter in enumerate(letters):
                if letter in short_valued:
                    value = letters[j + 1:]
                    if not value and i < len(args):
                        value = args[i]
                        i += 1
                    opts.append((letter, value))
                    break
                opts.append((letter, None))
        else:
            operands.append(a)
    return opts, operands


def _slashed_values(args: Sequence[str]) -> list[str]:
    """Option values that look like paths: ``--x=/p``, ``-f/p``, ``-f../p``."""
    out = []
    for a in args:
        if not a.startswith("-") or a == "-":
            continue
        if a.startswith("--") and "=" in a:
            value = a.split("=", 1)[1]
            if "/" in value or value.startswith("."):
                out.append(value)
        elif "/" in a:
            starts = [k for k in range(1, len(a)) if a[k] in "./"]
            out.append(a[starts[0]:])
    return out


def _grep_targets(name: str, args: Sequence[str], policy: PathPolicy) -> str | None:
    short, long, script_opts = CONTENT_READERS[name]
    opts, operands = parse(args, short, long)
    names = {o for o, _ in opts}
    if names & {"R", "dereference-recursive"} or any("dereference-recursive".startswith(o) and len(o) > 2
                                                      for o in names if o.startswith("de")):
        return "option -R/--dereference-recursive follows every symlink it meets; use -r and name the folder"
    recursive = bool(names & {"r", "recursive"}) or any(
        o in ("d", "directories") and (v or "") not in ("read", "skip") for o, v in opts)
    if not recursive:
        return None
    if script_opts is not None and not names & set(script_opts) and operands:
        operands = operands[1:]
    for target in operands or ["."]:
        problem = policy.recursive_problem(target)
        if problem:
            return f"recursive search: {problem}"
    return None


def paths_problem(name: str, args: Sequence[str], policy: PathPolicy) -> str | None:
    """Why ``name args`` would read a forbidden path, or None."""
    checked: list[str] = []
    if name in CONTENT_READERS:
        short, long, script_opts = CONTENT_READERS[name]
        opts, operands = parse(args, short, long)
        if script_opts is not None and not {o for o, _ in opts} & set(script_opts) and operands:
            operands = operands[1:]  # the pattern / script
        checked += [o for o in operands if o != "-"]
        checked += [v for o, v in opts if v and o not in _PATTERN_OPTS and ("/" in v or v.startswith("."))]
        checked += [v for o, v in opts if v and o in ("f", "file", "files0-from", "exclude-from", "files-from")]
        if name in ("grep", "egrep", "zgrep"):
            problem = _grep_targets(name, args, policy)
            if problem:
                return problem
    elif name in METADATA_ONLY:
        for k, a in enumerate(args):
            if a.split("=", 1)[0] in _READS_LIST:
                value = a.split("=", 1)[1] if "=" in a else (args[k + 1] if k + 1 < len(args) else "")
                checked.append(value)
    else:
        checked += _slashed_values(args)
        checked += [a for a in args if not a.startswith("-") and "/" in a]
    for path in dict.fromkeys(checked):
        if not path:
            continue
        problem = policy.read_problem(path)
        if problem:
            return problem
    return None
