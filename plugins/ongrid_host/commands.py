"""The read-only table of every getopt-style command ``host_bash`` allows.

Each entry is a :class:`~ongrid_host.optspec.CommandSpec`: the options the
command may take read-only (flags and value-taking, with their values
checked), the options that exist but change state, write files, run
programs or never end (refused by name), and what its operands are (files
whose contents are read, names, or nothing).  ``find``, ``ps`` and ``ip``
have their own grammars (:mod:`ongrid_host.expr_rules`,
:mod:`ongrid_host.proc_rules`); ``mount`` is allowed only without
arguments.

A command missing here is not on the allowlist: a ``write`` proposal.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence

from ongrid_host.expr_rules import date_string_problem, sed_script_problem
from ongrid_host.optspec import (
    INT,
    NAME,
    NAMES,
    REFUSED,
    SIGNED,
    SIZE,
    WHEN,
    WRITE,
    CommandSpec,
    Opt,
    Parsed,
    Refusal,
    any_text,
    one_of,
    pattern,
)
from ongridd.plugins.api import ascii_digits


def F(short: str = "", long: str = "") -> Opt:  # noqa: N802 - table shorthand
    """A flag."""
    return Opt(short=short, long=long)


def V(short: str = "", long: str = "", check=any_text, role: str = "") -> Opt:  # noqa: N802
    """An option with a required value."""
    return Opt(short=short, long=long, value=check, role=role)


def O(short: str = "", long: str = "", check=any_text, peek: str | None = None) -> Opt:  # noqa: N802, E743
    """An option with an optional (attached) value."""
    return Opt(short=short, long=long, value=check, optional=True, peek=re.compile(peek) if peek else None)


def flags(spec: str) -> tuple[Opt, ...]:
    """``"a|all b l|long-name |only-long"`` → flags."""
    out = []
    for item in spec.split():
        short, _, long = item.partition("|")
        if len(short) > 1 and not long:
            short, long = "", short
        out.append(F(short, long))
    return tuple(out)


NEVER_ENDS = "follows forever (the call would only time out); read a window instead (-n / --since)"
CHANGES = "changes state"
WRITES_FILE = "writes a file"
OTHER_MACHINE = "runs the command on another machine or container"


def _files(parsed: Parsed) -> Sequence[str]:
    return ["read"] * len(parsed.operands)


# ---- files and text -------------------------------------------------------------

CAT = CommandSpec("cat", flags("A|show-all b|number-nonblank e E|show-ends n|number s|squeeze-blank t "
                               "T|show-tabs u v|show-nonprinting"), operands="read")
_HEAD_TAIL_COMMON = flags("q|quiet v|verbose z|zero-terminated") + (F(long="silent"),)
HEAD = CommandSpec("head", (V("c", "bytes", SIGNED), V("n", "lines", SIGNED), *_HEAD_TAIL_COMMON),
                   operands="read", digits="lines")
TAIL = CommandSpec("tail", (V("c", "bytes", SIGNED), V("n", "lines", SIGNED), *_HEAD_TAIL_COMMON),
                   refused=((("f", "F", "follow", "retry", "pid", "s", "sleep-interval", "max-unchanged-stats"),
                             NEVER_ENDS, REFUSED),),
                   operands="read", digits="lines")
#: reading file names from a file: the names inside cannot be checked against the path policy
NAMES_FROM_FILE = "reads the names of the files to read from a file, so they cannot be checked here; name them"
WC = CommandSpec("wc", flags("c|bytes m|chars l|lines L|max-line-length w|words"),
                 refused=((("files0-from",), NAMES_FROM_FILE, WRITE),), operands="read")
STAT = CommandSpec("stat", (*flags("L|dereference f|file-system t|terse"), V("c", "format"), V(long="printf"),
                            V(long="cached", check=one_of("always", "never", "default"))), operands="meta")
READLINK = CommandSpec("readlink", flags("f|canonicalize e|canonicalize-existing m|canonicalize-missing "
                                         "n|no-newline q|quiet s|silent v|verbose z|zero"), operands="meta")
REALPATH = CommandSpec("realpath", (*flags("e|canonicalize-existing m|canonicalize-missing L|logical P|physical "
                                           "q|quiet s|strip z|zero"), F(long="no-symlinks"),
                                    V(long="relative-to"), V(long="relative-base")), operands="meta")
FILE = CommandSpec("file", (*flags("b|brief i|mime L|dereference h|no-dereference k|keep-going "
                                   "N|no-pad r|raw 0|print0 mime-type mime-encoding "
                                   "no-buffer"), V("F", "separator"),
                            V("e", "exclude", pattern(r"[a-z_]+", "a test name"))),
                   refused=((("C", "compile"), WRITES_FILE, WRITE), (("f", "files-from"), NAMES_FROM_FILE, WRITE),
                            (("m", "magic-file"), "loads another magic file", WRITE),
                            (("s", "special-files"), "reads devices", WRITE),
                            (("z", "uncompress"), "may start decompressor programs on the file; use zcat to look "
                             "inside", WRITE),
                            (("Z", "uncompress-noreport"), "may start decompressor programs on the file", WRITE),
                            (("p", "preserve-date"), "sets the file's times back (a metadata write)", WRITE)),
                   operands="read")
_SUM = (*flags("b|binary t|text z|zero tag"),)
_SUM_REFUSED = ((("c", "check"), "reads the files named inside a checksum list (their paths cannot be checked)",
                 WRITE),)
MD5SUM = CommandSpec("md5sum", _SUM, refused=_SUM_REFUSED, operands="read")
SHA256SUM = CommandSpec("sha256sum", _SUM, refused=_SUM_REFUSED, operands="read")
SHA1SUM = CommandSpec("sha1sum", _SUM, refused=_SUM_REFUSED, operands="read")
SHA512SUM = CommandSpec("sha512sum", _SUM, refused=_SUM_REFUSED, operands="read")
#: a field or character list: ``1,3-5,7-``
_LIST = pattern(r"[0-9,-]+", "a list like 1,3-5 or 2-")
CUT = CommandSpec("cut", (V("b", "bytes", _LIST), V("c", "characters", _LIST), V("f", "fields", _LIST),
                          V("d", "delimiter"), V(long="output-delimiter"),
                          *flags("n s|only-delimited z|zero-terminated complement")), operands="read")
_UNIQ_METHOD = one_of("none", "prepend", "separate", "append", "both")
UNIQ = CommandSpec("uniq", (*flags("c|count d|repeated D i|ignore-case u|unique z|zero-terminated"),
                            O(long="all-repeated", check=_UNIQ_METHOD), O(long="group", check=_UNIQ_METHOD),
                            V("f", "skip-fields", INT), V("s", "skip-chars", INT), V("w", "check-chars", INT)),
                   operands="read", max_operands=1,
                   extra_operand_why="writes its output to a second operand; name the file to read only")
TAC = CommandSpec("tac", (*flags("b|before r|regex"), V("s", "separator")), operands="read")
NL = CommandSpec("nl", (*flags("p|no-renumber"), V("b", "body-numbering"), V("h", "header-numbering"),
                        V("f", "footer-numbering"), V("d", "section-delimiter"), V("i", "line-increment", SIGNED),
                        V("l", "join-blank-lines", INT), V("n", "number-format", one_of("ln", "rn", "rz")),
                        V("s", "number-separator"), V("v", "starting-line-number", SIGNED),
                        V("w", "number-width", INT)), operands="read")
COMM = CommandSpec("comm", (*flags("1 2 3 check-order nocheck-order total z|zero-terminated"),
                            V(long="output-delimiter")), operands="read", max_operands=2)
_SKIPS = pattern(r"[0-9]+[A-Za-z]*(:[0-9]+[A-Za-z]*)?", "SKIP or SKIP1:SKIP2")
CMP = CommandSpec("cmp", (*flags("b|print-bytes l|verbose s|quiet silent"), V("i", "ignore-initial", _SKIPS),
                          V("n", "bytes", SIZE)), operands="read", max_operands=2)
_NAMES_THE_FILES = "names a file outside the operands; name both files as operands"
DIFF = CommandSpec("diff", (
    *flags("q|brief s|report-identical-files c u e|ed n|rcs y|side-by-side left-column suppress-common-lines "
           "p|show-c-function t|expand-tabs T|initial-tab suppress-blank-empty N|new-file unidirectional-new-file "
           "i|ignore-case E|ignore-tab-expansion Z|ignore-trailing-space b|ignore-space-change "
           "w|ignore-all-space B|ignore-blank-lines strip-trailing-cr a|text d|minimal speed-large-files normal"),
    V("C", check=INT), O(long="context", check=INT), V("U", check=INT), O(long="unified", check=INT),
    V("W", "width", INT), V("F", "show-function-line"),
    V("I", "ignore-matching-lines"), V(long="label"), V(long="tabsize", check=INT), V(long="horizon-lines", check=INT),
    O(long="color", check=one_of("never", "auto", "always"))),
    refused=((("r", "recursive", "x", "exclude", "X", "exclude-from", "S", "starting-file"),
              "compares whole folders; name the two files to compare", REFUSED),
             (("from-file", "to-file"), _NAMES_THE_FILES, REFUSED),
             (("l", "paginate"), "runs pr on the output", WRITE)),
    known=("ifdef", "line-format", "old-line-format", "new-line-format", "unchanged-line-format", "old-group-format",
           "new-group-format", "unchanged-group-format", "changed-group-format", "ignore-file-name-case",
           "no-ignore-file-name-case", "no-dereference", "palette", "help", "version"),
    operands="read", max_operands=2)


def grep_recursive(parsed: Parsed) -> bool:
    """True when this grep reads folders recursively (``-r``, ``-d recurse``)."""
    return parsed.has("r", "recursive") or "recurse" in parsed.values("d", "directories")


def _grep_roles(parsed: Parsed) -> Sequence[str]:
    roles = ["recursive" if grep_recursive(parsed) else "read"] * len(parsed.operands)
    if not parsed.has("e", "regexp", "f", "file") and roles:
        roles[0] = "text"  # the pattern
    return roles


_GREP_OPTIONS = (
    *flags("i|ignore-case y v|invert-match w|word-regexp x|line-regexp c|count l|files-with-matches "
           "L|files-without-match n|line-number h|no-filename H|with-filename o|only-matching q|quiet s|no-messages "
           "b|byte-offset a|text I E|extended-regexp F|fixed-strings G|basic-regexp P|perl-regexp "
           "z|null-data Z|null T|initial-tab U|binary r|recursive no-ignore-case line-buffered "
           "no-group-separator"),
    F(long="silent"),
    Opt(long="color", value=WHEN, optional=True, also=("colour",)),
    V("m", "max-count", INT), V("A", "after-context", INT), V("B", "before-context", INT), V("C", "context", INT),
    V("e", "regexp"), V("f", "file", role="read"),
    V("d", "directories", one_of("read", "skip", "recurse")), V("D", "devices", one_of("read", "skip")),
    V(long="include"), V(long="exclude"), V(long="exclude-dir"), V(long="exclude-from", role="read"),
    V(long="label"), V(long="binary-files", check=one_of("binary", "text", "without-match")),
    V(long="group-separator"),
)
_GREP_REFUSED = ((("R", "dereference-recursive"),
                  "follows every symlink it meets; use -r and name the folder", REFUSED),)


def _grep_check(parsed: Parsed) -> None:
    """What grep prints must keep a file's text in one piece: a held secret cut into single
    characters, each with a prefix of letters or digits, would pass the redaction of tool results
    (``grep -o -b .`` prints every character with its offset).  So ``--color=always`` (escapes
    around every match) is refused, and so is ``-o`` with a prefix: ``-b``, ``-n``, ``-T``,
    ``--label``, a file name (``-H``, or ``-r`` or several files without ``-h``)."""
    if "always" in parsed.values("color", "colour"):
        raise Refusal(REFUSED, f"{parsed.name}: --color=always puts terminal escapes around every match; the "
                               "output goes to a model, not a terminal")
    if not parsed.has("o", "only-matching"):
        return
    prefixes = [f"-{p}" for p in ("b", "n", "T") if parsed.has(p)] + (["--label"] if parsed.has("label") else [])
    texts = sum(1 for role in _grep_roles(parsed) if role != "text")
    named = parsed.has("H", "with-filename") or (
        not parsed.has("h", "no-filename") and (grep_recursive(parsed) or texts > 1))
    if named:
        prefixes.append("a file name (-H, -r or several files: add -h)")
    if prefixes:
        raise Refusal(REFUSED, f"{parsed.name}: -o prints each match on a line of its own; with "
                               f"{', '.join(prefixes)} in front of each, a match of a few characters would cut "
                               "a file's text into labelled pieces; use -o alone, or drop -o")


#: the commands whose output does not depend on what the file holds, beyond the lines they print
#: whole (by position): with no pattern, key or byte range to choose, they cannot be made to answer
#: a question about a held secret a few characters or one yes/no at a time
_BY_POSITION = frozenset({"cat", "zcat", "head", "tail", "wc", "file", "md5sum", "sha1sum", "sha256sum",
                          "sha512sum"})


def reads_by_position(parsed: Parsed) -> bool:
    """Whether the command reads its files only by position and prints whole lines (``cat``,
    ``head -n``, ``tail -n``, ``zcat``) or a whole-file figure (``wc``, ``md5sum``, ``file``).
    Any other reader — a search (``grep -c``, ``sed`` with addresses and exit codes), a sort, a
    byte range (``head -c``) — answers questions about what its files hold, so its files must have
    been checked for the daemon's secrets (see ``PathPolicy.read_problem``)."""
    if parsed.name in ("head", "tail"):
        return not parsed.has("c", "bytes")
    return parsed.name in _BY_POSITION


