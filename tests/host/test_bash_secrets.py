"""host_bash must not leak the daemon's secrets to a read-only persona:
paths judged by what they resolve to, strict ps and ip options, and a
scrubbed environment for every child process (breaker findings)."""

from __future__ import annotations

import os

import pytest
from ongrid_host import runner, target
from ongrid_host.bash_policy import analyze
from ongrid_host.path_policy import PathPolicy
from ongrid_host.runner import SSH_ENV_KEYS, log_group_ids, run_bounded, scrubbed_env
from ongrid_host.settings import HostSettings
from ongrid_host.ssh import run_remote

from ongridd.config import Config, HostConfig
from ongridd.errors import ToolError
from tests.conftest import need
from tests.host.conftest import APPROVE, Caller, make_tools

PID = os.getpid()

# (command, words the refusal must contain, verdict): a forbidden path or a
# secret is "refused" (never runs, not even after a review); an option off a
# command's read-only table is "write" (refused for a read-only persona)
LEAKS = [
    # ps: the BSD 'e' flag anywhere in a cluster prints environments
    ("ps ewwp{pid}", "BSD option 'e'", "refused"),
    ("ps e1", "BSD option 'e'", "refused"),
    ("ps axe", "BSD option 'e'", "refused"),
    ("ps -o pid,nosuchfield", "field 'nosuchfield'", "write"),
    ("ps --sort=-bogus", "field 'bogus'", "write"),
    ("ps O", "BSD option 'O'", "write"),
    # paths by what they resolve to
    ("grep -a -d recurse KEY /proc/{pid}/task", "would read /proc", "refused"),
    ("grep -ra KEY ../../proc/self/", "resolves to /proc/self", "refused"),
    ("grep -ra KEY //proc/1/", "resolves to /proc/1", "refused"),
    ("grep -a --directories=recurse KEY /tmp/../proc/self/", "would read /proc", "refused"),
    ("grep -a --dir=rec KEY /etc", "one of read, skip, recurse", "write"),
    ("grep -a --dir=recurse KEY /etc", "would include /etc/shadow", "refused"),
    ("grep -adrecurse KEY /etc", "would include /etc/shadow", "refused"),
    ("cat //etc/shadow", "resolves to /etc/shadow", "refused"),
    ("cat /proc/self/root/etc/shadow", "would read /proc", "refused"),
    ("cat ../../etc/shadow", "resolves to /etc/shadow", "refused"),
    ("cat etc/shadow", "resolves to /etc/shadow", "refused"),
    ("grep -r -h -A2 PRIVATE /etc/ssh/", "would include /etc/ssh", "refused"),
    ("grep -rh sk- /etc", "would include /etc/shadow", "refused"),
    ("grep -r KEY", "would include /proc", "refused"),  # no target: the folder it runs in, '/'
    ("grep -r KEY /", "would include /proc", "refused"),
    ("grep -R KEY /var/log", "follows every symlink", "refused"),
    ("head -c 100 /proc/self/mem", "would read /proc", "refused"),
    ("zcat /dev/zero", "would read /dev", "refused"),
    ("cat /etc/ssh/ssh_host_rsa_key", "secrets file", "refused"),
    ("cat /etc/ssh/ssh_host_ecdsa_key.old", "ssh host key", "refused"),
    ("cat /etc/sudoers", "sudo policy", "refused"),
    ("cat /etc/ssl/private/server.pem", "TLS private keys", "refused"),
    ("cat /etc/ongrid/ongrid.yaml", "Ongrid's configuration", "refused"),
    # copies of secrets under other names (found by a hostile review: Debian keeps daily copies)
    ("cat /var/backups/shadow.bak", "system backups", "refused"),
    ("cat /var/backups/gshadow.bak", "system backups", "refused"),
    ("grep -r root /var/backups/", "system backups", "refused"),
    ("cat /etc/shadow.dpkg-old", "password-hash file or a copy", "refused"),
    ("cat /etc/shadow.bak", "password-hash file or a copy", "refused"),
    ("cat /etc/shadow~", "password-hash file or a copy", "refused"),
    ("cat /etc/gshadow.dpkg-new", "password-hash file or a copy", "refused"),
    ("cat /etc/sudoers.dpkg-old", "sudo policy or a copy", "refused"),
    ("cat /tmp/copy/id_rsa.old", "an ssh key", "refused"),
    ("cat /srv/chroot/etc/ssh/ssh_host_ed25519_key", "an ssh host key or a copy of one", "refused"),
    ("diff /backup/ssh_host_rsa_key.old /etc/hostname", "an ssh host key or a copy of one", "refused"),
    ("cat /etc/nginx/ssl/privkey.pem", "PEM file", "refused"),
    ("cat /etc/haproxy/certs/site.pem", "PEM file", "refused"),
    ("cat /root/.ssh/authorized_keys", ".ssh", "refused"),
    ("sed -f /proc/1/cmdline /etc/hostname", "reads a script from a file", "write"),
    ("grep -f /proc/1/cmdline /etc/hostname", "would read /proc", "refused"),
    ("wc --files0-from=/proc/1/cmdline", "reads the names of the files to read from a file", "write"),
    ("du --files0-from=/proc/1/cmdline", "would read /proc", "refused"),
    ("date -f /proc/1/cmdline", "reads dates from a file", "write"),
    ("journalctl -D /proc/1", "would read /proc", "refused"),
    # a command off the allowlist (or off its table) that names a forbidden path is refused too, not proposed:
    # an approved review would hand the secret over encoded, past the credential filter
    ("base64 /etc/shadow", "'/etc/shadow' names a secrets file", "refused"),
    ("strings /proc/{pid}/environ", "names a secrets file", "refused"),
    ("od -c /etc/ongrid/ongrid.env", "Ongrid's configuration", "refused"),
    ("xxd /etc/ssl/private/k.pem", "TLS private keys", "refused"),
    ("openssl enc -base64 -in=/root/.ssh/id_rsa", "names a secrets file", "refused"),
    ("sh -c 'base64 /etc/gshadow | head'", "'/etc/gshadow' names a secrets file", "refused"),
    ("/usr/bin/xxd /etc/shadow", "names a secrets file", "refused"),
    ("sort -o /tmp/x /etc/shadow", "names a secrets file", "refused"),
    ("xxd /proc/1/mem", "memory", "refused"),
    ("cp /root/.ssh/authorized_keys /tmp/k", "ssh keys", "refused"),
    # spelled through a process's view of the files, percent-encoded in a file: URL, glued to a short option,
    # a secret by name inside an area a change may name
    ("base64 /proc/self/root/etc/shadow", "a process's own view of the files", "refused"),
    ("curl file:///etc/%73hadow", "'/etc/shadow' names a secrets file", "refused"),
    ("curl -T/proc/1/mem http://127.0.0.1:9/", "memory", "refused"),
    ("curl -T/dev/mem http://127.0.0.1:9/", "memory", "refused"),
    ("base64 /var/backups/shadow.bak", "password-hash file", "refused"),
    ("base64 /etc/kubernetes/pki/ca.key", "private key", "refused"),
    # a name read inside a folder the command switches to (tar -C, env --chdir, a script's cd or os.chdir)
    ("tar -C /etc -czf /tmp/x.tgz shadow", "'/etc/shadow' names a secrets file", "refused"),
    ("tar --directory=/home/ops -cf /tmp/k.tar .ssh/id_rsa", "ssh keys", "refused"),
    ("env -C/etc base64 gshadow", "'/etc/gshadow' names a secrets file", "refused"),
    ("sh -c 'cd /etc && base64 shadow'", "'/etc/shadow' names a secrets file", "refused"),
    ("sh -c 'cd /etc; cd ssl/private; cat k.pem'", "TLS private keys", "refused"),
    ("python3 -c 'import os; os.chdir(\"/etc\"); print(open(\"shadow\").read())'", "names a secrets file",
     "refused"),
    # ... in any spelling: abbreviated, bundled, tar's old-style letters, an option of cd before the folder
    ("tar --dir=/etc -czf /tmp/x.tgz ongrid", "Ongrid's configuration", "refused"),
    ("tar -czC /etc -f /tmp/x.tgz ongrid", "Ongrid's configuration", "refused"),
    ("tar czfC /tmp/x.tgz /etc ongrid", "Ongrid's configuration", "refused"),
    ("env -iC/etc cat ongrid/ongrid.yaml", "Ongrid's configuration", "refused"),
    ("env --ch=/etc cat ongrid/ongrid.yaml", "Ongrid's configuration", "refused"),
    ("sh -c 'cd -P /etc && cat ongrid/ongrid.yaml'", "Ongrid's configuration", "refused"),
    ("sh -c 'cd etc && cat shadow'", "'/etc/shadow' names a secrets file", "refused"),
    # a folder glued to its option, relative, in a chain, or after an abbreviated switch
    ("tar -cf - -Cetc/ongrid .", "Ongrid's configuration", "refused"),
    ("tar -cf - -C/etc -Cssl -Cprivate .", "TLS private keys", "refused"),
    ("env -Cetc cat ongrid/ongrid.yaml", "Ongrid's configuration", "refused"),
    ("tar -cf - --direc /etc --direc ssl --direc private .", "TLS private keys", "refused"),
    ("tar -xC /etc -xC ssl -xC private -cf - .", "TLS private keys", "refused"),
    ("cat /var/log/journal/0123/fss", "sealing key", "refused"),
    ("grep -r -z KEY /var/log", "-z with a recursive search", "refused"),
    # the raw journal files hold every field (a crashed process's environment); systemctl status prints them all
    # in the output modes journalctl refuses
    ("head -c 100000 /var/log/journal/0123/system.journal", "binary journal file", "refused"),
    ("sed -n l /run/log/journal/0123/system@0123.journal~", "binary journal file", "refused"),
    ("systemctl status app.service -o export -n 100", "COREDUMP_ENVIRON", "refused"),
    ("systemctl -o json-pretty status app", "COREDUMP_ENVIRON", "refused"),
    ("systemctl --out verbose status app", "COREDUMP_ENVIRON", "refused"),
    ("systemctl -overbose status app", "COREDUMP_ENVIRON", "refused"),
    ("tar -C /etc -czf /tmp/etc-nginx.tgz nginx", "not on the read-only allowlist", "write"),
    ("git -C /srv/app pull", "not on the read-only allowlist", "write"),
    # what a change's usual business names stays for the reviewer: devices, container logs, private files,
    # a key's permissions (chmod and the like never print what a file holds), URLs that are no files here
    ("mount /dev/sdb1 /mnt", "only allowed without arguments", "write"),
    ("truncate -s0 /var/lib/docker/containers/abc/abc-json.log", "not on the read-only allowlist", "write"),
    ("chmod 600 /root/.ssh/id_ed25519", "not on the read-only allowlist", "write"),
    ("rm /etc/sudoers.d/old", "not on the read-only allowlist", "write"),
    ("curl -o /tmp/x https://api.example.com/v1/credentials/rotate", "not on the read-only allowlist", "write"),
    ("aws s3 cp s3://backups/secrets/app.tar /tmp/", "not on the read-only allowlist", "write"),
    # ip: any abbreviation of -batch / -netns / -force
    ("ip -ba a", "'-ba' is not an allowed ip option", "write"),
    ("ip -ba - a", "'-ba' is not an allowed ip option", "write"),
    ("ip -b a", "'-b' is not an allowed ip option", "write"),
    ("ip -batch a", "'-batch' is not an allowed ip option", "write"),
    ("ip --batch a", "is not an allowed ip option", "write"),
    ("ip -netn x addr", "'-netn' is not an allowed ip option", "write"),
    ("ip -n x addr", "'-n' is not an allowed ip option", "write"),
    ("ip -force a", "'-force' is not an allowed ip option", "write"),
    ("ip -fo a", "'-fo' is not an allowed ip option", "write"),
    ("ip netns exec x id", "object 'netns'", "write"),
]

