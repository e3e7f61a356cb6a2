"""Coordinator redirect stubs (docs/architecture.md §8): data, plus what a stub shows
the model and what it answers.

A stub is a tool name models were seen to hallucinate on the coordinator.
Calling it runs nothing; the answer tells the model which specialist has
the real tool and how to dispatch it with ``AgentTool``.  Every stub costs
prompt space: stub only observed names.  Plugins add more through
``ongrid_register_redirect_stubs``.
"""

from __future__ import annotations

import json
from typing import Any

from ongridd.tools.spec import RedirectStub


def _stubs(persona: str, reason: str, *tools: str) -> tuple[RedirectStub, ...]:
    return tuple(RedirectStub(tool=t, persona=persona, reason=reason) for t in tools)


DEFAULT_STUBS: tuple[RedirectStub, ...] = (
    *_stubs("specialist-disk", "disk usage, large files and file details are read on the host by the disk specialist",
            "host_du_summary", "host_find_large_files", "host_stat_file"),
    *_stubs("specialist-compute", "host load, processes and read-only shell commands run on the host through "
            "the compute specialist (read-only)", "get_host_load", "get_host_processes", "host_bash"),
    *_stubs("specialist-network", "HTTP, DNS and TCP probes run from the host through the network specialist",
            "host_probe_http", "host_probe_dns", "host_probe_tcp"),
    *_stubs("specialist-ops", "service restarts run through the ops specialist (changes go through the "
            "review gate)", "host_restart_service"),
    *_stubs("incident-investigator", "metrics, logs and traces are the incident investigator's tools",
            "query_promql", "query_logql", "query_traceql"),
)

WHY_STUB_EXISTS = (
    "The coordinator's job is dispatch, triage and synthesis. Deep-dive tools live on specialist "
    "workers; calling them inline is the wrong pattern."
)

#: the parameters schema every stub shows: any object
STUB_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": True}


def stub_schema(stub: RedirectStub) -> dict[str, Any]:
    """The OpenAI ``tools`` entry shown for a stub (permissive object schema)."""
    return {
        "type": "function",
        "function": {
            "name": stub.tool,
            "description": (
                f"Not available to the coordinator: routed to the specialist {stub.persona}. "
                f"Use AgentTool with subagent_type \"{stub.persona}\" instead."
            ),
            "parameters": STUB_PARAMETERS,  # shared: never mutated
        },
    }


def redirect_payload(stub: RedirectStub) -> dict[str, Any]:
    """What calling a stub answers (docs/architecture.md §8): keys ``status`` (``"redirect"``),
    ``hint``, ``reason``, ``suggested_call`` and ``why_stub_exists``.  There is
    no background flag: ``AgentTool`` always waits for the worker."""
    return {
        "status": "redirect",
        "hint": (
            f"{stub.tool} is not available in coordinator scope and nothing was run. "
            f"Re-invoke via AgentTool to dispatch to {stub.persona}, with a self-contained prompt "
            "(the specialist sees nothing of this conversation)."
        ),
        "reason": stub.reason,
        "suggested_call": (
            f'AgentTool(description="…", subagent_type="{stub.persona}", prompt="<self-contained task>")'
        ),
        "why_stub_exists": WHY_STUB_EXISTS,
    }


def redirect_text(stub: RedirectStub) -> str:
    """:func:`redirect_payload` as the JSON text sent to the model."""
    return json.dumps(redirect_payload(stub), ensure_ascii=False)