def grep_spec(name: str) -> CommandSpec:
    return CommandSpec(name, _GREP_OPTIONS, refused=_GREP_REFUSED, operands=_grep_roles, check=_grep_check)


#: zgrep is a shell script with its own idea of which options take a value
#: (``-A -B -C -e -f -m``, ``--regexp``, ``--file``, ``--label``,
#: ``--max-count``, ``--binary-files``): a grep option it does not know to take
#: one (``--group-separator X``) would hand its value to grep as a file to read
_ZGREP_NO = ("include", "exclude", "exclude-dir", "exclude-from", "group-separator")
ZGREP = CommandSpec("zgrep", tuple(o for o in _GREP_OPTIONS if o.short not in ("r", "d", "D")
                                   and o.long not in _ZGREP_NO),
                    refused=((("r", "recursive", "R", "dereference-recursive", "d", "directories"),
                              "is not supported by zgrep", REFUSED),),
                    operands=_grep_roles, check=_grep_check)
ZCAT = CommandSpec("zcat", flags("f|force q|quiet v|verbose"), operands="read")
SORT = CommandSpec("sort", (
    *flags("b|ignore-leading-blanks d|dictionary-order f|ignore-case g|general-numeric-sort i|ignore-nonprinting "
           "M|month-sort h|human-numeric-sort n|numeric-sort R|random-sort r|reverse V|version-sort c C m|merge "
           "s|stable u|unique z|zero-terminated debug"),
    V("k", "key"), V("t", "field-separator"), V("S", "buffer-size", SIZE), V(long="parallel", check=INT),
    V(long="random-source", role="read"),
    O(long="check", check=one_of("quiet", "silent", "diagnose-first")),
    V(long="sort", check=one_of("general-numeric", "human-numeric", "month", "numeric", "random", "version"))),
    refused=((("o", "output"), WRITES_FILE, WRITE),
             (("T", "temporary-directory"), "writes temporary files into a folder of its choice", WRITE),
             (("compress-program",), "runs a program", WRITE),
             (("files0-from",), NAMES_FROM_FILE, WRITE),
             (("batch-size",), "is not needed read-only", WRITE)),
    operands="read")


