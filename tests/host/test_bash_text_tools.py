"""host_bash's text tools beside cat and grep: cut, uniq, tac, nl, comm, cmp, diff and the
checksums run read-only on real files; the words that would make them write, run another
program or read a whole folder are not on their tables; and, as readers whose output depends on
what a file holds, they run only on files checked for the daemon's secrets."""

from __future__ import annotations

import hashlib
import os

import pytest
from ongrid_host.bash_policy import analyze
from ongrid_host.path_policy import PathPolicy

from ongridd.errors import ToolError
from ongridd.secretset import FILE_SCAN_BYTES, REGISTRY

HELD = "CAROLtoken0123456789wxyz"


@pytest.fixture
def files(tmp_path):
    (tmp_path / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\nwww:x:33:33:www:/var/www:/usr/sbin/nologin\n")
    (tmp_path / "codes").write_text("200\n200\n404\n500\n500\n500\n")
    (tmp_path / "a").write_text("alpha\nbeta\ngamma\n")
    (tmp_path / "b").write_text("alpha\nbeta2\ngamma\n")
    return tmp_path


async def test_each_runs_read_only_on_real_files_and_prints_what_the_program_prints(call, files):
    d = files
    cases = [
        (f"cut -d: -f1,7 {d}/passwd", "root:/bin/bash\nwww:/usr/sbin/nologin\n"),
        (f"cut -c1-3 {d}/passwd", "roo\nwww\n"),
        (f"uniq -c {d}/codes", "      2 200\n      1 404\n      3 500\n"),
        (f"uniq -d {d}/codes", "200\n500\n"),
        (f"tac {d}/a", "gamma\nbeta\nalpha\n"),
        (f"nl -ba {d}/a", "     1\talpha\n     2\tbeta\n     3\tgamma\n"),
        (f"comm -3 {d}/a {d}/b", "beta\n\tbeta2\n"),
        (f"sha1sum {d}/a", None),
        (f"sha512sum {d}/a", None),
    ]
    for cmd, expected in cases:
        result = await call("host_bash", {"cmd": cmd}, read_only=True)
        assert result["class"] == "read" and result["exit_code"] == 0, (cmd, result)
        if expected is not None:
            assert result["stdout"] == expected, cmd
    for name, algorithm in (("sha1sum", "sha1"), ("sha512sum", "sha512")):
        digest = await call("host_bash", {"cmd": f"{name} {d}/a"}, read_only=True)
        # named as written, not as the pinned /dev/fd/N
        assert digest["stdout"] == f"{hashlib.new(algorithm, (d / 'a').read_bytes()).hexdigest()}  {d}/a\n"


async def test_diff_and_cmp_report_the_difference_and_name_the_files_as_written(call, files):
    d = files
    result = await call("host_bash", {"cmd": f"diff -u {d}/a {d}/b"}, read_only=True)
    assert result["exit_code"] == 1  # the files differ: reported, not raised
    out = result["stdout"]
    assert f"--- {d}/a" in out and f"+++ {d}/b" in out and "-beta\n+beta2\n" in out
    assert "/dev/fd/" not in out
    same = await call("host_bash", {"cmd": f"diff -q {d}/a {d}/a"}, read_only=True)
    assert same["exit_code"] == 0 and same["stdout"] == ""
    cmp = await call("host_bash", {"cmd": f"cmp {d}/a {d}/b"}, read_only=True)
    assert cmp["exit_code"] == 1 and f"{d}/a {d}/b differ: byte 11, line 2" in cmp["stdout"]


@pytest.mark.parametrize(("cmd", "kind", "why"), [
    ("uniq {d}/codes {d}/out", "write", "operand '{d}/out': uniq writes its output to a second operand; name the file to read only"),
    ("diff -r {d} {d}", "refused", "compares whole folders; name the two files to compare"),
    ("diff --recursive {d} {d}", "refused", "compares whole folders"),
    ("diff -x '*.key' {d}/a {d}/b", "refused", "compares whole folders"),
    ("diff --to-file={d}/a {d}/b", "refused", "name both files as operands"),
    ("diff -l {d}/a {d}/b", "write", "runs pr on the output"),
    ("diff {d}/a {d}/b {d}/codes", "write", "takes at most 2 operands read-only"),
    ("cmp {d}/a {d}/b 0 0", "write", "takes at most 2 operands read-only"),
    ("cut -f 1;id {d}/a", "refused", "';' (command separator)"),
    ("cut -f 'x' {d}/a", "write", "a list like 1,3-5 or 2-"),
    ("nl -n xx {d}/a", "write", "expected one of ln, rn, rz"),
    ("cut -f1 /etc/shadow", "refused", "names a secrets file"),
    ("diff /etc/ssh/ssh_host_ed25519_key {d}/a", "refused", "secrets file"),
    ("tac /proc/self/environ", "refused", "forbidden path"),
    ("sha1sum --check {d}/a", "write", "reads the files named inside a checksum list"),
])
def test_words_that_write_run_a_program_or_read_a_folder_are_not_read_only(tmp_path, cmd, kind, why):
    verdict = analyze(cmd.format(d=tmp_path))
    assert verdict.kind == kind, (cmd, verdict)
    assert why.format(d=tmp_path) in verdict.reason, (cmd, verdict.reason)


async def test_a_folder_where_diff_expects_a_file_is_refused_before_it_runs(call, files):
    """diff given two folders compares every file they hold, and given a folder and a file, the
    file of that name in the folder (``diff /etc/ssh /tmp`` would print a host key that has an
    empty namesake in /tmp): none of those files was checked, so a folder is refused — on this
    host as the open file it is; on an ssh host, where it cannot be told from a file before the
    run, diff is not run at all."""
    (files / "sub").mkdir()
    (files / "sub" / "a").write_text("alpha\n")
    for cmd in (f"diff {files} {files}/sub", f"diff {files}/sub {files}/a", f"diff -q {files}/a {files}/sub"):
        with pytest.raises(ToolError) as info:
            await call("host_bash", {"cmd": cmd}, read_only=True)
        assert "is a folder: diff compares the files in a folder" in str(info.value), str(info.value)
        assert "forbidden" not in str(info.value)  # nothing forbidden about the folder: folders are not compared
        assert "Nothing was run" in str(info.value)
    # on an ssh host a folder cannot be told from a file before the run, nor the names in it seen
    # (diff -N /srv/app /nonexistent prints every file in the folder, .env and keys included)
    remote = PathPolicy.remote()
    for cmd in ("diff /etc/ssh /tmp", "diff -N /srv/app /nonexistent", "diff /etc/nginx/nginx.conf /tmp/nginx.conf"):
        verdict = analyze(cmd, remote)
        assert verdict.kind == "refused" and "diff runs on this host only" in verdict.reason, (cmd, verdict)


def test_they_read_only_files_checked_for_the_secrets_the_daemon_holds(tmp_path):
    """While a secret is held, a file holding it is read by none of them; and as a field, a
    character range, a count or a difference could give a held secret away a few characters or one
    yes/no at a time, each too little for the output's redaction, they read no file too large to
    check either — a checksum, a whole-file figure, does."""
    (tmp_path / "bot.env").write_text(f"TOKEN={HELD}\n")
    (tmp_path / "plain").write_text("TOKEN=none\n")
    with open(tmp_path / "big.log", "wb") as fh:  # sparse: over the scan's limit, the secret at its end
        fh.truncate(FILE_SCAN_BYTES + 1)
        fh.seek(0, os.SEEK_END)
        fh.write(f"\ntoken={HELD}\n".encode())
    policy = PathPolicy.local(cwd=str(tmp_path))
    asking = ("cut -c7-9 {f}", "uniq -c {f}", "tac -s X {f}", "nl -bpTOKEN {f}", "comm {f} plain",
              "cmp {f} plain", "diff {f} plain", "diff -q plain {f}")
    with REGISTRY.hold([HELD]):
        for template in asking:
            assert analyze(template.format(f="plain"), policy).kind == "read", template
            verdict = analyze(template.format(f="bot.env"), policy)
            assert verdict.kind == "refused" and "bot.env" in verdict.reason, (template, verdict)
            verdict = analyze(template.format(f="big.log"), policy)
            assert verdict.kind == "refused" and "could not be checked for" in verdict.reason, (template, verdict)
        assert analyze("sha1sum bot.env", policy).kind == "refused"
        assert analyze("sha1sum big.log", policy).kind == "read"
    assert analyze("cut -c7-9 big.log", policy).kind == "read"  # no secret held: nothing to protect


async def test_an_operand_shaped_like_an_option_value_is_the_path_it_spells(call):
    """After ``--`` a word is a file name whole: ``--x=/etc/hostname`` is a file of that name in the
    folder the command runs in, not /etc/hostname (checked as one, run as the other)."""
    result = await call("host_bash", {"cmd": "cat -- --x=/etc/hostname"}, read_only=True)
    with open("/etc/hostname") as fh:
        assert fh.read() not in result["stdout"] or not result["stdout"]
    assert result["exit_code"] == 1 and result["stderr"] == "cat: --x=/etc/hostname: No such file or directory\n"