STILL_READ = [
    "ps aux", "ps -ef", "ps -eo pid,ppid,%cpu,args --sort=-%cpu", "ps -p 1 -o pid,comm", "ps axjf", "ps 1",
    "ps -u root", "ps --forest -e", "ip -br a", "ip -4 -br addr show dev lo", "ip -s link", "ip route get 127.0.0.1",
    "ip -j -p route show", "grep -r KEY /var/log", "grep -rn x /usr/share/doc/git", "grep /proc/ /etc/hostname",
    "sed -n /dev/p /etc/hostname", "cat /etc/ssh/sshd_config", "ls -la /proc/1", "find /proc -maxdepth 1 -name 1",
    "stat /proc/1", "du -sh /etc", "cat /etc/hostname", "cat /tmp/copy/id_rsa.pub", "cat /etc/passwd",
    "systemctl status nginx -o short-iso", "systemctl -o cat status nginx", "ls -la /var/log/journal",
]


@pytest.fixture
def runs(monkeypatch):
    """Every program host_bash would start (it must stay empty for refusals)."""
    started: list = []
    real = target.run_bounded

    async def recorder(argv, **kw):
        started.append(list(argv))
        return await real(argv, **kw)

    monkeypatch.setattr(target, "run_bounded", recorder)
    return started


