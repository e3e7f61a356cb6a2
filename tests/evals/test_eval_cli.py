"""``ongrid eval`` through the real CLI in a subprocess: the built-in suite on
the scripted model, the ``--json`` shape, ``--only``, progress on stderr and
the exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from eval_helpers import write_suite

from ongridd.evals import builtin_suite_dir
from ongridd.evals.suite import load_suite

INCIDENT_KEYS = {"name", "f1", "recall", "precision", "tool_calls", "dispatches", "model_calls", "loop",
                 "seconds", "prompt_tokens", "completion_tokens", "cached_tokens"}


def ongrid(*args, timeout=240):
    return subprocess.run([sys.executable, "-c", "from ongridd.cli import ongrid_main; ongrid_main()", "eval", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_builtin_suite_scores_one_on_the_scripted_model():
    proc = ongrid("--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert set(data) == {"model", "incidents", "mean_f1", "pass_rate", "totals"}
    assert data["model"] == "ongrid-scripted-model"
    names = [i.name for i in load_suite(builtin_suite_dir())]
    assert [i["name"] for i in data["incidents"]] == names and len(names) >= 30
    for item in data["incidents"]:
        assert set(item) == INCIDENT_KEYS
        assert item["f1"] == 1.0 and item["loop"] is False, item
        assert item["tool_calls"] >= 1 and item["model_calls"] >= 2
    assert data["mean_f1"] == 1.0 and data["pass_rate"] == 1.0
    totals = data["totals"]
    assert totals["incidents"] == totals["passed"] == len(names)
    assert totals["tool_calls"] == sum(i["tool_calls"] for i in data["incidents"])
    assert totals["dispatches"] == sum(i["dispatches"] for i in data["incidents"])
    # the review-gated incident ran the reviewer: 2 coordinator + 3 ops + 2 reviewer model calls
    ops = next(i for i in data["incidents"] if i["name"] == "ops-restart-hung-worker-reviewed")
    assert ops["model_calls"] == 7
    # its progress names the reviewer once, with the review gate's decision (the tile is resent with it)
    block = proc.stderr.split("ops-restart-hung-worker-reviewed:", 1)[1].split("\n  pass", 1)[0]
    assert [line.strip() for line in block.splitlines() if "reviewer" in line] == ["reviewer: pending",
                                                                                 "reviewer: completed → approve"]
    assert f"[{len(names)}/{len(names)}]" in proc.stderr
    # every call was answered by a recording (a recorded error result is fine)
    errors = [line for line in proc.stderr.splitlines() if "tool errors:" in line]
    assert errors and all(line.endswith("(0 with no recording)") for line in errors)


@pytest.mark.slow
def test_only_table_and_exit_one_on_a_failing_incident(tmp_path):
    suite = write_suite(tmp_path / "suite", ("solve", "wrong", "loop"))
    proc = ongrid("--suite", str(suite), "--only", "tiny-solve", "tiny-wrong")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("model: ongrid-scripted-model — each incident's scripted answers, a test double")
    rows = {line.split()[0]: line.split() for line in lines if line.startswith("tiny-")}
    assert set(rows) == {"tiny-solve", "tiny-wrong"}
    assert rows["tiny-solve"][1:4] == ["1.00", "1.00", "1.00"] and rows["tiny-solve"][-1] == "pass"
    assert rows["tiny-wrong"][1] == "0.00" and rows["tiny-wrong"][-1] == "FAIL"
    assert "[1/2] tiny-solve" in proc.stderr and "[2/2] tiny-wrong" in proc.stderr
    assert "pass rate 50%" in proc.stdout

    ok = ongrid("--suite", str(suite), "--only", "tiny-solve", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["incidents"][0]["f1"] == 1.0


@pytest.mark.parametrize("args, message", [
    (["--model", "m"], "--llm-base-url and --model go together"),
    (["--llm-base-url", "http://127.0.0.1:9/v1"], "--llm-base-url and --model go together"),
    (["--only", "no-such-incident"], "no incident named no-such-incident"),
    (["--bogus"], "unrecognized arguments"),
])
def test_usage_errors_exit_two(args, message):
    proc = ongrid(*args)
    assert proc.returncode == 2 and message in proc.stderr and proc.stdout == ""


def test_missing_suite_and_unscripted_incident_exit_two(tmp_path):
    proc = ongrid("--suite", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "no such suite folder" in proc.stderr
    suite = write_suite(tmp_path / "suite")
    data = json.loads((suite / "tiny-solve.yaml").read_text())
    data.pop("script")
    (suite / "tiny-solve.yaml").write_text(json.dumps(data))
    proc = ongrid("--suite", str(suite))
    assert proc.returncode == 2 and "have no script: tiny-solve" in proc.stderr


@pytest.mark.slow
def test_any_openai_compatible_endpoint(tmp_path):
    """--llm-base-url/--model: the same run against an endpoint given by URL
    (here the scripted server started on its own, standing in for a real model)."""
    suite = write_suite(tmp_path / "suite")
    server = subprocess.Popen(
        [sys.executable, "-c", "from ongridd.cli import ongrid_main; ongrid_main()", "fake-llm",
         "--script", str(suite / "scripts" / "solve.yaml"), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = server.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        proc = ongrid("--suite", str(suite), "--llm-base-url", url, "--model", "some-model", "--json")
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["model"] == "some-model"
    [item] = data["incidents"]
    assert (item["f1"], item["tool_calls"], item["dispatches"], item["model_calls"]) == (1.0, 2, 1, 4)


def test_list_prints_the_suite_and_runs_nothing():
    proc = ongrid("--list", timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    names = [i.name for i in load_suite(builtin_suite_dir())]
    assert [line.split()[0] for line in proc.stdout.splitlines()] == names
    assert "?" in proc.stdout.splitlines()[0]  # the question follows the name
    only = ongrid("--list", "--only", names[1], timeout=60)
    assert only.returncode == 0 and only.stdout.split()[0] == names[1] and len(only.stdout.splitlines()) == 1