def _sed_roles(parsed: Parsed) -> Sequence[str]:
    roles = ["read"] * len(parsed.operands)
    if not parsed.has("e", "expression") and roles:
        roles[0] = "text"  # the script
    return roles


def _sed_check(parsed: Parsed) -> None:
    scripts = parsed.values("e", "expression")
    if not scripts:
        if not parsed.operands:
            raise Refusal(REFUSED, "sed: no script given")
        scripts = [parsed.operands[0]]
    for script in scripts:
        problem = sed_script_problem(script)
        if problem:
            raise Refusal(WRITE, f"sed: script {script!r}: {problem}")


SED = CommandSpec("sed", (
    *flags("n|quiet E|regexp-extended r s|separate u|unbuffered z|null-data posix debug sandbox"),
    F(long="silent"), V("e", "expression"), V("l", "line-length", INT)),
    refused=((("i", "in-place"), "edits files in place", WRITE),
             (("f", "file"), "reads a script from a file that cannot be checked here; give it with -e", WRITE),
             (("follow-symlinks", "b", "binary"), "is only used with --in-place", WRITE)),
    operands=_sed_roles, check=_sed_check)

# ---- disks and memory ------------------------------------------------------------------

LS = CommandSpec("ls", (
    *flags("a|all A|almost-all l h|human-readable t r|reverse S R|recursive 1 d|directory i|inode "
           "n|numeric-uid-gid F|classify L|dereference s|size c u U X v Z|context G|no-group g o k|kibibytes "
           "p q|hide-control-chars Q|quote-name N|literal m x C H|dereference-command-line full-time "
           "group-directories-first si author show-control-chars dereference-command-line-symlink-to-dir"),
    O(long="color", check=WHEN), V(long="time-style"),
    V(long="sort", check=one_of("none", "size", "time", "version", "extension", "width", "name")),
    V(long="time", check=one_of("atime", "access", "use", "ctime", "status", "mtime", "modification", "birth",
                                "creation")),
    V("I", "ignore"), V(long="hide"), V("w", "width", INT), V(long="block-size", check=SIZE),
    V(long="indicator-style", check=one_of("none", "slash", "file-type", "classify")),
    V(long="format", check=one_of("across", "commas", "horizontal", "long", "single-column", "verbose",
                                  "vertical")),
    V("T", "tabsize", INT), O(long="hyperlink", check=WHEN), V(long="quoting-style", check=NAME)),
    operands="meta")
DU = CommandSpec("du", (
    *flags("a|all b|bytes c|total h|human-readable k m s|summarize x|one-file-system L|dereference "
           "P|no-dereference D|dereference-args S|separate-dirs l|count-links 0|null apparent-size inodes si"),
    V("d", "max-depth", INT), V("t", "threshold", SIGNED), V("B", "block-size", SIZE), V(long="exclude"),
    V("X", "exclude-from", role="read"), V(long="files0-from", role="read"), O(long="time", check=NAME),
    V(long="time-style")), operands="meta")
DF = CommandSpec("df", (
    *flags("a|all h|human-readable H k l|local P|portability T|print-type i|inodes total si no-sync"),
    V("t", "type", NAME), V("x", "exclude-type", NAME), V("B", "block-size", SIZE),
    O(long="output", check=NAMES)),
    refused=((("sync",), "calls sync(2) on every filesystem first (a change, and it can stall)", WRITE),),
    operands="meta")