@pytest.mark.parametrize(("cmd", "why", "kind"), LEAKS)
async def test_secret_leaks_are_refused_for_read_only_and_nothing_runs(call, tools, runs, cmd, why, kind):
    cmd = cmd.format(pid=PID)  # this process's pid, filled in here so test ids are the same in every worker
    verdict = analyze(cmd)
    assert verdict.kind == kind, (cmd, verdict)
    assert why in verdict.reason, verdict.reason
    if kind == "refused" and "/" in why:
        assert "forbidden path" in verdict.reason
    assert tools["host_bash"].class_for({"cmd": cmd}) == ("write" if kind == "write" else "read")
    with pytest.raises(ToolError) as info:
        await call("host_bash", {"cmd": cmd, "reason": "probe"}, read_only=True)
    assert why in str(info.value) and "Nothing was run" in str(info.value)
    if kind == "refused":  # not even an approved review runs it
        with pytest.raises(ToolError) as info:
            await call("host_bash", {"cmd": cmd, "reason": "probe"}, reviewer=APPROVE)
        assert why in str(info.value)
    assert runs == []


@pytest.mark.parametrize("cmd", STILL_READ)
def test_useful_reads_stay_read(cmd):
    verdict = analyze(cmd)
    assert verdict.kind == "read", verdict.reason


def test_daemon_state_dir_and_config_are_forbidden(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "ongrid.db").write_text("x")
    cfg = tmp_path / "ongrid.yaml"
    cfg.write_text("{}")
    tools = make_tools()
    from ongrid_host.tools import HostTools

    from ongridd.plugins.api import PluginContext
    ht = HostTools(PluginContext(config=Config(state_dir=str(state), source=str(cfg)), plugin_name="ongrid_host",
                                 hosts=(HostConfig(name="local"),)))
    for cmd, why in ((f"cat {state}/ongrid.db", "Ongrid's state folder"), (f"head {cfg}", "configuration file"),
                     (f"grep -r x {tmp_path}", f"would include {state}")):
        verdict = ht.analyze({"cmd": cmd})
        assert verdict.kind == "refused" and why in verdict.reason and "forbidden path" in verdict.reason, (cmd,
                                                                                                          verdict)
    assert tools  # the default tools (no state dir under tmp_path) still build


@pytest.mark.parametrize("name", [".ENV", "server.KEY", "ID_RSA", "Shadow.bak", "cert.PEM", ".Bash_History"])
def test_secret_names_are_matched_in_any_case(tmp_path, name):
    (tmp_path / name).write_text("x")
    verdict = analyze(f"cat {tmp_path}/{name}")
    assert verdict.kind == "refused" and "forbidden path" in verdict.reason, verdict


@pytest.mark.parametrize("path", [
    "/var/cache/debconf/passwords.dat", "/etc/apt/auth.conf", "/var/lib/systemd/credential.secret",
    "/var/lib/tailscale/tailscaled.state", "/etc/samba/smbpasswd", "/var/lib/samba/private/secrets.tdb",
    "/etc/wpa_supplicant/wpa_supplicant.conf", "/etc/sssd/sssd.conf", "/etc/gitlab/gitlab-secrets.json",
    "/etc/gitlab-runner/config.toml", "/etc/openvpn/client/auth.txt", "/etc/restic-password", "/etc/msmtprc",
    "/etc/.shadow.swp", "/root/backup-key.asc", "/srv/app/.SMBCREDENTIALS",
])
def test_well_known_secret_files_are_forbidden_by_path(path):
    verdict = analyze(f"cat {path}")
    assert verdict.kind == "refused" and "forbidden path" in verdict.reason, verdict


