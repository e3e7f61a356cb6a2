"""Running incidents end to end through the real runtime.

One evaluation run opens a SQLite store in a temporary state dir and builds
the real registries once (plugins, personas, skills, redirect stubs).  Each
incident then gets its own :class:`~ongridd.runtime.core.Runtime` on a
registry whose tools answer from the incident's fixtures
(:mod:`ongridd.evals.fixtures`), a config whose host inventory and
backends are the incident's (so the coordinator's reminder is what a daemon
configured that way would send), and its own coordinator thread.  The
question is submitted like a chat message; the coordinator, AgentTool
dispatch, workers and the review gate run as in the daemon, and the tree
and audit rows are read back from the store.

Model: with ``llm_base_url`` the given OpenAI-compatible endpoint; without,
the incident's ``script:`` served by the in-process scripted model (a real
HTTP server on 127.0.0.1), reached through the same provider.

Cancellation: cancelling :func:`run_incidents` stops the running turn, the
scripted model and the store (all are in its nurseries).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from ongridd.config import HostConfig, PrometheusConfig, TopologyConfig, UrlConfig, structure
from ongridd.evals.fixtures import NO_RECORDING, fixture_tools
from ongridd.evals.model import CountingProvider
from ongridd.evals.scoring import CONTROL_TOOLS, EntityScore, count_audit, is_loop, passed, score_answer
from ongridd.evals.suite import Incident

EVAL_USER = "eval"
#: one incident's turn may take at most this long before it is stopped
INCIDENT_TIMEOUT_S = 900.0
SCRIPTED_MODEL = "ongrid-scripted-model"
#: where the registry-building plugins think the backends are; never contacted
#: (every tool handler is replaced by a fixture lookup)
_PLACEHOLDER_URL = "http://backend.eval.invalid:9"
_BACKEND_TOOLS = {"prometheus": ("query_promql",), "loki": ("query_logql",), "tempo": ("query_traceql",),
                  "topology": ("find_topology_node", "expand_topology")}


@attrs.define(kw_only=True)
class IncidentResult:
    """What one incident scored; ``error``: why the run did not end with an
    answer (``None`` when it did)."""

    name: str
    answer: str
    score: EntityScore
    tool_calls: int
    dispatches: int
    model_calls: int
    loop: bool
    seconds: float
    prompt_tokens: int | None
    completion_tokens: int | None
    by_tool: dict[str, int]
    #: prompt tokens the endpoint served from its cache (None as the other token counts)
    cached_tokens: int | None = None
    #: audit rows that ended ``error`` (a call with no recording among them)
    tool_errors: int = 0
    #: of those, calls no fixture answered
    unrecorded: int = 0
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and passed(self.score.f1, self.loop)


def incident_backends(incident: Incident) -> dict[str, bool]:
    """The incident's ``backends``; a backend it does not mention counts as
    configured when one of its fixtures records that backend's tool."""
    names = {f.tool for f in incident.fixtures}
    out = {b: any(t in names for t in tools) for b, tools in _BACKEND_TOOLS.items()}
    out.update(incident.backends)
    return out


def incident_config(base: Any, incident: Incident) -> Any:
    """``base`` with the incident's hosts and backends (placeholder URLs)."""
    backends = incident_backends(incident)
    hosts = tuple(HostConfig(name=name, address=name, labels=dict(labels))
                  for name, labels in incident.hosts if name != "local")
    return attrs.evolve(
        base, hosts=hosts,
        prometheus=PrometheusConfig(url=_PLACEHOLDER_URL if backends["prometheus"] else None),
        loki=UrlConfig(url=_PLACEHOLDER_URL if backends["loki"] else None),
        tempo=UrlConfig(url=_PLACEHOLDER_URL if backends["tempo"] else None),
        topology=TopologyConfig(files=("topology.eval.yaml",) if backends["topology"] else ()))


def base_config(state_dir: Path, *, llm_base_url: str | None, model: str | None) -> Any:
    """The evaluation's config: the state dir, SQLite in it, the model, and
    every backend pointed at a placeholder so every plugin registers its tools."""
    return structure({
        "state_dir": str(state_dir),
        "llm": {"base_url": llm_base_url, "model": model},
        "prometheus": {"url": _PLACEHOLDER_URL},
        "loki": {"url": _PLACEHOLDER_URL},
        "tempo": {"url": _PLACEHOLDER_URL},
        "agents": {"user_dirs": [str(state_dir / "agents")]},
    })