FREE = CommandSpec("free", flags("b|bytes kilo mega giga k|kibi m|mebi g|gibi h|human w|wide t|total l|lohi si "
                                 "tebi pebi tera peta v|committed"),
                   refused=((("s", "seconds", "c", "count"), "repeats (the call would only time out)", REFUSED),),
                   operands="none")
LSBLK = CommandSpec("lsblk", (
    *flags("a|all b|bytes d|nodeps D|discard f|fs l|list m|perms n|noheadings p|paths r|raw J|json S|scsi "
           "t|topology T|tree z|zoned A|noempty M|merge O|output-all"),
    V("o", "output", NAMES), V("x", "sort", NAME), V("e", "exclude", NAMES), V("I", "include", NAMES),
    V("E", "dedup", NAME), V(long="width", check=INT)),
    refused=((("sysroot",), "reads another root folder", WRITE),), operands="meta")
FINDMNT = CommandSpec("findmnt", (
    *flags("a|ascii A|all b|bytes c|canonicalize D|df e|evaluate f|first-only i|invert J|json l|list "
           "k|kernel m|mtab n|noheadings P|pairs r|raw R|submounts s|fstab u|notruncate v|nofsroot "
           "x|verify y|shell shadowed real pseudo"),
    V("o", "output", NAMES), V("t", "types", NAMES), V("O", "options"), V("S", "source"), V("T", "target"),
    V("M", "mountpoint"), V("N", "task", INT), V("d", "direction", one_of("forward", "backward")),
    *flags("|tree")),
    refused=((("p", "poll", "w", "timeout", "first-poll"), "waits for mount changes (never ends)", REFUSED),
             (("F", "tab-file"), "reads another mount table", WRITE)),
    operands="meta")
VMSTAT = CommandSpec("vmstat", (
    *flags("a|active f|forks m|slabs n|one-header s|stats d|disk D|disk-sum w|wide t|timestamp y|no-first"),
    V("p", "partition", NAME), V("S", "unit", one_of("k", "K", "m", "M"))),
    operands="text", max_operands=2,
    check=lambda p: _vmstat_check(p.operands))

#: the longest a sampling ``vmstat DELAY COUNT`` may take (the call's own time limit is 60 s)
VMSTAT_MAX_S = 30


def _all_ints(name: str, words: Sequence[str]) -> None:
    for w in words:
        if not ascii_digits(w):
            raise Refusal(WRITE, f"{name}: operand '{w}' is not a number (delay and count)")


def _vmstat_check(words: Sequence[str]) -> None:
    """``vmstat [DELAY COUNT]``: a delay without a count repeats forever."""
    _all_ints("vmstat", words)
    if len(words) == 1:
        raise Refusal(REFUSED, f"vmstat: a delay without a count ('vmstat {words[0]}') repeats forever; "
                               f"give both, e.g. 'vmstat 1 5'")
    if len(words) == 2 and int(words[0]) * max(int(words[1]) - 1, 0) > VMSTAT_MAX_S:
        raise Refusal(REFUSED, f"vmstat: {words[0]} s × {words[1]} samples runs longer than {VMSTAT_MAX_S} s")


# ---- processes, users, the system ---------------------------------------------------------

PGREP = CommandSpec("pgrep", (
    *flags("l|list-name a|list-full c|count f|full i|ignore-case n|newest o|oldest v|inverse w|lightweight "
           "x|exact A|ignore-ancestors"),
    V("d", "delimiter"), V("g", "pgroup", NAMES), V("G", "group", NAMES), V("O", "older", INT),
    V("P", "parent", NAMES), V("s", "session", NAMES), V("t", "terminal", NAMES), V("u", "euid", NAMES),
    V("U", "uid", NAMES), V("r", "runstates", NAMES), V(long="ns", check=INT), V(long="nslist", check=NAMES),
    V(long="cgroup"), V("F", "pidfile", role="read")),
    refused=((("signal", "q", "queue"), "sends signals (that is pkill)", WRITE),), max_operands=1)
_USER = pattern(r"[A-Za-z0-9_.@-]+", "a user name")
ID = CommandSpec("id", flags("a u|user g|group G|groups n|name r|real z|zero Z|context"), max_operands=1,
                 check=lambda p: _users("id", p.operands))


def _users(name: str, words: Sequence[str]) -> None:
    for w in words:
        if _USER(w):
            raise Refusal(WRITE, f"{name}: operand '{w}' is not a user name")


WHOAMI = CommandSpec("whoami", (), operands="none")
WHO = CommandSpec("who", flags("a|all b|boot d|dead H|heading l|login lookup m p|process q|count r|runlevel "
                               "s|short t|time T|mesg w message writable u|users"),
                  operands=_files, max_operands=2)
W = CommandSpec("w", flags("h|no-header u|no-current s|short f|from o|old-style i|ip-addr"),
                max_operands=1, check=lambda p: _users("w", p.operands))
LAST = CommandSpec("last", (
    *flags("a|hostlast d|dns F|fulltimes i|ip R|nohostname w|fullnames x|system"),
    V("n", "limit", INT), V("s", "since"), V("t", "until"), V("p", "present"), V("f", "file", role="read"),
    V(long="time-format", check=one_of("notime", "short", "full", "iso"))), digits="limit",
    check=lambda p: _users("last", p.operands))
GETENT_DBS = ("passwd", "group", "hosts", "ahosts", "ahostsv4", "ahostsv6", "services", "protocols", "networks",
              "netgroup", "rpc", "ethers", "aliases", "initgroups")


def _getent_check(parsed: Parsed) -> None:
    if not parsed.operands:
        raise Refusal(REFUSED, f"getent: name a database ({', '.join(GETENT_DBS)})")
    db = parsed.operands[0]
    if db in ("shadow", "gshadow"):
        raise Refusal(REFUSED, f"getent: database '{db}' holds password hashes (a secret)")
    if db not in GETENT_DBS:
        raise Refusal(WRITE, f"getent: database '{db}' is not one of {', '.join(GETENT_DBS)}")
    if db in _NAME_SERVICE_DBS and len(parsed.operands) > 1:
        raise Refusal(REFUSED, f"getent {db} KEY sends the key to the DNS servers, which would carry any "
                               "text out of this host; use host_probe_dns, whose names an operator lists "
                               f"(getent {db} with no key lists the local file)")


