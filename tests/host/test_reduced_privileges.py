"""A program that reads on the daemon's behalf (a read-only ``host_bash`` command, a log scan)
runs without the capabilities that bypass file permission checks, and with a private temporary
folder removed after it: the kernel, not only the path check, keeps it out of a private file
whose path was swapped in after the check, and what it leaves in ``TMPDIR`` goes with it."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest
import trio
from ongrid_host import runner

from tests.conftest import need
from tests.host.conftest import APPROVE
from ongridd.errors import ToolError


def _nobody() -> int:
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return 65534


@pytest.fixture
def private_file(tmp_path: Path) -> Path:
    """A file of another user (nobody) that only its owner may read; the daemon's file-read
    capability (as root here: CAP_DAC_OVERRIDE) would read it all the same."""
    need(os.geteuid() == 0, "root, to give a file to another user (CI runs as root)")
    victim = tmp_path / "victim.txt"
    victim.write_text("the-private-content\n")
    victim.chmod(0o600)
    os.chown(victim, _nobody(), _nobody())
    tmp_path.chmod(0o755)
    return victim


async def test_a_reduced_run_cannot_read_a_file_the_capability_would(private_file: Path):
    plain = await runner.run_bounded(["cat", str(private_file)], timeout_s=10)
    assert b"the-private-content" in plain.stdout  # what the daemon's own capability reaches
    reduced = await runner.run_reduced(["cat", str(private_file)], timeout_s=10)
    assert reduced.exit_code != 0 and b"the-private-content" not in reduced.stdout
    assert b"Permission denied" in reduced.stderr
    assert reduced.argv == ("cat", str(private_file))  # the command as checked, without the prefix


def _link_to_harmless(tmp_path: Path) -> Path:
    """A symbolic link to a harmless file, for a test to swap (the race an attacker runs)."""
    harmless = tmp_path / "harmless.txt"
    harmless.write_text("harmless\n")
    link = tmp_path / "link"
    link.symlink_to(harmless)
    return link


def _swap(link: Path, to: Path) -> None:
    link.unlink()
    link.symlink_to(to)


async def _refused_when_changed_before_the_pin(call, cmd: str, change) -> str:
    """Run ``cmd`` through host_bash with ``change()`` done after its checks, just before the run
    pins its files; the ToolError's text (the call must be refused)."""
    from ongrid_host import bash_policy, tools

    real_pin = bash_policy.pin_checked_files

    def changed_then_pinned(verdict, cwd):
        change()
        return real_pin(verdict, cwd)

    tools.pin_checked_files = changed_then_pinned
    try:
        with pytest.raises(ToolError) as info:
            await call("host_bash", {"cmd": cmd}, read_only=True)
    finally:
        tools.pin_checked_files = real_pin
    return str(info.value)


async def test_a_path_swapped_after_the_check_reads_nothing_private(call, private_file: Path, tmp_path: Path):
    # the race an attacker wins against any path check: the link points at a harmless file while the
    # command is checked and at the private one when it runs
    link = _link_to_harmless(tmp_path)
    real_run = runner.run_reduced

    async def swapped_then_run(argv, **kwargs):
        _swap(link, private_file)  # after the policy looked at it, and after the run opened the file
        return await real_run(argv, **kwargs)

    from ongrid_host import target as target_module

    target_module.run_reduced = swapped_then_run
    try:
        out = await call("host_bash", {"cmd": f"cat {link}"}, read_only=True)
    finally:
        target_module.run_reduced = real_run
    # the command reads the file that was checked, opened before the swap (/dev/fd/N), by its name
    assert out["class"] == "read" and "the-private-content" not in out["stdout"]
    assert out["stdout"] == "harmless\n" and out["exit_code"] == 0, out


async def test_a_path_swapped_between_its_check_and_the_run_is_refused(call, private_file: Path, tmp_path: Path):
    # the same race won earlier: the link is changed after the policy's checks, before the run opens it
    link = _link_to_harmless(tmp_path)
    said = await _refused_when_changed_before_the_pin(call, f"cat {link}", lambda: _swap(link, private_file))
    assert "another file than the one checked" in said and "nothing was run" in said


