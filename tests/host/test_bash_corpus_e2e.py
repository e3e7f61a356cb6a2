"""A sample of the host_bash attack corpus through the real daemon on the
scripted model: the coordinator dispatches the read-only test persona
(``rt-readonly``, which carries ``host_bash``), whose one model step makes
every sampled call in parallel.  Recording stand-ins are first on PATH; no
mutating run, no proposal, no reviewer, unchanged victim files."""

from __future__ import annotations

import json
import sys

import pytest
from ongrid_host.bash_policy import analyze

from tests.host import bash_corpus as bc
from tests.runtime import rt_helpers as rh


@pytest.fixture
def arena(tmp_path, monkeypatch) -> dict:
    d = tmp_path / "arena"
    d.mkdir()
    bc.plant(d)
    log = tmp_path / "stand-in-runs.log"
    monkeypatch.setenv("PATH", bc.install_stand_ins(tmp_path / "bin", log))
    before = list(sys.path)
    yield {"dir": d, "log": log, "victim": d / "victim.txt"}
    # the plugin manager put the daemon's plugin folder on sys.path
    sys.path[:] = [p for p in sys.path if p in before or f"plugins/{rh.PLUGIN_NAME}" not in p]


async def test_corpus_sample_through_the_daemon(tmp_path, arena):
    # (the scripted model fills in ${NAME} itself: such commands are left to the other corpus tests)
    attacks = [c for c in bc.corpus(arena["dir"]) if "${" not in c][::20]
    reads = ["systemctl status nginx", "cat /proc/loadavg", "journalctl -u nginx -n 5 --no-pager"]
    calls = [{"name": "host_bash", "arguments": {"cmd": c, "reason": "attack corpus", "timeout_s": 5}}
             for c in attacks + reads]
    script = {
        "default": [{"tool_calls": [rh.agent_call("rt-readonly", "look at the host")]},
                    {"content_from_tool_results": True}],
        "rt-readonly": [{"tool_calls": calls}, {"content": "done"}],
        "reviewer": [{"content": "Decision: approve\nmust never be asked"}],
    }
    async with rh.open_daemon(tmp_path / "daemon", script, limits={"worker_timeout_s": 60}) as d:
        async with d.ws("corpus") as c:
            assert (await c.ask("look", timeout=90))["type"] == "final"
        second = d.requests("rt-readonly")[1]
        results = [rh.tool_result(second, f"call_0_{i}") for i in range(len(calls))]
        for cmd, res in zip(attacks, results, strict=False):
            text = json.dumps(res, ensure_ascii=False)
            assert res.get("status") == ("rejected" if analyze(cmd).kind == "write" else "error"), (cmd, res)
            assert "Nothing was run" in text or "nothing was run" in text, (cmd, res)
        for cmd, res in zip(reads, results[len(attacks):], strict=True):
            assert res.get("class") == "read" and res.get("exit_code") == 0, (cmd, res)
        assert d.rows("SELECT * FROM mutating_proposals") == []
        assert d.workers("reviewer") == [] and d.requests("reviewer") == []
        (worker,) = d.workers("rt-readonly")
        statuses = [a["status"] for a in d.audit(worker["id"])]
        assert statuses.count("error") + statuses.count("rejected") == len(attacks)
        assert statuses.count("rejected") == sum(analyze(cmd).kind == "write" for cmd in attacks)
        assert statuses.count("ok") == len(reads)
    runs = bc.recorded(arena["log"])
    assert bc.mutations(runs) == []
    assert sorted(r[0] for r in runs) == ["journalctl", "systemctl"]  # the calls run in parallel
    assert arena["victim"].read_text() == "original\n"
    assert sorted(p.name for p in arena["dir"].iterdir()) == sorted(
        ["victim.txt", "other.txt", "shadowlink", "envlink", "initenv", "procroot", "memlink", "cmdlink", "devlink",
         "sshdir"])