#: databases whose lookups by key go to DNS (or another network name service)
_NAME_SERVICE_DBS = frozenset({"hosts", "ahosts", "ahostsv4", "ahostsv6", "networks"})


#: -s picks a name service the administrator may not have configured (hesiod sends the key to the DNS
#: servers of the domain after an '@' in it): only the local files
GETENT = CommandSpec("getent", (V("s", "service", one_of("files")), F("i", "no-idn")), check=_getent_check)
HOSTNAME = CommandSpec("hostname", flags("a|alias A|all-fqdns d|domain f|fqdn long i|ip-address "
                                         "I|all-ip-addresses s|short"),
                       refused=((("F", "file", "b", "boot"), "sets the host name", WRITE),
                                (("y", "yp", "nis"), "reads NIS, not needed", WRITE)),
                       operands="none", operand_why="sets the host name when given a name")
_DATE_SET = "would set the system clock (only +FORMAT is read-only)"


def _date_check(parsed: Parsed) -> None:
    for w in parsed.operands:
        if not w.startswith("+"):
            raise Refusal(WRITE, f"date: operand '{w}' {_DATE_SET}")
    for value in parsed.values("d", "date"):
        if problem := date_string_problem(value):
            raise Refusal(REFUSED, f"date: -d {problem}")


DATE = CommandSpec("date", (
    *flags("u|utc universal R|rfc-email debug"), V("d", "date"), V("r", "reference"),
    O("I", "iso-8601", one_of("date", "hours", "minutes", "seconds", "ns")),
    V(long="rfc-3339", check=one_of("date", "seconds", "ns"))),
    refused=((("s", "set"), "sets the system clock", WRITE),
             (("f", "file"), "reads dates from a file, not needed read-only", WRITE)),
    end_marker=False, max_operands=1, check=_date_check)
UPTIME = CommandSpec("uptime", flags("p|pretty s|since"), operands="none")
UNAME = CommandSpec("uname", flags("a|all s|kernel-name n|nodename r|kernel-release v|kernel-version m|machine "
                                   "p|processor i|hardware-platform o|operating-system"), operands="none")
NPROC = CommandSpec("nproc", (F(long="all"), V(long="ignore", check=INT)), operands="none")
LSCPU = CommandSpec("lscpu", (
    *flags("a|all b|online c|offline B|bytes J|json x|hex y|physical C"),
    O("e", "extended", NAMES), O("p", "parse", NAMES), F(long="output-all")),
    refused=((("s", "sysroot"), "reads another root folder", WRITE),), operands="none")
LSMOD = CommandSpec("lsmod", (), operands="none")


#: the kernel parameter that acts when read: the kernel folds every CPU's counters at once (work
#: scheduled on each CPU) and may log warnings about them
_STAT_REFRESH = ("vm", "stat_refresh")
_STAT_REFRESH_WHY = ("makes the kernel fold its per-CPU counters (a change); name the parameters to read "
                     "(sysctl vm.swappiness vm.overcommit_memory), or a prefix other than vm")


def _reads_stat_refresh(name: str) -> bool:
    """Whether reading the operand ``name`` reads ``vm.stat_refresh``: the parameter itself, a prefix
    of it (``vm``: sysctl reads every parameter under a prefix), or a ``*`` pattern matching either."""
    parts = [p for p in name.replace("/", ".").split(".") if p]
    if not parts or len(parts) > len(_STAT_REFRESH):
        return not parts
    return all(fnmatch.fnmatchcase(want, part) for part, want in zip(parts, _STAT_REFRESH, strict=False))


def _sysctl_check(parsed: Parsed) -> None:
    for w in parsed.operands:
        if "=" in w:
            raise Refusal(WRITE, f"sysctl: operand '{w}' sets a kernel parameter")
        if not re.fullmatch(r"[A-Za-z0-9_*-]+([./][A-Za-z0-9_*-]+)*", w):
            raise Refusal(WRITE, f"sysctl: operand '{w}' is not a kernel parameter name")
    names = {opt.short or opt.long: value for opt, value in parsed.options}
    if "N" in names or "h" in names or "d" in names:
        return  # names only (no value is read), or the usage
    pattern = names.get("r")
    if pattern is not None and re.fullmatch(r"[A-Za-z0-9_]+", pattern) and pattern.lower() not in "vm.stat_refresh":
        return  # sysctl reads only the parameters whose name the pattern matches, and it matches no part of it
    for w in parsed.operands:
        if _reads_stat_refresh(w):
            raise Refusal(WRITE, f"sysctl: reading '{w}' reads vm.stat_refresh, which {_STAT_REFRESH_WHY}")
    if not parsed.operands:  # -a, -A, -X: every parameter
        raise Refusal(WRITE, f"sysctl: reading every parameter reads vm.stat_refresh, which {_STAT_REFRESH_WHY}")


SYSCTL = CommandSpec("sysctl", (
    *flags("a|all A X n|values e|ignore N|names q|quiet b|binary d h"), V("r", "pattern")),
    refused=((("w", "write"), "writes kernel parameters", WRITE),
             (("p", "load", "f", "system"), "loads and writes kernel parameters from files", WRITE)),
    check=_sysctl_check)
DMESG = CommandSpec("dmesg", (
    *flags("T|ctime x|decode k|kernel u|userspace t|notime r|raw e|reltime d|show-delta P|nopager S|syslog "
           "J|json H|human noescape"),
    V("l", "level", NAMES), V("f", "facility", NAMES), O("L", "color", WHEN), V(long="time-format", check=NAME),
    V("s", "buffer-size", INT), V(long="since"), V(long="until"), V("F", "file", role="read")),
    refused=((("c", "read-clear", "C", "clear"), "clears the kernel ring buffer", WRITE),
             (("D", "console-off", "E", "console-on", "n", "console-level"), "changes the console log level",
              WRITE),
             (("w", "follow", "W", "follow-new"), NEVER_ENDS, REFUSED)),
    operands="none")