async def test_each_file_is_checked_as_the_file_it_opened(tmp_path: Path):
    """The checks of a local read look at the open file itself: a name that led to a harmless file
    for the name checks and to one holding a held secret when opened cannot have the one checked
    and the other read."""
    import os

    from ongrid_host.path_policy import PathPolicy

    from ongridd.secretset import REGISTRY

    secret = tmp_path / "bot.env"
    secret.write_text("TOKEN=ALICEtoken0123456789abcd\n")
    policy = PathPolicy.local(cwd=str(tmp_path))
    with REGISTRY.hold(["ALICEtoken0123456789abcd"]):
        fd = os.open(secret, os.O_RDONLY)
        try:
            problem = policy.pinned_problem(fd, "notes.txt", checked=False)
        finally:
            os.close(fd)
    assert problem is not None and "holds a secret Ongrid itself" in problem and "resolves to" in problem


async def test_a_reviewed_change_runs_with_the_daemons_privileges(call, private_file: Path):
    # only reads give up the capability: a change the reviewer approved does what it was approved for
    out = await call("host_bash", {"cmd": f"touch -c {private_file}", "reason": "refresh the marker (test)"},
                     reviewer=APPROVE)
    assert out["class"] == "write" and out["exit_code"] == 0, out


async def test_the_private_temporary_folder_goes_with_the_program(tmp_path: Path):
    done = await runner.run_reduced(["sh", "-c", 'touch "$TMPDIR/left-behind"; echo "$TMPDIR"'], timeout_s=10)
    scratch = Path(done.stdout.decode().strip())
    assert scratch.name.startswith("ongrid-cmd-") and not scratch.exists()
    # killed at the time limit (sort's temporary files after a SIGKILL): removed all the same
    killed = await runner.run_reduced(["sh", "-c", 'echo "$TMPDIR"; touch "$TMPDIR/a" "$TMPDIR/b"; sleep 30'],
                                      timeout_s=1)
    assert killed.timed_out
    assert not Path(killed.stdout.decode().strip()).exists()


async def test_cancelling_a_reduced_run_removes_its_folder_too():
    seen: list[str] = []

    def note(chunk: bytes) -> None:
        seen.append(chunk.decode().strip())

    with trio.move_on_after(1):
        await runner.run_reduced(["sh", "-c", 'echo "$TMPDIR"; sleep 30'], timeout_s=60, on_stdout=note)
    assert seen and not Path(seen[0]).exists()


def test_the_prefix_drops_only_what_bypasses_file_permissions():
    prefix = runner.reduced_privileges_prefix()
    if prefix:  # this process holds them (root here; the unit's ambient CAP_DAC_READ_SEARCH there)
        assert prefix[0].endswith("setpriv") and prefix[-1] == "--"
        assert any("dac_read_search" in w or w == "--ambient-caps=-all" for w in prefix)


async def test_a_root_daemons_reads_keep_the_log_groups(tmp_path: Path):
    # as the unit gives its user: a service's own log folder (drwxr-s--- redis adm) stays readable
    import grp

    need(os.geteuid() == 0, "root, to give a folder to another user (CI runs as root)")
    try:
        adm = grp.getgrnam("adm").gr_gid
    except KeyError:
        pytest.skip("no adm group on this host")
    logs = tmp_path / "service-logs"
    logs.mkdir()
    (logs / "service.log").write_text("started\n")
    os.chown(logs, _nobody(), adm)
    os.chown(logs / "service.log", _nobody(), adm)
    logs.chmod(0o2750)
    (logs / "service.log").chmod(0o640)
    tmp_path.chmod(0o755)
    done = await runner.run_reduced(["du", "-s", str(logs)], timeout_s=10)
    assert done.exit_code == 0, done.stderr
    read = await runner.run_reduced(["cat", str(logs / "service.log")], timeout_s=10)
    assert read.stdout == b"started\n"