async def _answer_turn(runtime: Any, incident: Incident, progress: Callable[[str], None],
                       timeout_s: float) -> tuple[str, str, str | None]:
    """Submit the question; returns ``(session_id, answer, error)``."""
    session_id, _ = await runtime.open_thread(user_id=EVAL_USER, thread=f"eval-{incident.name}-{uuid.uuid4().hex[:8]}")
    answer, error = "", None
    shown: dict[Any, str] = {}  # what each worker's tile last printed (a tile is its worker's state, resent on change)
    with runtime.subscribe(session_id) as (_initial, channel):
        await runtime.submit(session_id, user_id=EVAL_USER, text=incident.question)
        with trio.move_on_after(timeout_s) as scope:
            async for frame in channel:
                kind = frame.get("type")
                if kind == "agent_tile" and frame.get("status") != "running" and not (
                        frame.get("subagent_type") == "reviewer" and frame.get("status") == "completed"
                        and not frame.get("decision")):  # the review gate's decision follows at once
                    line = f"    {frame.get('subagent_type')}: {frame.get('status')}" + (
                        f" → {frame['decision']}" if frame.get("decision") else "")
                    if shown.get(frame.get("task_id")) != line:
                        shown[frame.get("task_id")] = line
                        progress(line)
                elif kind == "tool" and frame.get("status") not in ("started", None):
                    progress(f"    {frame.get('name')}: {frame.get('status')}")
                elif kind == "final":
                    answer = str(frame.get("text") or "")
                    break
                elif kind == "error":
                    error = f"{frame.get('code')}: {frame.get('message')}"
                    break
        if scope.cancelled_caught:
            error = f"no answer within {timeout_s:g} s; the turn was stopped"
            with trio.move_on_after(10):
                await runtime.stop(session_id, user_id=EVAL_USER)
    if not answer and error is None:  # the subscription lost the last frame: read the thread
        rows = await runtime.store.load_messages(session_id)
        finals = [r for r in rows if r.get("role") == "assistant" and r.get("content") and not r.get("tool_calls")]
        answer = finals[-1]["content"] if finals else ""
        if not answer:
            error = "the turn ended without an answer"
    return session_id, answer, error


def tree_tokens(tree: dict[str, Any]) -> dict[str, int]:
    """``{prompt, completion, cached, model_calls}`` summed over a session
    tree (``Runtime.session_tree``: every node carries ``tokens``)."""
    total = {"prompt": 0, "completion": 0, "cached": 0, "model_calls": 0}
    stack = [tree]
    while stack:
        node = stack.pop()
        for key, n in (node.get("tokens") or {}).items():
            total[key] = total.get(key, 0) + int(n or 0)
        stack.extend(node.get("children") or ())
    return total


async def run_one(*, incident: Incident, store: Any, registries: Any, config: Any, provider: CountingProvider,
                  progress: Callable[[str], None], clock: Callable[[], Any] | None = None,
                  timeout_s: float = INCIDENT_TIMEOUT_S) -> IncidentResult:
    """Run one incident on ``provider`` (already pointed at its model) and score it."""
    from ongridd.runtime.core import Runtime
    from ongridd.runtime.registries import RegistryHolder
    from ongridd.store.writer import StoreWriter

    regs = attrs.evolve(registries, tools=fixture_tools(registries.tools, incident.fixtures))
    provider.reset()
    runtime = Runtime(incident_config(config, incident), store, RegistryHolder(regs), provider,
                      writer=StoreWriter(store), clock=clock)
    started = time.monotonic()
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        try:
            session_id, answer, error = await _answer_turn(runtime, incident, progress, timeout_s)
            rows = await runtime.session_audit(session_id, user_id=EVAL_USER)
            tokens = tree_tokens(await runtime.session_tree(session_id, user_id=EVAL_USER))
        finally:
            nursery.cancel_scope.cancel()
    seconds = time.monotonic() - started
    counts = count_audit(rows)
    score = score_answer(answer, incident.root_cause, incident.distractors)
    return IncidentResult(
        name=incident.name, answer=answer, score=score, tool_calls=counts.tool_calls,
        dispatches=counts.dispatches, model_calls=provider.requests,
        loop=is_loop(counts.tool_calls, incident.max_tool_calls), seconds=seconds,
        # the session tree's stored counters (every persona's calls); None when the endpoint reported no usage
        prompt_tokens=None if provider.prompt_tokens is None else tokens["prompt"],
        completion_tokens=None if provider.prompt_tokens is None else tokens["completion"],
        cached_tokens=None if provider.prompt_tokens is None else tokens["cached"],
        # a tool error is a tool call that failed; a failed dispatch (AgentTool audited error) is not one
        by_tool=counts.by_tool, tool_errors=sum(1 for r in rows if r.get("status") == "error"
                                                and r.get("tool_name") not in CONTROL_TOOLS),
        unrecorded=sum(1 for r in rows if r.get("status") == "error" and NO_RECORDING in str(r.get("result") or "")),
        error=error)