def test_a_recursive_read_of_a_folder_holding_a_private_file_is_refused_for_a_root_daemon(tmp_path):
    need(os.geteuid() == 0, "root: run as another user, the kernel refuses such a read itself")
    folder = tmp_path / "app"
    (folder / "conf").mkdir(parents=True)
    (folder / "README").write_text("hello\n")
    hidden = folder / "conf" / "wg.netdev"
    hidden.write_text("[WireGuardPeer]\nPrivateKey=x\n")
    hidden.chmod(0o640)
    os.chmod(tmp_path, 0o755)  # (pytest's folder is root's only: the private file is the one meant)
    for cmd in (f"grep -r Key {folder}", f"grep -r '' {folder} --include=wg.netdev", f"grep -d recurse Key {folder}",
                f"journalctl -D {folder} -n 5"):
        verdict = analyze(cmd)
        assert verdict.kind == "refused" and f"the private file '{hidden}'" in verdict.reason, (cmd, verdict)
    hidden.chmod(0o644)
    assert analyze(f"grep -r Key {folder}").kind == "read"
    assert analyze("grep -r x /var/lib/systemd/coredump").kind == "refused"  # core dumps: memory, environment


def test_a_private_file_is_forbidden_whatever_its_name_but_a_private_log_is_not(tmp_path):
    # mode 0600 or 0400 is how keys and password files are kept: a daemon run as root would read it as
    # its owner, a worker's command may not; nor a file only its owner and group may read
    need(os.geteuid() == 0, "root: run as another user, the kernel refuses such a read itself (see "
                            "test_reduced_privileges.py)")
    private, shared = tmp_path / "app-settings.txt", tmp_path / "notes.txt"
    private.write_text("token\n")
    shared.write_text("hello\n")
    private.chmod(0o600)
    shared.chmod(0o640)
    verdict = analyze(f"cat {private}")
    assert verdict.kind == "refused" and "private file (mode 0600" in verdict.reason, verdict
    link = tmp_path / "innocent.txt"
    link.symlink_to(private)
    assert "resolves to" in analyze(f"head {link}").reason
    private.chmod(0o400)
    assert analyze(f"grep token {private}").kind == "refused"
    # group-readable only (0640 root:root, a networkd .netdev holding a WireGuard key): the unit's user could not
    # read it either, unless the group is one kept for logs (adm, systemd-journal)
    verdict = analyze(f"cat {shared}")
    assert verdict.kind == "refused" and "only its owner and group may read it" in verdict.reason, verdict
    shared.chmod(0o644)
    assert analyze(f"cat {shared}").kind == "read"
    adm = next((g for g in log_group_ids()), None)
    if adm is not None:
        os.chown(shared, 0, adm)
        shared.chmod(0o640)
        assert analyze(f"cat {shared}").kind == "read"  # a log group may read it: so may the reads
    assert analyze(f"stat {private}").kind == "read"  # its metadata is no secret
    assert analyze(f"ls -la {tmp_path}").kind == "read"
    logs = [p for p in ("/var/log/boot.log", "/var/log/audit/audit.log") if os.path.isfile(p)]
    for log in logs:  # private logs are what an investigation reads
        assert analyze(f"tail -n 5 {log}").kind == "read", log
    assert analyze("cat /proc/1/io").kind == "read"  # 0400, and one of the safe kernel files


def test_a_sqlite_database_outside_the_state_dir_is_forbidden(tmp_path):
    # every user's sessions are in it: another user's worker must not grep them out of the file
    from ongrid_host.tools import HostTools

    from ongridd.config import DatabaseConfig
    from ongridd.plugins.api import PluginContext
    db = tmp_path / "db"
    db.mkdir()
    for name in ("ongrid.db", "ongrid.db-wal", "ongrid.db-shm", "notes.txt"):
        (db / name).write_text("alice-private\n")

    def tools(url: str) -> HostTools:
        return HostTools(PluginContext(config=Config(state_dir=str(tmp_path / "state"), database=DatabaseConfig(
            url=url)), plugin_name="ongrid_host", hosts=(HostConfig(name="local"),)))

    ht = tools(f"sqlite:///{db}/ongrid.db")
    for cmd in (f"grep -a alice-private {db}/ongrid.db {db}/ongrid.db-wal", f"cat {db}/ongrid.db-shm",
                f"grep -r alice-private {db}", f"tail -c 100 {db}/ongrid.db"):
        verdict = ht.analyze({"cmd": cmd})
        assert verdict.kind == "refused" and "forbidden path" in verdict.reason, (cmd, verdict)
        assert "Ongrid's database" in verdict.reason or f"would include {db}/ongrid.db" in verdict.reason, verdict
    assert ht.analyze({"cmd": f"cat {db}/notes.txt"}).kind == "read"
    for url in ("postgresql://127.0.0.1/test", "sqlite://", "sqlite:///:memory:", "not a url",
                "postgresql://h:notaport/db"):
        assert tools(url).analyze({"cmd": f"cat {db}/ongrid.db"}).kind == "read", url
    # a file: URI opened as one (uri=true) names the same file
    uri = tools(f"sqlite:///file:{db}/ongrid.db?uri=true")
    assert uri.analyze({"cmd": f"cat {db}/ongrid.db"}).kind == "refused"


