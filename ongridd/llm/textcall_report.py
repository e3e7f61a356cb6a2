"""Report a tool call a model wrote as text (see :mod:`ongridd.llm.textcalls`).

The usual cause is the model server, not the model: its tool-call parser is
off, so the call reaches Ongrid as plain ``content``.  :func:`report_text_tool_call`
logs one warning naming the persona, the model and that cause, and counts
it in ``ongrid_text_tool_calls_total{persona,model}``.

Labels are bounded: ``persona`` is the name only when the model client
knows it as a loaded persona (``client.agent_label(name)``, else
``(unknown)``); ``model`` is the persona's configured model, else the
client's configured ``model`` (``llm.model``), else ``(server default)``
— never a value the model produced.  Never raises.
"""

from __future__ import annotations

from typing import Any

from ongridd.logs import get_logger
from ongridd.metrics import TEXT_TOOL_CALLS

log = get_logger(__name__)

#: what the warning tells the operator to check
LIKELY_CAUSE = ("the model server's tool-call parser is off, so tool calls arrive as text: start vLLM with "
                "--enable-auto-tool-choice --tool-call-parser <parser for this model>, llama.cpp's server "
                "with --jinja, or use an Ollama model whose template supports tools")
MAX_LABEL_CHARS = 128


def model_label(persona: Any, client: Any) -> str:
    """The configured model name for ``persona`` on ``client`` (bounded)."""
    name = getattr(persona, "model", None) or getattr(client, "model", None)
    if not isinstance(name, str) or not name.strip():
        return "(server default)"
    return name.strip()[:MAX_LABEL_CHARS]


def persona_label(persona: Any, client: Any) -> str:
    """The persona's name when ``client`` knows it (``agent_label``), else itself."""
    name = str(getattr(persona, "name", "") or "(unknown)")[:MAX_LABEL_CHARS]
    labeller = getattr(client, "agent_label", None)
    if callable(labeller):
        try:
            return str(labeller(name))
        except Exception:  # noqa: BLE001 — a report must never break the run
            return "(unknown)"
    return name


def report_text_tool_call(persona: Any, client: Any, tool: str, *, session_id: str | None = None) -> None:
    """Log the warning and count the call; ``tool`` is the name the text named."""
    try:
        p_label, m_label = persona_label(persona, client), model_label(persona, client)
        TEXT_TOOL_CALLS.labels(p_label, m_label).inc()
        log.warning("model_text_tool_call", persona=p_label, model=m_label, tool=str(tool)[:MAX_LABEL_CHARS],
                    session_id=session_id, likely_cause=LIKELY_CAUSE)
    except Exception:  # noqa: BLE001
        log.exception("text_tool_call_report_failed")
