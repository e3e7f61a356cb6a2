"""The AgentTool result is always valid JSON: a long worker answer is cut
inside the ``result`` string (truncation marker with the original length),
never by cutting the serialised object."""

from __future__ import annotations

import json

import pytest

from ongridd.runtime.agentresult import SAFETY_MARGIN_CHARS, fit_result
from ongridd.tools.truncate import truncate_result

BODY = {"task_id": "t-1", "subagent_type": "specialist-disk", "status": "completed", "stopped_by": "max_turns",
        "hint": "The worker finished; use its answer."}


@pytest.mark.parametrize("answer", [
    "x" * 100_000,
    '"quoted"\n' * 20_000,          # every char escapes: serialised is ~2x longer
    "\x01\x02" * 30_000,            # \u0001 escapes: 6x longer
    "日本語のログ " * 10_000,
])
def test_long_answers_stay_valid_json_after_the_runner_cut(answer):
    limit = 16_000
    body = fit_result({**BODY, "result": answer}, limit)
    text = json.dumps(body, ensure_ascii=False)
    assert len(text) <= limit - SAFETY_MARGIN_CHARS
    assert truncate_result(text, limit) == text  # the runner leaves it whole
    parsed = json.loads(text)
    assert set(parsed) == set(BODY) | {"result"} and parsed["stopped_by"] == "max_turns"
    assert f"[truncated: {len(answer):,} chars" in parsed["result"]
    assert parsed["result"].startswith(answer[:50])


def test_short_answer_is_untouched():
    body = {**BODY, "result": "db-2: pg_wal holds 41 GiB"}
    assert fit_result(body, 16_000) == body


async def test_a_long_worker_answer_reaches_the_coordinator_as_valid_json(tmp_path):
    """End to end on the real daemon: a 60,000-character answer full of quotes
    and newlines (it doubles when escaped) arrives as one parseable object."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from rt_helpers import agent_call, open_daemon

    answer = 'line "quoted" \\ back\n' * 3000
    script = {"default": [{"tool_calls": [agent_call("rt-worker", "write a very long report")]},
                          {"content_from_tool_results": True}],
              "rt-worker": [{"content": answer}]}
    async with open_daemon(tmp_path, script) as d, d.ws("long") as c:
        final = await c.ask("go")
        text = final["text"].split("AgentTool: ", 1)[1]
        body = json.loads(text)
        assert len(text) <= 16_000
        assert body["status"] == "completed" and body["stopped_by"] is None
        assert f"[truncated: {len(answer):,} chars" in body["result"]
        assert body["result"].startswith('line "quoted" \\ back\n')
        (row,) = [a for a in d.audit() if a["tool_name"] == "AgentTool"]
        assert json.loads(row["result"])["task_id"] == body["task_id"]
