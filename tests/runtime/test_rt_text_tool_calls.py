"""A model that writes a tool call as text (the server's tool-call parser is
off): one warning naming the persona, the model and the likely cause, and
``ongrid_text_tool_calls_total{persona,model}`` on the daemon's /metrics
(real daemon, scripted model, real HTTP)."""

from __future__ import annotations

import logging
import re

import httpx2
from rt_helpers import open_daemon

TEXT_CALL = '<tool_call>{"name": "rt_echo", "arguments": {"text": "hi"}}</tool_call>'


def _count(metrics: str, persona: str, model: str) -> float:
    pattern = (r'^ongrid_text_tool_calls_total\{model="' + re.escape(model) + r'",persona="' + re.escape(persona)
               + r'"\} ([0-9.e+]+)$')
    found = re.search(pattern, metrics, re.M)
    return float(found.group(1)) if found else 0.0


async def test_text_tool_call_is_warned_and_counted(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="ongridd")
    script = {"default": [{"content": TEXT_CALL}, {"content": "Answered properly this time."}]}
    async with open_daemon(tmp_path, script, llm={"model": "qwen-test-model"}) as d:
        async with httpx2.AsyncClient(base_url=d.base_url, timeout=15) as http:
            before = _count((await http.get("/metrics")).text, "default", "qwen-test-model")
            async with d.ws("text-calls") as c:
                final = await c.ask("what is up?", timeout=30)
            assert final["type"] == "final" and final["text"] == "Answered properly this time."
            after = _count((await http.get("/metrics")).text, "default", "qwen-test-model")
    assert after == before + 1
    warnings = [r for r in caplog.records if r.msg == "model_text_tool_call"]
    assert len(warnings) == 1
    fields = warnings[0].ongrid_fields
    assert fields["persona"] == "default" and fields["model"] == "qwen-test-model" and fields["tool"] == "rt_echo"
    assert "tool-call parser" in fields["likely_cause"] and "--tool-call-parser" in fields["likely_cause"]
    assert warnings[0].levelno == logging.WARNING


def test_labels_stay_bounded():
    from types import SimpleNamespace

    from ongridd.llm.redacting import RedactingModel
    from ongridd.llm.textcall_report import model_label, persona_label

    inner = SimpleNamespace(stream=None, model="cfg-model")
    client = RedactingModel(inner, known_agents=lambda: {"default"})
    assert persona_label(SimpleNamespace(name="default", model=None), client) == "default"
    assert persona_label(SimpleNamespace(name="made-up-" + "x" * 500, model=None), client) == "(unknown)"
    assert model_label(SimpleNamespace(name="default", model=None), client) == "cfg-model"
    assert model_label(SimpleNamespace(name="default", model="persona-model"), client) == "persona-model"
    assert model_label(SimpleNamespace(name="default", model=None), SimpleNamespace(model=None)) == "(server default)"