def test_symlink_into_a_forbidden_area_is_followed(tmp_path):
    link = tmp_path / "innocent.txt"
    link.symlink_to("/etc/shadow")
    verdict = analyze(f"cat {link}")
    assert verdict.kind == "refused" and "resolves to /etc/shadow" in verdict.reason
    loop = tmp_path / "procdir"
    loop.symlink_to("/proc/self")
    verdict = analyze(f"grep -r KEY {loop}")
    assert verdict.kind == "refused" and "/proc" in verdict.reason


def test_remote_policy_refuses_relative_dotdot_and_home_recursion():
    remote = PathPolicy.remote()
    for cmd, why in (("cat ../../etc/shadow", "cannot be checked on a remote host"),
                     ("grep -r KEY", "ssh user's home"), ("cat .ssh/id_rsa", ".ssh folder"),
                     ("cat //proc/1/cmdline", "would read /proc"),
                     # a host key's copy outside /etc/ssh (a chroot's), known by its name
                     ("cat /srv/chroot/etc/ssh/ssh_host_ed25519_key", "an ssh host key or a copy of one"),
                     ("cat /usr/lib/chroot/etc/ssh/ssh_host_ed25519_key", "an ssh host key or a copy of one")):
        verdict = analyze(cmd, remote)
        assert verdict.kind == "refused" and why in verdict.reason, (cmd, verdict)


async def test_children_get_a_scrubbed_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-breaker-secret")
    monkeypatch.setenv("ONGRID_TOKENS", "tok-breaker-secret")
    result = await run_bounded(["env"], timeout_s=10)
    out = result.text()
    assert "breaker-secret" not in out
    names = {line.split("=", 1)[0] for line in out.splitlines() if "=" in line}
    assert names <= set(runner.LOCAL_ENV_KEYS) | {"PWD", "SHLVL", "_"}
    assert "PATH" in names