@pytest.mark.parametrize("cmd", ["dmesg -F {link}", "du --files0-from={link}", "grep -f {link} {harmless}",
                                 "cat {link}", "grep -r -h x {folder}"])
async def test_every_file_a_read_names_is_pinned_option_values_and_folders_too(call, private_file: Path,
                                                                            tmp_path: Path, cmd: str):
    # an option's value (dmesg -F, du --files0-from) was opened again by name at the run, and so was the
    # folder of grep -r: a link swapped in between had them print /etc/shadow and an ssh host key
    link = _link_to_harmless(tmp_path)
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "app.log").write_text("x\n")

    def swap_both():
        _swap(link, private_file)
        folder.rename(tmp_path / "logs.old")
        folder.symlink_to(private_file.parent)

    said = await _refused_when_changed_before_the_pin(
        call, cmd.format(link=link, harmless=tmp_path / "harmless.txt", folder=folder), swap_both)
    assert "another file than the one checked" in said, said


async def test_a_path_missing_at_its_check_and_there_at_the_run_is_refused(call, private_file: Path, tmp_path: Path):
    link = tmp_path / "later"
    said = await _refused_when_changed_before_the_pin(call, f"sed -n 1,5p {link}",
                                                      lambda: link.symlink_to(private_file))
    assert "could not be opened when it was checked and can be now" in said
    # still missing at the run: the command runs and says so itself
    out = await call("host_bash", {"cmd": f"cat {tmp_path / 'never'}"}, read_only=True)
    assert out["exit_code"] != 0 and "No such file" in out["stderr"]


async def test_zgrep_reads_its_pinned_file(call, tmp_path: Path):
    # zgrep (a shell script) takes descriptors 3 to 5 for itself: a pinned file there read as empty
    import gzip

    log = tmp_path / "app.log.gz"
    log.write_bytes(gzip.compress(b"ok\nERROR disk full\n"))
    out = await call("host_bash", {"cmd": f"zgrep -H ERROR {log}"}, read_only=True)
    assert out["exit_code"] == 0 and out["stdout"] == f"{log}:ERROR disk full\n", out


async def test_a_pinned_option_value_is_named_as_written_in_the_output(call, tmp_path: Path):
    listed = tmp_path / "names"
    listed.write_bytes(b"\0")  # an empty name: du names the list file and the line in its complaint
    out = await call("host_bash", {"cmd": f"du --files0-from={listed}"}, read_only=True)
    assert "/dev/fd/" not in out["stdout"] + out["stderr"], out
    assert f"{listed}:1" in out["stderr"], out


def _others_folder(tmp_path: Path, name: str, mode: int, file: str = "", text: str = "") -> Path:
    """A folder of another user (nobody) with ``mode``, holding ``file`` (``text``, readable by
    all) if named; for a daemon whose reads drop a file-read capability, as root (CI runs as root)."""
    need(os.geteuid() == 0, "root, to give a folder to another user (CI runs as root)")
    need(bool(runner.reduced_privileges_prefix()), "a daemon whose reads drop a file-read capability")
    tmp_path.chmod(0o755)
    folder = tmp_path / name
    folder.mkdir(mode=mode)
    if file:
        (folder / file).write_text(text)
        (folder / file).chmod(0o644)
    os.chown(folder, _nobody(), _nobody())
    return folder


