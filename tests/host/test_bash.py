"""host_bash: the read-only allowlist against injection attempts, classes,
read-only personas, bounded output and time."""

from __future__ import annotations

import os
import shlex

import pytest
from ongrid_host.bash_policy import analyze

from ongridd.errors import ToolError
from tests.host.conftest import APPROVE


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "marker"
    assert not path.exists()
    return path


# Each is refused outright (shell syntax): (command template, words the reason must contain)
INJECTIONS = [
    ("ls; touch {m}", "';' (command separator)"),
    ("ls && touch {m}", "'&&' (command chain)"),
    ("ls || touch {m}", "'||' (command chain)"),
    ("ls | tee {m}", "'|' (pipe"),
    ("ls & touch {m}", "'&' (background"),
    ("echo `touch {m}`", "backtick command substitution"),
    ("ls $(touch {m})", "command substitution '$(…)'"),
    ('ls "$(touch {m})"', "command substitution '$(…)'"),
    ("ls ${{IFS}}touch {m}", "parameter expansion '${…}'"),
    ("cat /etc/hostname > {m}", "'>' (output redirection)"),
    ("cat /etc/hostname >> {m}", "'>>' (append redirection)"),
    ("cat < {m}", "'<' (input redirection)"),
    ("ls\ntouch {m}", "newline"),
    ("ls $HOME", "variable expansion '$HOME'"),
    ("ls /etc/*.conf", "unquoted glob character '*'"),
    ("ls ~", "unquoted '~'"),
    ("(touch {m})", "'(' (subshell)"),
    ("ls 'unterminated", "unbalanced ' quote"),
    ("X=1 touch {m}", "variable assignment"),
]

# Off the allowlist or not read-only → write class; forbidden paths and commands that never end
# are refused outright (the test checks which): (command, words in the reason)
WRITES = [
    ("rm -f {m}", "'rm' is not on the read-only allowlist"),
    ("touch {m}", "'touch' is not on the read-only allowlist"),
    ("tee {m}", "'tee' is not on the read-only allowlist"),
    ("sort -o {m} /etc/hostname", "option '-o' of sort writes a file"),
    ("sort -uo {m} /etc/hostname", "option '-o' (in '-uo')"),
    ("sort --output={m} /etc/hostname", "option '--output="),
    ("sort --out {m} /etc/hostname", "(--output)"),
    ("sed -i s/a/b/ {m}", "option '-i' of sed edits files in place"),
    ("sed --in-place s/a/b/ {m}", "edits files in place"),
    ("find /tmp -name x -delete", "find action '-delete'"),
    ("find /tmp -exec touch {m} ';'", "find action '-exec'"),
    ("find /tmp -fprint {m}", "find action '-fprint'"),
    ("journalctl --vacuum-size=1M", "changes the journal"),
    ("journalctl -f", "follows forever"),
    ("tail -f /etc/hostname", "follows forever"),
    ("systemctl restart nginx", "verb 'restart' changes state"),
    ("systemctl stop nginx", "verb 'stop' changes state"),
    ("ip link set lo down", "ip link set: changes state"),
    ("ip -batch {m}", "runs commands from a file"),
    ("date -s 2020-01-01", "sets the system clock"),
    ("date 010100002020", "would set the system clock"),
    ("hostname evil", "operand 'evil': hostname sets the host name"),
    ("mount /dev/sda1 /mnt", "only allowed without arguments"),
    ("sysctl -w vm.swappiness=1", "writes kernel parameters"),
    ("sysctl vm.swappiness=1", "sets a kernel parameter"),
    ("ss -K dst 10.0.0.1", "kills sockets"),
    ("dmesg -C", "clears the kernel ring buffer"),
    ("cat /proc/1/environ", "forbidden path: '/proc/1/environ' names a secrets file"),
    ("cat /proc/self/../1/environ", "names a secrets file"),
    ("cat /etc/shadow", "forbidden path: '/etc/shadow' names a secrets file"),
    ("cat /root/.ssh/id_ed25519", "names a secrets file"),
    ("getent shadow", "password hashes"),
    ("ps auxe", "prints process environments"),
    ("grep -r OPENAI /proc", "would read /proc"),
    ("/bin/ls /", "is a path; the allowlist names bare commands"),
    ("bash -c id", "'bash' is not on the read-only allowlist"),
    ("awk BEGIN{{system(\"id\")}}", "brace"),  # refused as syntax, see below
]