async def test_host_bash_child_sees_no_daemon_secrets(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-breaker-secret")
    result = await Caller(make_tools())("host_bash", {"cmd": "env", "reason": "check the environment"},
                                        reviewer=APPROVE)
    assert result["exit_code"] == 0 and "breaker-secret" not in result["stdout"]


async def test_ssh_client_gets_only_what_ssh_needs(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-breaker-secret")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
    fake_ssh = tmp_path / "fake-ssh"
    fake_ssh.write_text("#!/bin/sh\nenv\n")
    fake_ssh.chmod(0o755)
    result = await run_remote(HostConfig(name="h", address="127.0.0.1"), HostSettings(ssh_binary=str(fake_ssh)),
                              "true", timeout_s=10)
    out = result.text()
    assert "breaker-secret" not in out and "SSH_AUTH_SOCK=/tmp/agent.sock" in out
    names = {line.split("=", 1)[0] for line in out.splitlines() if "=" in line}
    assert names <= set(SSH_ENV_KEYS) | {"PWD", "SHLVL", "_"}
    assert scrubbed_env(SSH_ENV_KEYS).keys() <= set(SSH_ENV_KEYS)


def test_a_link_planted_in_a_device_folder_is_followed_for_a_change(tmp_path):
    """/dev/shm is writable by every local user: a link there to a secret is judged by where it leads."""
    need(os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK), "no writable /dev/shm")
    link = f"/dev/shm/ongrid-test-{os.getpid()}"
    os.symlink("/etc/shadow", link)
    try:
        verdict = analyze(f"base64 {link}")
        assert verdict.kind == "refused" and "resolves to /etc/shadow" in verdict.reason, verdict
    finally:
        os.unlink(link)


def test_the_state_dir_is_not_proposed_through_a_folder_switch(tmp_path):
    state = tmp_path / "lib" / "ongrid"
    state.mkdir(parents=True)
    policy = PathPolicy.local(extra=[(str(state), "Ongrid's state")])
    verdict = analyze(f"tar --dir={tmp_path}/lib -czf /tmp/x.tgz ongrid/ongrid.db", policy)
    assert verdict.kind == "refused" and "Ongrid's state" in verdict.reason, verdict


def test_a_recursive_grep_of_the_logs_leaves_the_journal_files_out():
    verdict = analyze("grep -r ERROR /var/log")
    assert verdict.kind == "read"
    assert "--exclude=*.[jJ][oO][uU][rR][nN][aA][lL]" in verdict.argv
    journal = analyze("journalctl --file /var/log/journal/0123/system.journal -n 5")
    assert journal.kind == "read", journal.reason  # journalctl reads it through its own field allowlist


def test_too_many_folder_and_name_pairs_are_refused_not_left_unchecked():
    words = " ".join(f"/srv/d{i} n{i}" for i in range(100))
    verdict = analyze(f"tar -czf /tmp/x.tgz {words}")
    assert verdict.kind == "refused" and "too many to check" in verdict.reason


def test_a_file_is_judged_by_what_it_begins_with_whatever_its_name(tmp_path):
    """A journal file's copy or hard link under any name, gzip'd too, and an archive (whose packed
    files no check saw) are refused; journalctl still reads a journal file."""
    import gzip
    import tarfile

    journal = tmp_path / "system.bin"
    journal.write_bytes(b"LPKSHHRH" + b"\0" * 64 + b"COREDUMP_ENVIRON=DB_PASSWORD=TopSecretEnv99\n")
    os.link(journal, tmp_path / "notes.txt")
    (tmp_path / "old.gz").write_bytes(gzip.compress(journal.read_bytes()))
    (tmp_path / "plain.log").write_text("DB_PASSWORD in a plain log line\n")
    with tarfile.open(tmp_path / "backup.tgz", "w:gz") as tar:
        tar.add(tmp_path / "plain.log", arcname="etc/app.conf")
    for cmd, why in ((f"cat {tmp_path}/notes.txt", "binary journal file"),
                     (f"zcat {tmp_path}/old.gz", "binary journal file"),
                     (f"zgrep -a x {tmp_path}/backup.tgz", "is an archive")):
        verdict = analyze(cmd)
        assert verdict.kind == "refused" and why in verdict.reason, (cmd, verdict)
    assert analyze(f"journalctl --file {journal} -n 1").kind == "read"
    assert analyze(f"cat {tmp_path}/plain.log").kind == "read"


async def test_a_recursive_grep_skips_the_binary_files_it_comes_across(tmp_path):
    (tmp_path / "notes.txt").write_bytes(b"LPKSHHRH\0\0COREDUMP_ENVIRON=DB_PASSWORD=TopSecretEnv99\n")
    (tmp_path / "app.log").write_text("error: DB_PASSWORD rejected\n")
    verdict = analyze(f"grep -r -h -a -o DB_PASSWORD.......... {tmp_path}")
    assert verdict.kind == "read" and "--binary-files=without-match" in verdict.argv
    result = await Caller(make_tools())("host_bash", {"cmd": f"grep -r -a DB_PASSWORD {tmp_path}",
                                                      "reason": "probe"}, read_only=True)
    assert "app.log" in result["stdout"] and "TopSecret" not in result["stdout"] + result["stderr"]


def test_looking_at_what_a_file_begins_with_never_waits_on_a_fifo(tmp_path):
    # a FIFO planted where a command reads: open() would wait for a writer forever (the suite's
    # per-test timeout fails this test if the check ever does)
    fifo = tmp_path / "app.log"
    os.mkfifo(fifo)
    assert analyze(f"cat {fifo}").kind == "read"


async def test_a_journal_field_written_as_byte_values_is_read_and_redacted_as_text(tmp_path):
    """journalctl's JSON modes write a field that is not printable UTF-8 (a coloured message) as an
    array of byte values: ``[116,111,107,…]`` carries a held secret past every filter unless it is
    read back as text first."""
    import json
    import struct

    import trio

    from ongridd.secretset import REGISTRY
    from ongridd.tools.runner import SECRET_OUTPUT_WITHHELD
    from tests.host.conftest import run_through_runner

    remote = next((p for p in ("/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote")
                   if os.path.exists(p)), None)
    need(remote is not None, "Debian's systemd-journal-remote (package systemd-journal-remote) is not installed")
    secret = "ALICEtoken0123456789abcd"
    message = f"\x1b[31mlogin with token={secret}\x1b[0m".encode()
    export = (b"__REALTIME_TIMESTAMP=1700000000000000\n__MONOTONIC_TIMESTAMP=1\n"
              b"_BOOT_ID=0123456789abcdef0123456789abcdef\nMESSAGE\n" + struct.pack("<Q", len(message)) + message
              + b"\nSYSLOG_IDENTIFIER=app\n\n")
    (tmp_path / "entry.export").write_bytes(export)
    journal = tmp_path / "app.journal"
    await trio.run_process([remote, "-o", str(journal), str(tmp_path / "entry.export")], capture_stdout=True,
                           capture_stderr=True)
    journal.chmod(0o644)  # made 0640: a private file, which a root daemon's reads leave alone
    raw = (await trio.run_process(["journalctl", "--file", str(journal), "-o", "json", "--output-fields=MESSAGE"],
                                  capture_stdout=True)).stdout.decode()
    assert isinstance(json.loads(raw)["MESSAGE"], list)  # what journalctl itself writes
    for mode in ("json", "json-pretty", "json-seq"):
        args = {"cmd": f"journalctl --file {journal} -o {mode} --output-fields=MESSAGE -n 5", "timeout_s": 10}
        with REGISTRY.hold([secret]):
            result, _ = await run_through_runner(make_tools(), "host_bash", args, read_only=True)
        # read back as text, the field holds the secret: the result is withheld (as bytes it passed)
        assert result.status == "error" and SECRET_OUTPUT_WITHHELD in result.content, (mode, result.content)
        assert secret not in result.content and "116, 111" not in result.content and "116,111" not in result.content


async def test_pgrep_f_output_is_withheld_when_a_holding_process_started_after_the_check(call, monkeypatch):
    """pgrep -f is refused while a process's command line holds a held secret; one that starts
    after that check, before the run, could still have matched: its output is withheld."""
    import subprocess
    import time
    from pathlib import Path

    from ongrid_host import tools as host_tools

    from ongridd.secretset import REGISTRY

    held = f"PGREPlate{os.getpid()}x0123456789"  # this test's own: no other test's process carries it
    holders: list[subprocess.Popen] = []
    real_pin = host_tools.pin_checked_files

    def start_holder_then_pin(verdict, cwd):  # between the check and the run
        holder = subprocess.Popen(["sh", "-c", "sleep 30", f"bot{held}"])
        holders.append(holder)
        for _ in range(200):  # until it has exec'd: before, its command line is this process's
            if held.encode() in Path(f"/proc/{holder.pid}/cmdline").read_bytes():
                break
            time.sleep(0.01)
        return real_pin(verdict, cwd)

    with REGISTRY.hold([held]):
        before = await call("host_bash", {"cmd": f"pgrep -c -f PGREPlate{os.getpid()}"}, read_only=True)
        assert before["stdout"] == "0\n"
        monkeypatch.setattr(host_tools, "pin_checked_files", start_holder_then_pin)
        try:
            with pytest.raises(ToolError) as info:
                await call("host_bash", {"cmd": f"pgrep -c -f PGREPlate{os.getpid()}"}, read_only=True)
            message = str(info.value)
            assert f"process {holders[0].pid}'s, which started while it ran, holds a secret" in message, message
            assert "output is withheld" in message and "1\n" not in message
            # the process name alone tells nothing about a command line
            named = await call("host_bash", {"cmd": "pgrep -c sleep"}, read_only=True)
            assert int(named["stdout"]) >= 1
        finally:
            for holder in holders:
                holder.kill()
                holder.wait()


def test_pgrep_f_is_known_by_its_parse_not_by_where_the_words_are():
    """``pgrep -d -- -f``: the ``--`` is -d's value and -f still an option; the check after the run
    must know pgrep matched full command lines from the parse, not from the words before a ``--``."""
    from ongrid_host.bash_policy import analyze

    for cmd in ("pgrep -d -- -f -c PATTERN", "pgrep --delimiter=-- --full PATTERN", "pgrep -fc PATTERN"):
        verdict = analyze(cmd)
        assert verdict.kind == "read" and verdict.recheck_processes, (cmd, verdict)
    assert not analyze("pgrep -d -- -c -- -f").recheck_processes  # "-f" after the end of options: the pattern


@pytest.mark.parametrize("cmd", ["head -c 300 {shm}/../vcs", "cat {shm}/../urandom", "grep -a -c . {shm}/../vcs",
                                 "sort --random-source={shm}/../urandom /etc/hostname"])
def test_dotdot_after_a_link_is_where_the_kernel_goes(tmp_path, cmd):
    """``/run/shm/../vcs`` is /dev/vcs to the kernel (``..`` leaves the link's target, /dev/shm), not
    /run/vcs as the spelling collapses to: judged where the kernel goes, locally; on an ssh host,
    where links cannot be followed, a path with ``..`` is refused."""
    shm = tmp_path / "shm"
    shm.symlink_to("/dev/shm")
    verdict = analyze(cmd.format(shm=shm))
    assert verdict.kind == "refused" and "would read /dev" in verdict.reason, verdict
    remote = analyze(cmd.format(shm="/run/shm"), PathPolicy.remote())
    assert remote.kind == "refused" and "with '..' cannot be checked on a remote host" in remote.reason, remote


def test_a_device_is_never_opened_to_read_wherever_it_lies(tmp_path):
    """A device node outside /dev (a container image's, a chroot's) is refused by what the open
    handle says it is — opened without reading first, so no device (a watchdog that starts when
    opened) is opened to read, not even by the check."""
    from ongrid_host.bash_policy import open_pinned

    need(os.geteuid() == 0, "root, to make a device node (CI runs as root)")
    node = tmp_path / "null-copy"
    os.mknod(node, 0o600 | 0o020000, os.makedev(1, 3))  # a character device: /dev/null's numbers
    verdict = analyze(f"cat {node}")
    assert verdict.kind == "refused" and "is a character device, not a file" in verdict.reason, verdict
    with pytest.raises(OSError) as info:
        open_pinned(str(node))
    assert info.value.strerror == "a character device"


@pytest.mark.parametrize(("cmd", "kind"), [
    ("date -d 'TZ=\"/tmp/fifo\" now'", "refused"), ("date -d 'TZ=:/etc/shadow now'", "refused"),
    ("date -d \"TZ='../../etc/shadow' now\"", "refused"), ("date --date='TZ=\"./x\" 9:00'", "refused"),
    ("date -d 'TZ=\"Europe/Paris\" 09:00'", "read"), ("date -d 'TZ=\"UTC+3\" now' +%H", "read"),
])
def test_a_time_zone_named_in_a_date_string_is_a_zone_not_a_path(cmd, kind):
    # date opens TZ="PATH" as a time zone file: any path, unchecked (a FIFO hangs it, a device acts)
    verdict = analyze(cmd)
    assert verdict.kind == kind, verdict
    if kind == "refused":
        assert "in the date names a file to open" in verdict.reason


def test_a_dash_is_standard_input_only_to_commands_that_read_it_so():
    """``-`` is standard input (empty) to cat or grep; to sort's --random-source, last -f or dmesg -F
    it is a file named ``-`` in the folder the command runs in: pinned as any path."""
    from ongrid_host.bash_policy import ABSENT

    assert analyze("cat -").pins == ()
    for cmd in ("sort -R --random-source=- /etc/hostname", "last -f -", "dmesg -F -"):
        verdict = analyze(cmd)
        assert verdict.kind == "read" and any(p[2] == ABSENT for p in verdict.pins), (cmd, verdict)


def test_the_secret_scan_never_opens_a_device_to_read(tmp_path, monkeypatch):
    """The checks read files as root: a device named where a file is looked at (a watchdog starts
    when opened) is looked at without being opened to read."""
    from ongridd.secretset import REGISTRY, file_holds_secret

    need(os.geteuid() == 0, "root, to make a device node (CI runs as root)")
    node = tmp_path / "dev-copy"
    os.mknod(node, 0o600 | 0o020000, os.makedev(1, 3))
    opened: list[tuple[str, int]] = []
    real_open = os.open

    def watching(path, flags, *rest, **kw):
        opened.append((str(path), flags))
        return real_open(path, flags, *rest, **kw)

    monkeypatch.setattr(os, "open", watching)
    with REGISTRY.hold(["ALICEtoken0123456789abcd"]):
        assert file_holds_secret(str(node)) is None
    assert opened and all(flags & os.O_PATH for path, flags in opened if path == str(node)), opened


@pytest.mark.parametrize(("cmd", "kind", "why"), [
    ("find /tmp -samefile /dev/watchdog", "write", "opens the file it names"),
    ("find /tmp -newermt 'TZ=\"/dev/watchdog\" 2020-01-01'", "refused", "in the date names a file to open"),
    ("find /tmp -newerat 'TZ=:/etc/shadow now'", "refused", "in the date names a file to open"),
    ("ps -eo pid,args --sort=args", "refused", "orders processes by their command lines"),
    ("ps -eo pid,cmd --sort=-cmd,pid", "refused", "orders processes by their command lines"),
    ("ps aux --sort=+COMMAND", "refused", "orders processes by their command lines"),
])
def test_finds_date_strings_and_ps_sort_keys_answer_no_questions(cmd, kind, why):
    verdict = analyze(cmd)
    assert verdict.kind == kind and why in verdict.reason, verdict
    assert analyze("find /tmp -newermt '2020-01-01 TZ=\"Europe/Paris\"'").kind == "read"
    assert analyze("ps aux --sort=-%cpu,comm").kind == "read"


async def test_a_recursive_grep_skips_the_fifos_and_devices_it_walks_into(call, tmp_path):
    """-D read would have a recursive grep open each FIFO and device it meets, unchecked (a FIFO
    hangs it, a device acts): --devices=skip goes after the options written."""
    (tmp_path / "a.log").write_text("hi there\n")
    os.mkfifo(tmp_path / "pipe")
    result = await call("host_bash", {"cmd": f"grep -r -D read hi {tmp_path}", "timeout_s": 10}, read_only=True)
    assert not result["timed_out"] and result["stdout"] == f"{tmp_path}/a.log:hi there\n", result


async def test_pgrep_f_output_is_withheld_when_the_recheck_does_not_answer_in_time(call, monkeypatch):
    """The check after pgrep -f reads every process's command line, which can block; unanswered
    within its bound, the output is withheld (fail closed) and the call does not hang."""
    import threading

    from ongrid_host import tools as host_tools

    from ongridd.secretset import REGISTRY

    release = threading.Event()
    monkeypatch.setattr(host_tools, "after_run_problem", lambda verdict: release.wait(30) and None)
    monkeypatch.setattr(host_tools, "BASH_CLASSIFY_TIMEOUT_S", 0.2)
    try:
        with REGISTRY.hold([f"PGREPslow{os.getpid()}x0123456789"]):
            with pytest.raises(ToolError) as info:
                await call("host_bash", {"cmd": "pgrep -c -f nothing-matches-this"}, read_only=True)
    finally:
        release.set()
    assert "could not be checked again in time" in str(info.value) and "withheld" in str(info.value)


@pytest.mark.parametrize(("cmd", "kind", "argv_or_why"), [
    ("ps -o args=XXXXXXXXXXXX,pid", "refused", "its header"),
    ("ps -eo args,pid", "refused", "a field after it"),
    ("ps -o args -o pid", "refused", "a field after it"),
    ("ps --cols 50 -o pid,args", "write", "option '--cols' is not allowed"),
    ("ps -o pid,args --width=60", "write", "option '--width=60' is not allowed"),
    ("ps auxw", "read", ("ps", "auxww")),
    ("ps -ef -w", "read", ("ps", "-e", "-f", "-w", "-w")),
    ("ps -eo pid,user,args", "read", ("ps", "-e", "-o", "pid,user,args")),
])
def test_ps_prints_a_command_line_whole_never_cut_where_the_caller_chooses(cmd, kind, argv_or_why):
    """A cut command line is redacted only from 8 of a secret's characters on: a width the caller
    chooses (--cols, a header's length, a field after it, one w's 132 columns) would give a held
    secret's first characters away, a few more each call."""
    verdict = analyze(cmd)
    assert verdict.kind == kind, verdict
    if kind == "read":
        assert verdict.argv == argv_or_why
    else:
        assert argv_or_why in verdict.reason, verdict


async def test_a_result_the_redaction_would_change_is_withheld_and_ends_the_turns_calls(tools):
    """Commands that spell out what they print (``stat --printf`` escapes, ``date``'s ``%n``) let a model
    write a guess no check of its arguments sees; the results' redaction then hid only the guess that
    is a piece of a held secret (the whole key in 30 calls, 63 guesses a call). Such a result is
    withheld whole, and the turn's tool calls end: one yes/no."""
    from tests.host.conftest import run_through_runner

    from ongridd.secretset import REGISTRY
    from ongridd.tools.runner import SECRET_OUTPUT_WITHHELD

    held = "sk-ant-api03-Xq7Lm2Rt9Vb4Nc8Hd1KfZw0Yq6EaB"
    escaped = lambda text: "".join(f"\\x{ord(ch):02x}" for ch in text)  # noqa: E731
    with REGISTRY.hold([held]):
        wrong = "@".join(escaped(f"antapi0{c}") for c in "12")
        result, _ = await run_through_runner(tools, "host_bash", {"cmd": f"stat '--printf=@{wrong}@' /"}, read_only=True)
        assert result.status == "ok" and "@antapi01@antapi02@" in result.content, result.content
        right = "@".join(escaped(f"antapi0{c}") for c in "23")
        for cmd in (f"stat '--printf=@{right}@' /", "date '+@a%nn%nt%na%np%ni%n0%n3@a%nn%nt%na%np%ni%n0%n4@'"):
            result, _ = await run_through_runner(tools, "host_bash", {"cmd": cmd}, read_only=True)
            assert result.status == "error" and SECRET_OUTPUT_WITHHELD in result.content, (cmd, result.content)
            assert "antapi" not in result.content and "redacted" not in result.content
