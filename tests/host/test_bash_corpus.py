"""The host_bash attack corpus through a read-only persona: at least 300
commands (option/verb confusion for every allowlisted command, long-option
abbreviations, ``--opt=value``, bundled flags, wrappers, find/awk/sed/xargs/
tar/less/git tricks, traversal, symlinks, look-alike characters).

Recording stand-ins for ``systemctl``, ``reboot``, ``kill``… are first on
PATH; afterwards the record must show no mutating run at all, and the
victim files that ``sed -i`` / ``sort -o`` / ``find -delete`` / ``tar`` /
``cp`` would touch must be unchanged.  The corpus runs through the real
handler; a sample through the real ToolRunner with the review gate (as an
agent run makes the call), and through the same path for a persona that may
write, where every non-read command must reach the reviewer (here: a
rejecting one) instead of running.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from ongrid_host.bash_policy import analyze

from ongridd.errors import ToolError
from tests.host import bash_corpus as bc
from tests.host.conftest import Caller, make_tools, run_through_runner


def _snapshot(d: Path) -> dict:
    """Name → contents (files) or link target (symlinks) of every entry of ``d``."""
    return {p.name: (str(p.readlink()) if p.is_symlink() else p.read_bytes()) for p in d.iterdir()}


@pytest.fixture
def arena(tmp_path, monkeypatch) -> dict:
    d = tmp_path / "arena"
    d.mkdir()
    files = bc.plant(d)
    log = tmp_path / "stand-in-runs.log"
    monkeypatch.setenv("PATH", bc.install_stand_ins(tmp_path / "bin", log))
    before = _snapshot(d)
    return {"dir": d, "log": log, "files": files, "before": before}


def _unchanged(arena: dict) -> None:
    d = arena["dir"]
    assert _snapshot(d) == arena["before"], "a victim file was created, changed or removed"
    assert arena["files"]["victim"].read_text() == "original\n"


def test_corpus_is_large_and_nothing_in_it_is_read(arena):
    cmds = bc.corpus(arena["dir"])
    assert len(cmds) >= 300, len(cmds)
    kinds = Counter()
    for cmd in cmds:
        verdict = analyze(cmd)
        kinds[verdict.kind] += 1
        assert verdict.kind != "read", (cmd, verdict)
        assert verdict.reason, cmd
        if "forbidden path" in verdict.reason:
            assert verdict.kind == "refused", (cmd, verdict)
    assert kinds["refused"] > 50 and kinds["write"] > 150, kinds


async def test_corpus_through_the_handler_for_a_read_only_persona(arena):
    call = Caller(make_tools())
    cmds = bc.corpus(arena["dir"])
    for cmd in cmds:
        with pytest.raises(ToolError) as info:
            await call("host_bash", {"cmd": cmd, "reason": "attack corpus", "timeout_s": 5}, read_only=True)
        assert "Nothing was run" in str(info.value), (cmd, str(info.value))
    assert bc.recorded(arena["log"]) == [], "a command of the corpus started a program"
    _unchanged(arena)
    # the stand-ins were reachable: the read-only calls mixed in ran through them, and only read
    for cmd in bc.harmless(arena["dir"]):
        result = await call("host_bash", {"cmd": cmd, "timeout_s": 5}, read_only=True)
        assert result["class"] == "read" and result["timed_out"] is False, (cmd, result)
    runs = bc.recorded(arena["log"])
    assert {r[0] for r in runs} >= {"systemctl", "journalctl", "hostname", "date", "sysctl", "ip", "dmesg", "ss",
                                    "mount"}
    assert bc.mutations(runs) == []
    assert ["systemctl", "--", "status", "nginx"] in runs
    assert ["systemctl", "-a", "-t", "service", "--", "list-units"] in runs
    _unchanged(arena)


async def test_corpus_sample_through_the_runner_and_the_gate(arena):
    """Every 5th command as an agent run makes it (ToolRunner → review gate →
    handler): read-only persona → a rejected result (a change it may not make) or
    an error (a refused command), no proposal; persona that
    may write → write commands reach the reviewer (who rejects), refused ones
    never do; nothing runs either way."""
    tools = make_tools()
    sample = bc.corpus(arena["dir"])[::5]
    assert len(sample) >= 60
    reviewed = 0
    for cmd in sample:
        args = {"cmd": cmd, "reason": "attack corpus", "timeout_s": 5}
        result, store = await run_through_runner(tools, "host_bash", args, read_only=True)
        assert result.status == ("rejected" if analyze(cmd).kind == "write" else "error"), (cmd, result)
        assert "read-only" in result.content or "refused" in result.content, (cmd, result.content)
        assert store.proposals == []
        result, store = await run_through_runner(tools, "host_bash", args, read_only=False)
        if analyze(cmd).kind == "write":
            assert result.status == "rejected", (cmd, result)
            assert [p["decision"] for p in store.proposals] == ["reject"]
            reviewed += 1
        else:
            assert result.status == "error" and store.proposals == [], (cmd, result)
    assert reviewed > 30
    assert bc.recorded(arena["log"]) == []
    _unchanged(arena)


def test_harmless_reads_are_rebuilt_not_passed_through(arena):
    for cmd in bc.harmless(arena["dir"]):
        verdict = analyze(cmd)
        assert verdict.kind == "read", (cmd, verdict)
    assert analyze("systemctl --no-pager -l status ssh").argv == ("systemctl", "--no-pager", "-l", "--", "status",
                                                                  "ssh")


def test_corpus_file_is_self_consistent():
    assert set(bc.NEVER_RUN).isdisjoint(bc.GUARDED)
    assert Path(bc.__file__).name == "bash_corpus.py"