READS = [
    "ls -la /etc", "cat /etc/hostname", "head -n 5 /etc/passwd", "tail -n 3 /etc/passwd", "wc -l /etc/passwd",
    "df -h", "du -sh /etc", "free -m", "uptime", "uname -a", "ps aux", "ss -tlnp", "ip addr", "ip -br a",
    "ip route get 127.0.0.1", "stat /etc/hostname", "find /etc -maxdepth 1 -name '*.conf'",
    "grep -c root /etc/passwd", "grep 'a|b;c' /etc/passwd", "journalctl -u ssh -n 20 --no-pager -o json --output-fields=MESSAGE",
    "systemctl status nginx", "systemctl -t service list-units", "date +%s", "date -d yesterday +%F",
    "hostname", "hostname -I", "id", "lsblk", "mount", "sort -r /etc/hostname", "sed -n 1p /etc/hostname",
    "dmesg -T", "sysctl vm.swappiness", "getent passwd root", "getent hosts", "lsof -nP", "ss -tn dst 10.0.0.5:443",
    "ss -t dst :https", "lsof -iTCP@127.0.0.1:22", "ss -tn state established '( dport = :443 or sport :ssh )'",
    "ss -tn exclude listening dst 10.0.0.0/8 and not src 127.0.0.1", "ss -x dev lo", "ss -tn fwmark 0x1/0xff",
    "ss -A tcp,udp", "findmnt --tree", "ss -tn state ESTABLISHED", "ss -tn excl listening", "ss -A all,!unix",
    "ss -x cgroup /system.slice",
]


@pytest.mark.parametrize(("template", "why"), INJECTIONS)
async def test_shell_syntax_is_refused_and_nothing_runs(call, tools, marker, template, why):
    cmd = template.format(m=shlex.quote(str(marker)))
    with pytest.raises(ToolError) as info:
        await call("host_bash", {"cmd": cmd, "reason": "test"})
    assert why in str(info.value) and "Nothing was run" in str(info.value)
    # also for a persona that may write: shell syntax is never run
    assert tools["host_bash"].class_for({"cmd": cmd}) == "read"  # nothing to review: it is refused
    assert not marker.exists()


@pytest.mark.parametrize(("template", "why"), WRITES)
async def test_off_allowlist_is_write_and_refused_for_read_only(call, tools, marker, template, why):
    cmd = template.format(m=shlex.quote(str(marker)))
    verdict = analyze(cmd)
    if verdict.kind == "refused":  # e.g. braces: refused before the allowlist is asked
        assert why in verdict.reason
        return
    assert tools["host_bash"].class_for({"cmd": cmd}) == "write"
    with pytest.raises(ToolError) as info:
        await call("host_bash", {"cmd": cmd, "reason": "because"}, read_only=True)
    message = str(info.value)
    assert "read-only" in message and why in message and "Nothing was run" in message
    assert not marker.exists()


@pytest.mark.parametrize("cmd", READS)
def test_allowlisted_commands_are_read(tools, cmd):
    verdict = analyze(cmd)
    assert verdict.kind == "read", verdict.reason
    assert tools["host_bash"].class_for({"cmd": cmd}) == "read"


async def test_read_command_runs_without_reason_and_for_read_only(call):
    result = await call("host_bash", {"cmd": "cat /etc/hostname"}, read_only=True)
    with open("/etc/hostname") as f:
        assert result["stdout"] == f.read()
    # the argv that ran is rebuilt from the parse
    assert result["exit_code"] == 0 and result["class"] == "read" and result["argv"] == ["cat", "--", "/etc/hostname"]


async def test_quoted_metacharacters_are_literal_arguments(call, tmp_path):
    f = tmp_path / "data.txt"
    f.write_text("a;b\nplain\n$(x)\n")
    result = await call("host_bash", {"cmd": f"grep -c 'a;b' {f}"})
    assert result["stdout"].strip() == "1"
    result = await call("host_bash", {"cmd": f"grep -F '$(x)' {f}"})
    assert result["stdout"] == "$(x)\n"