_JOURNAL_REFUSED = (
    (("f", "follow"), NEVER_ENDS, REFUSED),
    (("vacuum-size", "vacuum-time", "vacuum-files", "rotate", "flush", "sync", "relinquish-var",
      "smart-relinquish-var", "update-catalog", "setup-keys", "new-id128", "cursor-file"),
     "changes the journal or writes a file", WRITE),
    (("M", "machine", "H", "host"), OTHER_MACHINE, WRITE),
    (("root", "image", "namespace"), "reads another root, image or namespace", WRITE),
)
#: output modes that print every field of an entry (a crashed process's environment, COREDUMP_ENVIRON,
#: among them) unless ``--output-fields`` names the fields
_JOURNAL_ALL_FIELDS = frozenset({"verbose", "export", "json", "json-pretty", "json-sse", "json-seq"})
#: the journal fields that may be read, matched or listed (systemd.journal-fields(7)): what an entry
#: says and where it comes from — not a process's command line (``_CMDLINE``, ``OBJECT_CMDLINE``), an
#: audit record's raw fields (``_AUDIT_FIELD_*``, ``AUDIT_FIELD_*``: arguments, sudo's command) or what
#: systemd-coredump keeps of a crashed process (``COREDUMP_*``: its environment, memory, open files),
#: nor an application's own fields (any name: ``DB_PASSWORD`` among them)
_JOURNAL_FIELDS = frozenset("""
    MESSAGE MESSAGE_ID PRIORITY CODE_FILE CODE_LINE CODE_FUNC ERRNO INVOCATION_ID USER_INVOCATION_ID
    SYSLOG_FACILITY SYSLOG_IDENTIFIER SYSLOG_PID SYSLOG_TIMESTAMP DOCUMENTATION TID UNIT USER_UNIT
    _PID _UID _GID _COMM _EXE _CAP_EFFECTIVE _AUDIT_SESSION _AUDIT_LOGINUID _SYSTEMD_CGROUP _SYSTEMD_SLICE
    _SYSTEMD_UNIT _SYSTEMD_USER_UNIT _SYSTEMD_USER_SLICE _SYSTEMD_SESSION _SYSTEMD_OWNER_UID
    _SYSTEMD_INVOCATION_ID _SELINUX_CONTEXT _SOURCE_REALTIME_TIMESTAMP _SOURCE_MONOTONIC_TIMESTAMP _BOOT_ID
    _MACHINE_ID _HOSTNAME _TRANSPORT _STREAM_ID _LINE_BREAK _NAMESPACE _RUNTIME_SCOPE _KERNEL_DEVICE
    _KERNEL_SUBSYSTEM _UDEV_SYSNAME _UDEV_DEVNODE _UDEV_DEVLINK _AUDIT_TYPE _AUDIT_TYPE_NAME _AUDIT_ID
    __CURSOR __REALTIME_TIMESTAMP __MONOTONIC_TIMESTAMP __SEQNUM __SEQNUM_ID CONTAINER_ID CONTAINER_ID_FULL
    CONTAINER_NAME CONTAINER_TAG IMAGE_NAME OBJECT_PID OBJECT_UID OBJECT_GID OBJECT_COMM OBJECT_EXE
    OBJECT_SYSTEMD_UNIT OBJECT_SYSTEMD_USER_UNIT
""".split())
#: why the fields most likely to be asked for are not read
_JOURNAL_FIELD_WHY = (
    (re.compile(r"COREDUMP", re.IGNORECASE), "holds a crashed process's environment, command line or memory "
                                             "(systemd-coredump), which may hold secrets"),
    (re.compile(r"CMDLINE|AUDIT_FIELD", re.IGNORECASE), "holds processes' command lines, which may hold secrets "
                                                        "(MESSAGE of an audit record is read, its secrets hidden)"),
)


def _journalctl_check(parsed: Parsed) -> None:
    """Only the journal fields of :data:`_JOURNAL_FIELDS` are read, matched or listed (``-F``,
    ``--output-fields``, ``FIELD=VALUE``), and an output mode that prints every field needs
    ``--output-fields`` naming them; a journal file is named exactly (journalctl expands
    ``*?[`` in ``--file`` itself, past the path check)."""
    fields = [f for value in parsed.values("output-fields") for f in value.split(",")]
    named = [*parsed.values("F", "field"), *fields, *(w.split("=", 1)[0] for w in parsed.operands if "=" in w)]
    refused = next((f for f in named if f not in _JOURNAL_FIELDS), None)
    if refused is not None:
        why = next((why for shape, why in _JOURNAL_FIELD_WHY if shape.search(refused)),
                   "is not among the fields read (what an entry says and where it comes from: MESSAGE, PRIORITY, "
                   "_SYSTEMD_UNIT, SYSLOG_IDENTIFIER, _PID, _COMM, _HOSTNAME, _TRANSPORT …); an application's own "
                   "fields may hold anything")
        raise Refusal(REFUSED, f"journalctl: field {refused!r} {why}")
    modes = parsed.values("o", "output")
    if modes and modes[-1] in _JOURNAL_ALL_FIELDS and not fields:
        raise Refusal(REFUSED, f"journalctl: -o {modes[-1]} prints every field of each entry, a crashed process's "
                               "environment (COREDUMP_ENVIRON) among them; name the fields with --output-fields "
                               "(e.g. --output-fields=MESSAGE,_SYSTEMD_UNIT,PRIORITY)")
    for path in parsed.values("file"):
        if any(c in path for c in "*?["):
            raise Refusal(REFUSED, f"journalctl: --file {path!r} is a pattern journalctl would expand itself, "
                                   "past the path check; name the journal file")


JOURNALCTL = CommandSpec("journalctl", (
    *flags("r|reverse x|catalog a|all q|quiet k|dmesg m|merge N|fields e|pager-end no-pager "
           "no-hostname no-full utc list-boots disk-usage header show-cursor system user verify"),
    V("u", "unit"), V(long="user-unit"), V("t", "identifier"),
    V("p", "priority", NAME), V("g", "grep"), O(long="case-sensitive", check=one_of("yes", "no", "true", "false")),
    V("S", "since"), V("U", "until"), O("n", "lines", SIGNED, peek=r"[+-]?[0-9]+\Z"),
    V("o", "output", one_of("short", "short-full", "short-iso", "short-iso-precise", "short-precise",
                            "short-monotonic", "short-delta", "short-unix", "verbose", "export", "json",
                            "json-pretty", "json-sse", "json-seq", "cat", "with-unit")),
    V(long="output-fields", check=NAMES), O("b", "boot", pattern(r"[+-]?[0-9]+|[0-9a-f]{32}([+-][0-9]+)?|all",
                                                                 "a boot offset or id"),
                                            peek=r"([+-]?[0-9]+|[0-9a-f]{32})\Z"),
    V("F", "field", NAME), V("c", "cursor"), V(long="after-cursor"), V(long="facility", check=NAMES),
    V("D", "directory", role="recursive"), V(long="file", role="journal")),
    refused=_JOURNAL_REFUSED, check=_journalctl_check,
    known=("list-catalog", "dump-catalog", "interval", "force", "list-namespaces", "verify-key"))