async def test_a_file_in_a_folder_the_reads_may_not_enter_is_refused_though_it_is_pinned(call, tmp_path: Path):
    """A read is handed the checked file open (``/dev/fd/N``), past the folders the kernel would
    have checked on the way to it: a file others may read inside a folder only its owner may enter
    (a user's home, a service's data folder) is refused as the path walk would have denied it."""
    folder = _others_folder(tmp_path, "service-data", 0o700, "version", "the-folder-private-content\n")
    plain = await runner.run_reduced(["cat", str(folder / "version")], timeout_s=10)
    assert b"Permission denied" in plain.stderr  # what the kernel says by path
    for cmd in (f"cat {folder / 'version'}", f"head -n 1 {folder}/../service-data/version",
                f"grep -c content {folder / 'version'}"):
        with pytest.raises(ToolError) as info:
            await call("host_bash", {"cmd": cmd}, read_only=True)
        assert f"lies in {folder} (mode 0700), which the daemon's reads may not enter" in str(info.value), cmd
    # the folder itself, read recursively: reopened by the command, it is the kernel's to deny
    searched = await call("host_bash", {"cmd": f"grep -r content {folder}"}, read_only=True)
    assert "Permission denied" in searched["stderr"] and "private-content" not in searched["stdout"]
    folder.chmod(0o711)  # others may pass through: the file's own mode decides
    result = await call("host_bash", {"cmd": f"cat {folder / 'version'}"}, read_only=True)
    assert result["stdout"] == "the-folder-private-content\n"


async def test_a_read_denied_a_file_says_why_a_root_daemon_could_not_read_it(call, tmp_path: Path):
    """The model sees ``Permission denied`` from a daemon running as root: the result says the read
    ran without the capabilities that bypass file permissions, and how to see the file's owner."""
    folder = _others_folder(tmp_path, "service-data", 0o700)
    # ls reads the folder by name (a name, not a file's content: not pinned); the kernel denies it
    result = await call("host_bash", {"cmd": f"ls {folder}"}, read_only=True)
    assert result["exit_code"] != 0 and "Permission denied" in result["stderr"]
    assert "without the capabilities that bypass file permissions" in result["note"], result
    missing = await call("host_bash", {"cmd": f"ls {tmp_path / 'absent'}"}, read_only=True)
    assert "note" not in missing  # not for every failure: "No such file" needs no note


async def test_a_path_missing_at_its_check_is_never_read_by_name(call, private_file: Path, tmp_path: Path):
    """A file not there when checked is not read by its name at the run: a link to a private file
    put there after the run's own look (the race a local user can run against an unpinned name) is
    never opened — the command is told there is no such file, under the name it was given."""
    link = tmp_path / "later"
    real_run = runner.run_reduced

    async def appears_then_run(argv, **kwargs):
        link.symlink_to(private_file)  # after the checks and the pin, before the program starts
        return await real_run(argv, **kwargs)

    from ongrid_host import target as target_module

    target_module.run_reduced = appears_then_run
    try:
        out = await call("host_bash", {"cmd": f"cat {link}"}, read_only=True)
        link.unlink()
        (tmp_path / "present").write_text("x\n")
        diffed = await call("host_bash", {"cmd": f"diff -N {link} {tmp_path / 'present'}"}, read_only=True)
    finally:
        target_module.run_reduced = real_run
    assert "the-private-content" not in out["stdout"] and out["exit_code"] == 1
    assert out["stderr"] == f"cat: {link}: No such file or directory\n", out
    # -N: the absent file as an empty one
    assert diffed["exit_code"] == 1 and diffed["stdout"] == "0a1\n> x\n", diffed
    # put there before the run looks: refused, as any file not the one checked
    said = await _refused_when_changed_before_the_pin(call, f"cat {tmp_path / 'later2'}",
                                                      lambda: (tmp_path / "later2").symlink_to(private_file))
    assert "could not be opened when it was checked and can be now" in said


