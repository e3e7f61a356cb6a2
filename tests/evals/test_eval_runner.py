"""The harness end to end in-process: the real runtime on the scripted model,
recorded tool results, scores and counts read back from the SQLite store."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from eval_helpers import write_suite

from ongridd.evals.model import CountingProvider
from ongridd.evals.runner import SCRIPTED_MODEL, base_config, run_incidents, run_one
from ongridd.evals.suite import load_suite


@pytest.fixture
async def results(tmp_path):
    suite = write_suite(tmp_path / "suite", ("solve", "wrong", "loop", "unrecorded"))
    lines = []
    got = await run_incidents(load_suite(suite), state_dir=tmp_path / "state", progress=lines.append)
    return {r.name: r for r in got}, lines


async def test_solving_wrong_loop_and_unrecorded(results):
    by_name, lines = results
    solve = by_name["tiny-solve"]
    assert (solve.score.f1, solve.score.recall, solve.score.precision) == (1.0, 1.0, 1.0)
    assert (solve.tool_calls, solve.dispatches, solve.model_calls) == (2, 1, 4)
    assert not solve.loop and solve.passed and solve.error is None and solve.unrecorded == 0
    assert solve.prompt_tokens > 0 and solve.completion_tokens > 0  # the scripted server reports usage
    assert "analytics_cdc" in solve.answer  # it came from the recorded host_bash result

    wrong = by_name["tiny-wrong"]
    assert (wrong.score.f1, wrong.score.recall, wrong.score.precision) == (0.0, 0.0, 0.0)
    assert wrong.score.distractors_found == ("db-20",)
    assert (wrong.tool_calls, wrong.dispatches, wrong.model_calls) == (0, 0, 1) and not wrong.passed

    loop = by_name["tiny-loop"]
    assert loop.tool_calls == 5 and loop.loop and not loop.passed
    assert loop.score.f1 == 1.0  # right answer, but it looped

    un = by_name["tiny-unrecorded"]
    assert un.unrecorded == 1 and un.tool_errors == 1 and un.tool_calls == 1
    assert un.model_calls == 5  # the HTTP 500 and its retry both count: 3 coordinator + 2 worker
    assert un.score.found == ("db-2",)
    assert any(line.startswith("[1/4] tiny-loop") for line in lines)
    assert any("tool errors: 1 (1 with no recording)" in line for line in lines)


async def test_reminder_carries_time_inventory_and_backends(tmp_path):
    import httpx2

    from ongridd.fakellm import open_fake_llm
    from ongridd.plugins.build import RegistryBuilder
    from ongridd.store import Store

    [incident] = load_suite(write_suite(tmp_path / "suite"))
    state = tmp_path / "state"
    (state / "agents").mkdir(parents=True)
    config = base_config(state, llm_base_url=None, model=None)
    store = await Store.open(config.database_url)
    try:
        async with httpx2.AsyncClient() as http:
            registries = await RegistryBuilder(config=config, store=store, http=http).build()
        async with open_fake_llm(incident.script) as fake:
            async with CountingProvider(base_url=fake.base_url, model=SCRIPTED_MODEL, max_retries=0) as provider:
                result = await run_one(incident=incident, store=store, registries=registries, config=config,
                                       provider=provider, progress=lambda line: None,
                                       clock=lambda: datetime(2026, 12, 1, 10, 22, 47, tzinfo=timezone.utc))
            requests = list(fake.requests)
    finally:
        await store.aclose()
    assert result.score.f1 == 1.0
    coordinator = [r for r in requests if r.agent == "default"]
    worker = [r for r in requests if r.agent == "specialist-disk"]
    reminder = coordinator[0].body["messages"][-1]
    assert reminder["role"] == "user" and reminder["content"].startswith("<system-reminder>\n")
    lines = reminder["content"].splitlines()
    assert lines[1].startswith("Current time: 2026-12-01T10:22:47Z (UTC). This host's time zone: ")
    assert any(line.startswith("Valid subagent_type values for AgentTool: incident-investigator, ")
               for line in lines)
    assert "Hosts (name: labels): local; db-2: role=db" in lines
    assert any(line.startswith("Backends configured: prometheus: no, loki: no, tempo: no, topology: no.")
               for line in lines)
    system = coordinator[0].body["messages"][0]["content"]
    assert "- **specialist-disk** — " in system and "When to use: " in system
    assert "Valid subagent_type" not in system
    # workers get the time line and their critical reminder, never the inventory
    wlines = worker[0].body["messages"][-1]["content"].splitlines()
    assert wlines[1].startswith("Current time: 2026-12-01T10:22:47Z") and "<critical-reminder>" in wlines[2]
    assert not any(line.startswith("Hosts (") for line in wlines)


async def test_tokens_are_the_usage_the_endpoint_reported_over_the_whole_tree(tmp_path):
    """Coordinator and worker calls both count; cached tokens are reported apart."""
    from ongridd.evals.report import to_json

    suite = write_suite(tmp_path / "suite", ("metered",))
    (got,) = await run_incidents(load_suite(suite), state_dir=tmp_path / "state")
    assert (got.prompt_tokens, got.completion_tokens, got.cached_tokens) == (2150, 150, 384)
    assert got.model_calls == 4 and got.passed
    data = to_json("m", [got])
    assert {k: data["incidents"][0][k] for k in ("prompt_tokens", "completion_tokens", "cached_tokens")} == \
        {"prompt_tokens": 2150, "completion_tokens": 150, "cached_tokens": 384}
    assert (data["totals"]["prompt_tokens"], data["totals"]["cached_tokens"]) == (2150, 384)