# ---- systemctl --------------------------------------------------------------------------------

SYSTEMCTL_VERBS = ("status", "show", "is-active", "is-enabled", "is-failed", "list-units", "list-unit-files",
                   "list-timers", "list-sockets", "list-dependencies", "cat")
_UNIT = re.compile(r"[A-Za-z0-9@_.:\\*?\[\]-]+")


def _systemctl_check(parsed: Parsed) -> None:
    modes = parsed.values("o", "output")
    if modes and modes[-1] in _JOURNAL_ALL_FIELDS:
        # status shows the unit's journal lines in this mode, its coredumps' entries among them
        raise Refusal(REFUSED, f"systemctl: -o {modes[-1]} prints every journal field of the unit's entries, a "
                               "crashed process's environment (COREDUMP_ENVIRON) among them; use -o short-iso or "
                               "cat, or journalctl -u UNIT -o json --output-fields=MESSAGE,PRIORITY")
    if not parsed.operands:
        return
    verb = parsed.operands[0]
    if verb not in SYSTEMCTL_VERBS:
        raise Refusal(WRITE, f"systemctl: verb '{verb}' {CHANGES} or is not read-only; read-only verbs: "
                             f"{', '.join(SYSTEMCTL_VERBS)}")
    for unit in parsed.operands[1:]:
        if not _UNIT.fullmatch(unit):
            raise Refusal(WRITE, f"systemctl: '{unit}' is not a unit name or pattern")


_SYSTEMCTL_REFUSED = (
    (("H", "host", "M", "machine"), OTHER_MACHINE, WRITE),
    (("message", "job-mode", "kill-whom", "kill-value", "s", "signal", "what", "when", "drop-in", "root", "image",
      "runtime", "f", "force", "now", "preset-mode", "global", "dry-run", "firmware-setup",
      "boot-loader-menu", "boot-loader-entry", "reboot-argument", "check-inhibitors", "i", "ignore-inhibitors",
      "mkdir", "marked", "read-only", "stdin", "T", "show-transaction", "no-block", "wait", "no-reload",
      "no-warn", "no-wall", "image-policy", "r", "recursive", "user"),
     "is not needed by the read-only verbs (it belongs to verbs that change state, or to another manager)",
     WRITE),
)
SYSTEMCTL = CommandSpec("systemctl", (
    *flags("a|all l|full q|quiet no-pager no-legend plain value failed system reverse show-types "
           "with-dependencies no-ask-password"),
    V("t", "type", NAMES), V("P", check=NAMES), V(long="timestamp", check=NAME), V(long="state", check=NAMES),
    V("p", "property", NAMES), V("n", "lines", INT),
    V("o", "output", one_of("short", "short-full", "short-iso", "short-iso-precise", "short-precise",
                            "short-monotonic", "short-unix", "cat", *sorted(_JOURNAL_ALL_FIELDS)))),
    refused=_SYSTEMCTL_REFUSED, check=_systemctl_check)


def systemctl_canonical(parsed: Parsed) -> Parsed:
    """``systemctl`` alone lists units: write the verb out."""
    if parsed.operands:
        return parsed
    return Parsed(parsed.name, parsed.options, ("list-units",), ("text",), parsed.end_marker)


# ---- network ------------------------------------------------------------------------------

SS = CommandSpec("ss", (
    *flags("n|numeric r|resolve a|all l|listening o|options e|extended m|memory p|processes i|info s|summary "
           "t|tcp u|udp w|raw x|unix S|sctp d|dccp 0|packet 4|ipv4 6|ipv6 H|no-header O|oneline Z|context "
           "z|contexts b|bpf M|mptcp tipc vsock xdp inet-sockopt cgroup tos threads"),
    V("f", "family", one_of("unix", "inet", "inet6", "link", "netlink", "vsock", "tipc", "xdp")),
    V("A", "query", pattern(r"!?[a-z0-9_]{1,16}(,!?[a-z0-9_]{1,16}){0,15}", "socket tables (tcp,udp,!unix …)"))),
    known=("socket",),
    refused=((("K", "kill"), "kills sockets", WRITE), (("D", "diag"), WRITES_FILE, WRITE),
             (("E", "events"), NEVER_ENDS, REFUSED), (("N", "net"), "enters another network namespace", WRITE),
             (("F", "filter"), "reads a filter file, whose every word ss may look up in DNS (write the filter "
                               "as arguments)", REFUSED)),
    end_marker=False, check=lambda p: _ss_filter(p.operands))
NETSTAT = CommandSpec("netstat", (
    *flags("a|all n|numeric t|tcp u|udp w|raw x|unix l|listening p|program r|route i|interfaces s|statistics "
           "e|extend o|timers W|wide g|groups M|masquerade 4 6 v|verbose N|symbolic numeric-hosts numeric-ports "
           "numeric-users"),
    V("A", "protocol", NAMES)),
    refused=((("c", "continuous"), NEVER_ENDS, REFUSED),), operands="none")
#: an ss filter's port: ``:443``, ``:https``, ``:*``
_SS_PORT = re.compile(r"[A-Za-z0-9*_-]{1,32}\Z")


def _ss_host_ok(word: str) -> bool:
    """Whether an ss filter's host is an address or prefix (``10.0.0.0/8``,
    ``[::1]``, ``*``), with or without ``:port``, or a port alone (``:https``)."""
    if "%" in word:  # a zone is free text: a lookup of it would carry it out
        return False
    host, port = word, ""
    if word.startswith("["):
        host, sep, rest = word[1:].partition("]")
        if not sep or (rest and not (rest.startswith(":") and _SS_PORT.match(rest[1:]))):
            return False
        return host == "*" or _network(host)
    if word.count(":") == 1:
        host, _, port = word.partition(":")
        if not _SS_PORT.match(port):
            return False
    return host in ("", "*") or _network(host)


