"""The host tools on a remote host: an OpenSSH server started on a loopback
port with generated host and client keys (host 'lo-ssh').  The remote host
is this machine, so every remote result can be checked against the local one.

Needs Debian's openssh-server (sshd) and root (the test logs in as root with
a key).  Without sshd the tests are skipped, unless CI=true: then they fail.
"""

from __future__ import annotations

import os
import queue
import shlex
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest
import trio

from ongridd.config import HostConfig
from ongridd.errors import ToolError
from tests.host.conftest import Caller, make_tools

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)


def _need(condition: bool, why: str) -> None:
    if not condition:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why} (CI=true: the SSH tests must run; install openssh-server)")
        pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """Start ``sshd -D`` on a free loopback port; yield the connection facts."""
    _need(SSHD is not None, "sshd not installed (Debian package openssh-server)")
    _need(shutil.which("ssh") is not None, "ssh client not installed (Debian package openssh-client)")
    _need(os.geteuid() == 0, "the SSH tests log in as root and must run as root")
    d = tmp_path_factory.mktemp("sshd")
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
    (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
    port = _free_port()
    (d / "sshd_config").write_text(f"""\
ListenAddress 127.0.0.1
HostKey {d / 'host_key'}
AuthorizedKeysFile {d / 'authorized_keys'}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
LogLevel INFO
""")
    host_pub = (d / "host_key.pub").read_text().split()
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation directory
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config"), "-p", str(port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()

    def pump():
        for line in proc.stderr:
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    seen = []
    try:
        while True:
            line = lines.get(timeout=20)
            seen.append(line)
            if not line:
                raise RuntimeError(f"sshd exited: {''.join(seen)}")
            if "Server listening on" in line:
                break
        yield {"dir": d, "port": port}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _host(sshd, **over) -> HostConfig:
    fields = dict(name="lo-ssh", address="127.0.0.1", ssh_user="root", ssh_port=sshd["port"],
                  ssh_key=str(sshd["dir"] / "client_key"), labels={"role": "test"})
    fields.update(over)
    return HostConfig(**fields)


def _settings(sshd, **over) -> dict:
    s = {"known_hosts_file": str(sshd["dir"] / "known_hosts"), "strict_host_key_checking": "yes",
         "ssh_config_file": "none", "connect_timeout_s": 5}
    s.update(over)
    return s


@pytest.fixture
def rcall(sshd) -> Caller:
    return Caller(make_tools(hosts=(_host(sshd),), settings=_settings(sshd)))


async def test_du_summary_over_ssh_matches_local(rcall, call, tree):
    args = {"paths": [str(tree["root"])], "depth": 2}
    remote = await rcall("host_du_summary", {**args, "host": "lo-ssh"})
    local = await call("host_du_summary", args)
    assert remote["host"] == "lo-ssh" and remote["partial"] is False
    assert remote["paths"] == local["paths"]
    assert remote["paths"][0]["children"][0]["path"].endswith("/big")


async def test_find_large_files_over_ssh_matches_local(rcall, call, tree):
    args = {"paths": [str(tree["root"])], "min_size": "1M"}
    remote = await rcall("host_find_large_files", {**args, "host": "lo-ssh"})
    local = await call("host_find_large_files", args)
    strip = [{k: v for k, v in f.items() if k != "path"} for f in remote["files"]]
    assert strip == [{k: v for k, v in f.items() if k != "path"} for f in local["files"]]
    assert [f["path"] for f in remote["files"]][1:] == [f["path"] for f in local["files"]][1:]


async def test_missing_path_over_ssh(rcall, tmp_path):
    with pytest.raises(ToolError, match=r"does not exist on host 'lo-ssh'"):
        await rcall("host_du_summary", {"host": "lo-ssh", "paths": [str(tmp_path / "missing")]})


async def test_stat_over_ssh_matches_local(rcall, call, tree):
    for rel in ("logs/app.log", "big", "loop"):
        path = str(tree["root"] / rel)
        remote = await rcall("host_stat_file", {"host": "lo-ssh", "path": path})
        local = await call("host_stat_file", {"path": path})
        for key in ("type", "size_bytes", "allocated_bytes", "mode", "owner", "uid", "group", "mtime",
                    "inode", "links"):
            assert remote[key] == local[key], (rel, key)
        assert remote.get("link_target") == local.get("link_target")
        assert remote["filesystem"]["inodes_total"] == local["filesystem"]["inodes_total"]


async def test_load_over_ssh(rcall):
    result = await rcall("get_host_load", {"host": "lo-ssh"})
    assert result["host"] == "lo-ssh"
    assert result["cpu_count"] == os.cpu_count()
    with open("/proc/meminfo") as f:
        total = int(next(line for line in f if line.startswith("MemTotal:")).split()[1]) * 1024
    assert result["memory"]["total_bytes"] == total
    assert result["uptime_s"] > 0 and result["mounts"]
    assert not [m for m in result["mounts"] if m["fstype"] in ("proc", "sysfs")]


async def test_processes_over_ssh(rcall):
    result = await rcall("get_host_processes", {"host": "lo-ssh", "sort_by": "rss", "top_n": 5})
    rss = [r["rss_bytes"] for r in result["processes"]]
    assert len(rss) == 5 and rss == sorted(rss, reverse=True) and rss[0] > 0
    assert result["processes"][0]["user"] and result["processes"][0]["cmdline"]


async def test_bash_over_ssh(rcall, tmp_path):
    result = await rcall("host_bash", {"host": "lo-ssh", "cmd": "uname -n"})
    assert result["stdout"].strip() == os.uname().nodename and result["host"] == "lo-ssh"
    # words stay literal through the remote shell: a quoted ';' is an argument, not a separator
    marker = tmp_path / "marker"
    f = tmp_path / "data"
    f.write_text("a;b\n")
    result = await rcall("host_bash", {"host": "lo-ssh",
                                       "cmd": f"grep -c 'a;b; touch {marker}' {shlex.quote(str(f))}"})
    assert result["stdout"].strip() == "0" and not marker.exists()
    with pytest.raises(ToolError, match=r"';' \(command separator\)"):
        await rcall("host_bash", {"host": "lo-ssh", "cmd": f"ls; touch {marker}"})
    with pytest.raises(ToolError, match=r"read-only"):
        await rcall("host_bash", {"host": "lo-ssh", "cmd": f"touch {marker}", "reason": "x"}, read_only=True)
    assert not marker.exists()


@pytest.mark.skipif(os.path.isdir("/run/systemd/system"), reason="systemd is running on this machine")
async def test_restart_over_ssh_without_systemd(rcall):
    with pytest.raises(ToolError, match=r"systemd is not running on host 'lo-ssh'"):
        await rcall("host_restart_service", {"host": "lo-ssh", "service": "nginx", "reason": "test"})


async def test_wrong_host_key_is_refused_not_prompted(sshd, tmp_path):
    other = tmp_path / "other"
    await trio.run_process(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)])
    pub = other.with_suffix(".pub").read_text().split()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd['port']} {pub[0]} {pub[1]}\n")
    call = Caller(make_tools(hosts=(_host(sshd),), settings=_settings(sshd, known_hosts_file=str(known))))
    with pytest.raises(ToolError, match=r"ssh to host 'lo-ssh' \(127\.0\.0\.1:\d+\) failed: .*Host key verification failed"):
        await call("get_host_load", {"host": "lo-ssh"})