async def test_write_command_needs_reason_and_the_gates_approval_then_runs(call, marker):
    cmd = f"touch {shlex.quote(str(marker))}"
    with pytest.raises(ToolError, match=r"reason is required"):
        await call("host_bash", {"cmd": cmd})
    # a handler reached without the gate's approval of this very call never runs a write
    with pytest.raises(ToolError, match=r"runs only after the review gate approved this very call"):
        await call("host_bash", {"cmd": cmd, "reason": "create the marker for the test"})
    assert not marker.exists()
    rejected = await call("host_bash", {"cmd": cmd, "reason": "create the marker"},
                          reviewer="Decision: reject\nno runbook")
    assert rejected["status"] == "rejected" and not marker.exists()
    # the real review gate approved it: the handler runs it
    result = await call("host_bash", {"cmd": cmd, "reason": "create the marker for the test"}, reviewer=APPROVE)
    assert result["class"] == "write" and result["exit_code"] == 0
    assert marker.exists()
    (proposal,) = call.store.proposals
    assert proposal["decision"] == "approve" and proposal["action"] == f"run command: {cmd}"


async def test_an_approved_change_that_fails_is_an_error_in_its_audit_and_change_rows(call, tmp_path):
    missing = tmp_path / "no-such-dir" / "marker"
    cmd = f"touch {shlex.quote(str(missing))}"
    outcome = await call("host_bash", {"cmd": cmd, "reason": "create the marker"}, reviewer=APPROVE, raw=True)
    assert outcome.status == "error" and outcome.value["exit_code"] != 0
    assert outcome.value["error"] == f"the command exited with status {outcome.value['exit_code']}"
    (change,) = call.store.changes
    assert change["detail"]["status"] == "error"
    # a read that exits non-zero (grep finding nothing) is an answer, not a failure
    (tmp_path / "f").write_text("x\n")
    nothing = await call("host_bash", {"cmd": f"grep -c nothing {tmp_path / 'f'}"}, raw=True)
    assert not hasattr(nothing, "status") and nothing["exit_code"] == 1


async def test_sed_runs_sandboxed_and_writing_scripts_are_not_read(call, tmp_path):
    out = tmp_path / "written"
    src = tmp_path / "src"
    src.write_text("hello\n")
    result = await call("host_bash", {"cmd": f"sed -n 1p {src}"}, read_only=True)
    assert result["argv"][:2] == ["sed", "--sandbox"] and result["stdout"] == "hello\n"
    for script in (f"w {out}", f"s/h/j/w {out}", "1e id", f"1r {src}", f"W {out}"):
        assert analyze(f"sed {shlex.quote(script)} {src}").kind == "write", script
        with pytest.raises(ToolError, match=r"read-only"):
            await call("host_bash", {"cmd": f"sed {shlex.quote(script)} {src}"}, read_only=True)
    assert not out.exists()


async def test_output_is_capped_and_says_so(call, tmp_path):
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 100_000)
    result = await call("host_bash", {"cmd": f"cat {big}"})
    assert result["stdout_bytes"] == 100_000
    assert len(result["stdout"]) == 100_000 - result["stdout_cut_bytes"] < 100_000
    assert "output cut" in result["note"]


async def test_time_limit_kills_the_command(call):
    outcome = await call("host_bash", {"cmd": "vmstat 1 20", "timeout_s": 1}, raw=True)
    assert outcome.status == "error"
    assert outcome.value["timed_out"] is True and outcome.value["exit_code"] is None
    assert "killed after 1 s" in outcome.value["error"]


async def test_missing_program_is_a_clear_error(call):
    with pytest.raises(ToolError, match=r"cannot run 'definitely-not-a-program'"):
        await call("host_bash", {"cmd": "definitely-not-a-program --x", "reason": "test"}, reviewer=APPROVE)


async def test_nonzero_exit_is_reported_not_raised(call, tmp_path):
    result = await call("host_bash", {"cmd": f"ls {tmp_path / 'missing'}"})
    assert result["exit_code"] == 2 and "No such file" in result["stderr"]


def test_process_environment_is_not_reachable(tools):
    # the daemon's secrets live in its environment
    for cmd in (f"cat /proc/{os.getpid()}/environ", "cat /dev/fd/../environ", "sort /proc/self/environ"):
        verdict = analyze(cmd)
        assert verdict.kind == "refused" and "forbidden path" in verdict.reason, cmd