def _network(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True


#: the words of an ss filter that are not values (iproute2's filter lexer; it compares them exactly)
_SS_LOGIC = frozenset({"!", "not", "&", "&&", "and", "|", "||", "or", "(", ")", "autobound"})
_SS_COMPARE = frozenset({">=", "ge", "geq", "<=", "le", "leq", "!=", "ne", "neq", "=", "==", "eq", ">", "gt",
                         "<", "lt"})
#: what ``state``/``exclude`` take
_SS_STATES = frozenset({"all", "connected", "synchronized", "bucket", "big", "established", "syn-sent",
                        "syn-recv", "syn-rcv", "fin-wait-1", "fin-wait-2", "time-wait", "closed", "close",
                        "close-wait", "last-ack", "listening", "closing", "unconnected"})
#: the keyword that announces a value, and the kind of value
_SS_VALUE_OF = {"dst": "host", "src": "host", "dport": "port", "sport": "port", "dev": "device", "fwmark": "mark",
                "cgroup": "cgroup"}
_SS_DEVICE = re.compile(r"[A-Za-z0-9_.:@+-]{1,15}\Z")
_SS_MARK = re.compile(r"(0x[0-9A-Fa-f]+|[0-9]+)(/(0x[0-9A-Fa-f]+|[0-9]+))?\Z")
_SS_CGROUP = re.compile(r"/[A-Za-z0-9_.:@/-]{0,255}\Z")


def _ss_value_ok(kind: str, word: str) -> bool:
    if kind == "host":
        return len(word) <= 100 and _ss_host_ok(word)
    if kind == "port":
        return _SS_PORT.match(word.removeprefix(":")) is not None
    if kind == "device":
        return _SS_DEVICE.match(word) is not None and not word.startswith("-")
    if kind == "cgroup":  # a cgroup's path (ss reads the cgroup file system, no name service)
        return _SS_CGROUP.match(word) is not None
    return _SS_MARK.match(word) is not None


def _ss_filter(operands: Sequence[str]) -> None:
    """An ss filter may hold only its grammar's words: ``state``/``exclude`` and a
    state name first, then keywords, operators, parentheses and the values they
    announce — addresses (``dst``/``src``), ports, device names and marks.  ss looks
    every other word up in DNS, before its grammar even fails, which would carry
    whatever the word spells out of the host; so an address must be numeric."""
    expect: str | None = None
    states_allowed = True
    for word in " ".join(operands).split(" "):  # ss splits its filter at blanks only: "(dport" is one word
        if not word:
            continue
        if not word.isascii():  # no keyword or numeric value has any; a name would go to the resolver
            raise Refusal(REFUSED, f"ss: filter word {word[:60]!r} holds a character that is not ASCII")
        if expect == "state":
            if word.lower() not in _SS_STATES:
                raise Refusal(REFUSED, f"ss: {word[:60]!r} is not a socket state ({', '.join(sorted(_SS_STATES))})")
            expect = None
        elif expect is not None:
            if word in _SS_COMPARE:
                continue
            if not _ss_value_ok(expect, word):
                hint = (" (give the address, e.g. 'dst 10.0.0.5:443'; a name would be looked up in DNS)"
                        if expect == "host" else "")
                raise Refusal(REFUSED, f"ss: {word[:60]!r} is not a {expect} value{hint}")
            expect = None
        elif word in ("state", "exclude", "excl"):
            if not states_allowed:
                raise Refusal(REFUSED, f"ss: {word!r} must come before the filter expression")
            expect = "state"
        elif word in _SS_VALUE_OF:
            states_allowed, expect = False, _SS_VALUE_OF[word]
        elif word in _SS_LOGIC:
            states_allowed = False
        else:
            raise Refusal(REFUSED, f"ss: filter word {word[:60]!r} is not one of its keywords (state, exclude, dst, "
                                   "src, dport, sport, dev, fwmark, cgroup, and, or, not, parentheses, comparisons) "
                                   "or a value after one; ss would look it up in DNS (ss reads parentheses only as "
                                   "words of their own: '( dport = :443 )')")


_LSOF_WORD = re.compile(r"[A-Za-z0-9_.:@,^\[\]/-]*")
LSOF = CommandSpec("lsof", (
    *flags("n P l t a w b R V X"),
    # the host of -i@HOST numeric only: a name would be looked up in DNS (and carry whatever it spells out)
    O("i", check=pattern(r"[46]?([A-Za-z]+)?(@([0-9.]+|\[[0-9A-Fa-f:.]+\]))?(:[A-Za-z0-9_,-]+)?",
                         "an internet address (a numeric host: names are not looked up)")),
    V("p", check=pattern(r"\^?[0-9]+(,\^?[0-9]+)*", "process ids")),
    V("u", check=pattern(r"\^?[A-Za-z0-9_.-]+(,\^?[A-Za-z0-9_.-]+)*", "user names")),
    V("c", check=NAME), V("g", check=pattern(r"[0-9,^]+", "process group ids")),
    V("d", check=pattern(r"[A-Za-z0-9,^-]+", "descriptors")),
    V("s", check=pattern(r"[A-Za-z]+:[A-Za-z,^]+", "a protocol state filter"))),
    refused=((("r",), "repeats forever (the call would only time out)", REFUSED),
             (("K",), "is not needed", WRITE), (("k",), "reads another kernel name list", WRITE),
             (("F",), "is not needed read-only", WRITE)),
    operands="meta", check=lambda p: _no_plus_options(p.operands))


def _no_plus_options(words: Sequence[str]) -> None:
    for w in words:
        if w.startswith("+"):
            raise Refusal(WRITE, f"lsof: '{w}': '+' options are not on lsof's read-only table ('+r' repeats "
                                 "forever); name files by absolute path")

#: every getopt-style table by command name (find, ps, ip and mount are handled in bash_policy)
SPECS: dict[str, CommandSpec] = {s.name: s for s in (
    CAT, HEAD, TAIL, WC, STAT, READLINK, REALPATH, FILE, MD5SUM, SHA256SUM, SHA1SUM, SHA512SUM, CUT, UNIQ, TAC, NL,
    COMM, CMP, DIFF, grep_spec("grep"), grep_spec("egrep"),
    ZGREP, ZCAT, SORT, SED, LS, DU, DF, FREE, LSBLK, FINDMNT, VMSTAT, PGREP, ID, WHOAMI, WHO, W, LAST, GETENT,
    HOSTNAME, DATE, UPTIME, UNAME, NPROC, LSCPU, LSMOD, SYSCTL, DMESG, JOURNALCTL, SYSTEMCTL, SS, NETSTAT, LSOF,
)}