async def run_incidents(incidents: Sequence[Incident], *, state_dir: Path, llm_base_url: str | None = None,
                        model: str | None = None, api_key: str | None = None,
                        progress: Callable[[str], None] = lambda line: None,
                        clock: Callable[[], Any] | None = None,
                        timeout_s: float = INCIDENT_TIMEOUT_S) -> list[IncidentResult]:
    """Run every incident in order; returns one result each.

    Without ``llm_base_url`` each incident needs a ``script`` (checked by
    the caller).  ``progress`` gets one line per incident start, worker
    end, tool result and incident score.  Raises StoreError / ConfigError
    when the store or the registries cannot be set up."""
    import httpx2

    from ongridd import logs
    from ongridd.plugins.build import RegistryBuilder
    from ongridd.store import Store

    config = base_config(state_dir, llm_base_url=llm_base_url, model=model)
    (state_dir / "agents").mkdir(parents=True, exist_ok=True)
    store = await Store.open(config.database_url)
    results: list[IncidentResult] = []
    try:
        async with httpx2.AsyncClient(timeout=5.0) as http:
            registries = await RegistryBuilder(config=config, store=store, http=http).build()
        logs.get_logger(__name__).info("eval_registries", tools=len(registries.tools))
        for i, incident in enumerate(incidents, 1):
            progress(f"[{i}/{len(incidents)}] {incident.name}: {incident.question}")
            result = await _run_with_model(incident, store=store, registries=registries, config=config,
                                           llm_base_url=llm_base_url, model=model, api_key=api_key,
                                           progress=progress, clock=clock, timeout_s=timeout_s)
            results.append(result)
            verdict = "pass" if result.passed else "FAIL"
            progress(f"  {verdict}  f1={result.score.f1:.2f} tool_calls={result.tool_calls} "
                     f"dispatches={result.dispatches} model_calls={result.model_calls} "
                     f"{result.seconds:.1f}s" + (f"  ({result.error})" if result.error else "")
                     + (f"  tool errors: {result.tool_errors} ({result.unrecorded} with no recording)"
                        if result.tool_errors else "")
                     + (f"  missed: {', '.join(result.score.missed)}" if result.score.missed else "")
                     + (f"  blamed: {', '.join(result.score.distractors_found)}"
                        if result.score.distractors_found else ""))
    finally:
        with trio.move_on_after(5, shield=True):
            await store.aclose()
    return results


async def _run_with_model(incident: Incident, *, llm_base_url: str | None, model: str | None,
                          api_key: str | None, **kw: Any) -> IncidentResult:
    config = kw["config"]
    if llm_base_url:
        provider = CountingProvider(base_url=llm_base_url, api_key=api_key, model=model,
                                    timeout_s=config.llm.timeout_s, max_retries=config.llm.max_retries)
        async with provider:
            return await run_one(incident=incident, provider=provider, **kw)
    from ongridd.fakellm import open_fake_llm

    assert incident.script is not None
    async with open_fake_llm(incident.script) as fake:
        provider = CountingProvider(base_url=fake.base_url, model=SCRIPTED_MODEL,
                                    timeout_s=config.llm.timeout_s, max_retries=config.llm.max_retries,
                                    backoff_base_s=0.05)
        async with provider:
            return await run_one(incident=incident, provider=provider, **kw)