async def test_a_folder_closed_by_its_acl_is_closed_as_by_its_mode(call, tmp_path: Path):
    """A folder whose mode lets everyone through may still shut a user out by a POSIX ACL entry of
    their own (``user:root:---``): the kernel denies the path walk, and so does the check of a
    pinned file in it; and a file absent from a closed folder is refused as one that is there
    (no answer about which names exist in it)."""
    folder = _others_folder(tmp_path, "acl", 0o755, "f", "acl-private-data\n")
    # user_obj rwx, user:root ---, group_obj r-x, mask r-x, other r-x
    entries = [(0x01, 7, 0xFFFFFFFF), (0x02, 0, 0), (0x04, 5, 0xFFFFFFFF), (0x10, 5, 0xFFFFFFFF),
               (0x20, 5, 0xFFFFFFFF)]
    blob = (2).to_bytes(4, "little") + b"".join(
        t.to_bytes(2, "little") + p.to_bytes(2, "little") + i.to_bytes(4, "little") for t, p, i in entries)
    try:
        os.setxattr(folder, "system.posix_acl_access", blob)
    except OSError as exc:
        need(False, f"POSIX ACLs on {tmp_path} ({exc.strerror})")
    plain = await runner.run_reduced(["cat", str(folder / "f")], timeout_s=10)
    assert b"Permission denied" in plain.stderr  # the kernel, by path
    for cmd in (f"cat {folder / 'f'}", f"diff -N {folder / 'nosuch'} /etc/hostname"):
        with pytest.raises(ToolError) as info:
            await call("host_bash", {"cmd": cmd}, read_only=True)
        assert f"lies in {folder} (mode 0755), which the daemon's reads may not enter" in str(info.value), cmd
    os.removexattr(folder, "system.posix_acl_access")
    result = await call("host_bash", {"cmd": f"cat {folder / 'f'}"}, read_only=True)
    assert result["stdout"] == "acl-private-data\n"


async def test_what_df_openssl_journalctl_and_find_open_is_pinned_too(call, tmp_path: Path):
    """``df FILE`` opens it (to find its mount), ``openssl x509 -in F``, ``journalctl --file F`` and
    ``find -files0-from F`` read theirs: each is pinned as the file checked, so a link swapped to
    another file after the check (a device a watchdog, by a local user's race) is refused, never
    opened; a device named outright is refused at the check."""
    need(os.geteuid() == 0, "root, to make a device node (CI runs as root)")
    tmp_path.chmod(0o755)
    plain = tmp_path / "plain.txt"
    plain.write_text("x\n")
    other = tmp_path / "other.txt"
    other.write_text("y\n")
    node = tmp_path / "chardev"
    os.mknod(node, 0o600 | 0o020000, os.makedev(1, 3))
    for cmd in (f"df {node}", f"openssl x509 -noout -subject -in {node}", f"find {tmp_path} -files0-from {node}"):
        with pytest.raises(ToolError) as info:
            await call("host_bash", {"cmd": cmd}, read_only=True)
        assert "is a character device, not a file" in str(info.value), cmd
    link = tmp_path / "link"
    for cmd in (f"df {link}", f"openssl x509 -noout -subject -in {link}", f"find {tmp_path} -files0-from {link}"):
        link.unlink(missing_ok=True)
        link.symlink_to(plain)
        said = await _refused_when_changed_before_the_pin(call, cmd, lambda: _swap(link, other))
        assert "another file than the one checked" in said, cmd
    link.unlink()
    link.symlink_to(plain)
    ran = await call("host_bash", {"cmd": f"df {link}"}, read_only=True)
    assert ran["exit_code"] == 0 and ran["argv"] == ["df", "--", str(link)] and "/dev/fd/" not in ran["stdout"]


async def test_a_journal_file_is_read_through_its_pin(call, tmp_path: Path):
    remote = next((p for p in ("/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote")
                   if os.path.exists(p)), None)
    need(remote is not None, "Debian's systemd-journal-remote (package systemd-journal-remote) is not installed")
    tmp_path.chmod(0o755)
    (tmp_path / "e.export").write_text("__REALTIME_TIMESTAMP=1700000000000000\n__MONOTONIC_TIMESTAMP=1\n"
                                       "_BOOT_ID=0123456789abcdef0123456789abcdef\nMESSAGE=pinned journal\n"
                                       "SYSLOG_IDENTIFIER=app\n\n")
    journal = tmp_path / "app.journal"
    await trio.run_process([remote, "-o", str(journal), str(tmp_path / "e.export")], capture_stdout=True,
                           capture_stderr=True)
    journal.chmod(0o644)
    result = await call("host_bash", {"cmd": f"journalctl --file {journal} -n 1 --no-pager -o cat"}, read_only=True)
    assert result["exit_code"] == 0 and result["stdout"] == "pinned journal\n", result