async def test_unknown_key_fails_in_batch_mode(sshd, tmp_path):
    stranger = tmp_path / "stranger"
    await trio.run_process(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)])
    call = Caller(make_tools(hosts=(_host(sshd, ssh_key=str(stranger)),), settings=_settings(sshd)))
    with pytest.raises(ToolError, match=r"Permission denied"):
        await call("host_stat_file", {"host": "lo-ssh", "path": "/etc/hostname"})


async def test_unreachable_port(sshd, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, not listening: refused
        port = s.getsockname()[1]
        call = Caller(make_tools(hosts=(_host(sshd, ssh_port=port),), settings=_settings(sshd)))
        with pytest.raises(ToolError, match=r"Connection refused"):
            await call("get_host_load", {"host": "lo-ssh"})


def test_ssh_argv_is_never_interactive(sshd):
    from ongrid_host.settings import parse_settings
    from ongrid_host.ssh import ssh_argv

    argv = ssh_argv(_host(sshd), parse_settings(_settings(sshd)), "true")
    joined = " ".join(argv)
    assert "BatchMode=yes" in joined and "StrictHostKeyChecking=yes" in joined and "ConnectTimeout=5" in joined
    assert argv[-3:] == ["--", "127.0.0.1", "true"]
    assert Path(argv[argv.index("-i") + 1]).name == "client_key"


def _pids_running(cmdline: bytes) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if f.read() == cmdline:
                        with open(f"/proc/{entry}/stat") as s:
                            if s.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                                out.append(int(entry))
            except OSError:
                continue
    return out


async def test_remote_command_is_bounded_on_the_remote_side(sshd):
    """Killing the local ssh client at the time limit does not stop a remote
    command without a terminal; the remote ``timeout -s KILL`` does."""
    from ongrid_host.settings import parse_settings
    from ongrid_host.ssh import REMOTE_GRACE_S, run_remote

    marker = b"sleep\x0037.25\x00"
    result = await run_remote(_host(sshd), parse_settings(_settings(sshd)), ["sleep", "37.25"], timeout_s=1)
    assert result.timed_out
    with trio.fail_after(1 + REMOTE_GRACE_S + 5):
        while _pids_running(marker):
            await trio.sleep(0.1)
