"""The systemd install in ``systemd/``: the unit's keys, ``systemd-analyze verify``, the polkit
rule (run under node with a stand-in ``polkit`` object), the installed config and runbooks, and
a real ``ongridd serve`` run as an unprivileged system user whose disk summary of a folder it
cannot read says ``partial`` and names the folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import need
from tests.e2e.e2e_helpers import env, free_port, ongrid, ongridd, start_fake_llm, stop, wait_healthy

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "systemd"
UNIT = SYSTEMD / "ongridd.service"
RULE = SYSTEMD / "50-ongrid.rules"
ANALYZE = shutil.which("systemd-analyze")
NODE = shutil.which("node")


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """systemd's unit syntax, enough for asserting: ``{section: {key: [values in order]}}``
    (a key may repeat; comments and blank lines dropped; no line continuations in our unit)."""
    out: dict[str, dict[str, list[str]]] = {}
    section = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        assert not line.endswith("\\"), f"line {n}: continuation lines are not used in this unit"
        if line.startswith("["):
            section = line.strip("[]")
            out.setdefault(section, {})
            continue
        key, sep, value = line.partition("=")
        assert sep and section, f"line {n}: not key=value inside a section: {raw!r}"
        out[section].setdefault(key.strip(), []).append(value.strip())
    return out


@pytest.fixture(scope="module")
def unit() -> dict[str, dict[str, list[str]]]:
    return parse_unit(UNIT.read_text())


def one(unit: dict, key: str, section: str = "Service") -> str:
    values = unit[section].get(key, [])
    assert len(values) == 1, f"{key}: {values}"
    return values[0]


def test_unit_keys(unit):
    assert one(unit, "Type") == "notify" and one(unit, "NotifyAccess") == "main"
    assert one(unit, "User") == "ongrid" and one(unit, "NoNewPrivileges") == "yes"
    # read access the standard way, and no other capability
    assert one(unit, "AmbientCapabilities") == "CAP_DAC_READ_SEARCH"
    assert one(unit, "CapabilityBoundingSet") == "CAP_DAC_READ_SEARCH"
    assert one(unit, "SupplementaryGroups").split() == ["adm", "systemd-journal"]
    # the host's real filesystem, read-only; only the state folder writable
    assert one(unit, "ProtectSystem") == "strict" and one(unit, "ProtectHome") == "read-only"
    assert one(unit, "PrivateTmp") == "no"
    assert one(unit, "ReadWritePaths") == "/var/lib/ongrid"
    assert "ongrid" in one(unit, "StateDirectory").split()
    tmpdir = [v for v in unit["Service"]["Environment"] if v.startswith("TMPDIR=")]
    assert tmpdir == ["TMPDIR=/var/lib/ongrid/tmp"] and "ongrid/tmp" in one(unit, "StateDirectory").split()
    for hidden in ("InaccessiblePaths", "TemporaryFileSystem", "ReadOnlyPaths", "BindPaths"):
        assert hidden not in unit["Service"], hidden  # nothing hidden beyond what INSTALL.md lists
    assert one(unit, "ExecStart").startswith("/opt/ongrid/venv/bin/ongridd serve --config /etc/ongrid/ongrid.yaml")
    assert one(unit, "WantedBy", "Install") == "multi-user.target"


def test_install_md_matches_the_files():
    text = (SYSTEMD / "INSTALL.md").read_text()
    assert "sudoers entry" not in text and "NoNewPrivileges" in text
    for line in ("install -m 0644 systemd/50-ongrid.rules /etc/polkit-1/rules.d/50-ongrid.rules",
                 "install -m 0644 systemd/ongridd.service /etc/systemd/system/ongridd.service",
                 "install -m 0644 systemd/ongrid.yaml /etc/ongrid/ongrid.yaml",
                 "install -m 0644 etc/knowledge/*.md /usr/share/ongrid/runbooks/",
                 "systemd-analyze verify /etc/systemd/system/ongridd.service"):
        assert line in text, line
    for key in ("PrivateDevices=yes", "ProtectKernelLogs=yes", "PrivateTmp=no", "CAP_DAC_READ_SEARCH"):
        assert key in text and key in UNIT.read_text(), key


async def test_installed_config_points_knowledge_at_the_shipped_runbooks(tmp_path):
    """Follow INSTALL.md's runbook step into a temporary root; the installed config's first
    knowledge folder is where the runbooks went, and the knowledge base finds them there."""
    from ongrid_knowledge.index import KnowledgeBase

    from ongridd.config import load_config

    cfg = load_config(SYSTEMD / "ongrid.yaml", environ={})
    assert cfg.knowledge.dirs[0] == "/usr/share/ongrid/runbooks" and cfg.state_dir == "/var/lib/ongrid"
    shipped = sorted((ROOT / "etc" / "knowledge").glob("*.md"))
    assert len(shipped) >= 3
    dest = tmp_path / cfg.knowledge.dirs[0].lstrip("/")
    dest.mkdir(parents=True)
    for f in shipped:
        shutil.copy(f, dest)
    result = await KnowledgeBase(dirs=(str(dest), str(tmp_path / "etc/ongrid/knowledge"))).search(
        "No space left on device", 3)
    assert result.files == len(shipped)
    assert result.hits and Path(result.hits[0].passage.path).name == "disk-full.md", result


@pytest.mark.parametrize("broken", [False, True])
def test_systemd_analyze_verify(tmp_path, broken):
    """The shipped unit verifies with no message at all (systemd-analyze exits 0 even on
    unknown keys, so its output is what counts). ExecStart points at this checkout's ongridd,
    as the venv in /opt does on a real host; a broken copy shows the check can fail."""
    need(ANALYZE is not None, "systemd-analyze is not installed (apt-get install systemd)")
    exe = Path(sys.executable).with_name("ongridd")
    need(exe.exists(), f"{exe} missing (the package is not installed in this venv)")
    text = UNIT.read_text().replace("/opt/ongrid/venv/bin/ongridd", str(exe))
    if broken:
        text = text.replace("PrivateTmp=no", "PrivateTmp=sometimes\nPrivateTemp=yes")
    path = tmp_path / "ongridd.service"
    path.write_text(text)
    res = subprocess.run([ANALYZE, "verify", "--man=no", str(path)], capture_output=True, text=True, timeout=60)
    messages = (res.stdout + res.stderr).strip()
    if broken:
        assert "sometimes" in messages and "PrivateTemp" in messages, messages
    else:
        assert res.returncode == 0 and messages == "", messages


POLKIT_HARNESS = r"""
const fs = require("fs"), vm = require("vm");
const rules = [];
const Result = {YES: "yes", NO: "no", AUTH_ADMIN: "auth_admin", NOT_HANDLED: null};
const polkit = {Result, addRule: (f) => rules.push(f), log: () => {}};
vm.runInNewContext(fs.readFileSync(process.argv[2], "utf8"), {polkit}, {filename: process.argv[2]});
const out = JSON.parse(process.argv[3]).map(([id, user, verb, unit]) => {
  const action = {id, lookup: (k) => ({verb, unit})[k]};
  const subject = {user, isInGroup: () => false, local: false, active: false};
  for (const r of rules) { const v = r(action, subject); if (v !== null && v !== undefined) return v; }
  return null;
});
console.log(JSON.stringify({rules: rules.length, out}));
"""


def test_polkit_rule_allows_only_listed_restarts(tmp_path):
    need(NODE is not None, "node is not installed (the polkit rule is JavaScript)")
    text = RULE.read_text()
    assert "polkit.addRule(function" in text
    assert not re.search(r"=>|\blet\b|\bconst\b|`", text), "keep the rule ES5 (polkit's engine)"
    manage = "org.freedesktop.systemd1.manage-units"
    cases = [
        (manage, "ongrid", "restart", "nginx.service"),    # listed: yes
        (manage, "ongrid", "stop", "nginx.service"),        # another verb
        (manage, "ongrid", "start", "nginx.service"),
        (manage, "ongrid", "restart", "ssh.service"),       # not listed
        (manage, "ongrid", "restart", "nginx"),             # systemd always passes the full name
        (manage, "alice", "restart", "nginx.service"),      # another user
        ("org.freedesktop.systemd1.manage-unit-files", "ongrid", "restart", "nginx.service"),
        ("org.freedesktop.login1.reboot", "ongrid", None, None),
    ]
    harness = tmp_path / "harness.js"
    harness.write_text(POLKIT_HARNESS)
    res = subprocess.run([NODE, str(harness), str(RULE), json.dumps(cases)], capture_output=True, text=True,
                         timeout=30)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got == {"rules": 1, "out": ["yes"] + [None] * (len(cases) - 1)}, got


# ---- a run as an unprivileged system user -------------------------------------------------------


def _can_switch_users() -> bool:
    return os.geteuid() == 0 and all(shutil.which(b) for b in ("useradd", "userdel", "setpriv"))


@pytest.fixture
def system_user():
    need(_can_switch_users(), "needs root with useradd and setpriv to run the daemon as another user")
    name = f"ongt{os.getpid()}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                    "--shell", "/usr/sbin/nologin", name], check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def as_user(pw, *, capability: bool) -> list[str]:
    """``setpriv`` as the unit sets the process up: the user, its groups (adm and systemd-journal
    when the host has them), no new privileges, and CAP_DAC_READ_SEARCH ambient (or no
    capability at all)."""
    import grp

    groups = [g for g in ("adm", "systemd-journal") if _group_exists(grp, g)]
    caps = (["--inh-caps=-all,+dac_read_search", "--ambient-caps=+dac_read_search",
             "--bounding-set=-all,+dac_read_search"] if capability
            else ["--inh-caps=-all", "--bounding-set=-all"])
    return ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}",
            *([f"--groups={','.join(groups)}"] if groups else ["--clear-groups"]),
            "--no-new-privs", *caps, "--"]


def _group_exists(grp, name: str) -> bool:
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def user_python(pw, prefix: list[str]) -> tuple[list[str], dict[str, str]]:
    """An interpreter the user can run with this venv's packages: ours, or (when it lives where
    the user cannot reach, e.g. under /root) the system one of the same version with our
    site-packages on PYTHONPATH.  Skips when neither works or the checkout is unreadable."""
    import sysconfig

    def works(exe: str, extra: dict[str, str]) -> bool:
        probe = subprocess.run([*prefix, exe, "-c", "import ongridd, ongrid_host, trio"],
                               env=env(**extra), capture_output=True, timeout=60)
        return probe.returncode == 0

    if works(sys.executable, {}):
        return [sys.executable], {}
    site = os.pathsep.join(dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]))
    extra = {"PYTHONPATH": os.pathsep.join([env()["PYTHONPATH"], site])}
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    need(os.access(system, os.X_OK) and works(system, extra),
         f"user {pw.pw_name} can run neither {sys.executable} nor {system} with this checkout")
    return [system], extra


@pytest.mark.slow
@pytest.mark.parametrize("capability", [True, False], ids=["with-CAP_DAC_READ_SEARCH", "without"])
def test_daemon_as_unprivileged_user(system_user, capability):
    """``ongridd serve`` as a system user, set up as the unit does (setpriv: uid, groups, no new
    privileges, the ambient capability), answers /healthz.  A disk summary (the real coordinator
    → disk specialist → host_du_summary path, scripted model) of a folder holding a root-only
    subfolder counts it with the capability, and without it says partial and names it."""
    import pwd

    pw = pwd.getpwnam(system_user)
    base = Path(tempfile.mkdtemp(prefix="ongrid-systemd-"))
    fake = daemon = None
    try:
        base.chmod(0o755)
        data = base / "data"
        (data / "visible").mkdir(parents=True)
        (data / "visible" / "file.bin").write_bytes(b"x" * 100_000)
        secret = data / "secret"
        secret.mkdir()
        (secret / "hidden.bin").write_bytes(b"y" * 300_000)
        secret.chmod(0o700)  # root's; only CAP_DAC_READ_SEARCH lets the service user list it
        state = base / "state"
        state.mkdir()
        os.chown(state, pw.pw_uid, pw.pw_gid)
        script = {
            "default": [
                {"tool_calls": [{"name": "AgentTool", "arguments": {
                    "description": "Disk usage", "subagent_type": "specialist-disk",
                    "prompt": "Summarise disk usage of ${DIR} on host local."}}]},
                {"content_from_tool_results": True},
            ],
            "specialist-disk": [
                {"tool_calls": [{"name": "host_du_summary", "arguments": {"paths": ["${DIR}"], "depth": 1}}]},
                {"content_from_tool_results": True},
            ],
        }
        fake, llm_url = start_fake_llm(base, script, DIR=str(data))
        prefix = as_user(pw, capability=capability)
        python, extra = user_python(pw, prefix)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        daemon = subprocess.Popen(
            [*prefix, *python, *ongridd("serve", "--state-dir", str(state), "--listen", f"127.0.0.1:{port}")[1:]],
            cwd=state, env=env(ONGRID_LLM_BASE_URL=llm_url, ONGRID_LLM_MODEL="scripted", HOME=str(state),
                               **extra),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_healthy(daemon, url)
        owners = {p.stat().st_uid for p in state.iterdir()}
        assert owners == {pw.pw_uid}, owners  # it really ran as the system user
        res = subprocess.run(ongrid("ask", "--url", url, f"What fills {data}?"), env=env(),
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        # the scripted coordinator and worker each answer "<tool>: <result>"
        tool, _, outer = res.stdout.strip().partition(": ")
        assert tool == "AgentTool", res.stdout[-3000:]
        tool, _, inner = json.loads(outer)["result"].partition(": ")
        assert tool == "host_du_summary", inner[-3000:]
        du = json.loads(inner)
        children = {Path(c["path"]).name: c for c in du["paths"][0]["children"]}
        assert children["visible"]["apparent_bytes"] >= 100_000
        if capability:
            assert du["partial"] is False and du["partial_reason"] is None, du
            assert du["unreadable_count"] == 0 and du["unreadable_paths"] == []
            assert children["secret"]["apparent_bytes"] >= 300_000 and children["secret"]["files"] == 1
        else:
            assert du["partial"] is True, du
            assert "1 path(s) could not be read by the daemon's user" in du["partial_reason"]
            assert du["unreadable_count"] == 1 and du["unreadable_paths"] == [str(secret)]
            assert children["secret"]["files"] == 0  # not counted, and said so above
        assert stop(daemon) == 0
    finally:
        for proc in (daemon, fake):
            if proc is not None and proc.poll() is None:
                stop(proc)
        shutil.rmtree(base, ignore_errors=True)
