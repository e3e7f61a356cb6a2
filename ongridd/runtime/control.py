"""The coordinator's control tools: AgentTool, SendMessage, TaskStop (§9),
and the per-session dispatch dedup."""

from __future__ import annotations

import hashlib
import json
import re
import time
import unicodedata
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

from ongridd.errors import NotFound, TaskStateError, ToolError
from ongridd.runtime.agentresult import fit_result
from ongridd.tools.spec import Outcome, Tool, ToolCallContext
from ongridd.unicodetext import visible_text

DEDUP_WINDOW_S = 120.0
RESERVED = ("default", "reviewer")
_WS = re.compile(r"\s+")


def canonical_prompt(prompt: str) -> str:
    """NFC, trimmed, white-space runs collapsed to one space."""
    return _WS.sub(" ", unicodedata.normalize("NFC", prompt).strip())


def dedup_key(subagent_type: str, prompt: str) -> str:
    """sha256 over the persona name, a NUL separator (cannot occur in a
    persona name) and the canonical prompt."""
    data = subagent_type.strip().encode() + b"\0" + canonical_prompt(prompt).encode()
    return hashlib.sha256(data).hexdigest()


@attrs.define(eq=False)
class _Dispatch:
    started: float
    done: trio.Event = attrs.field(factory=trio.Event)
    outcome: Any = None


class DedupTable:
    """Dispatches of one coordinator session within the window.

    Never shared between sessions.  A completed dispatch is reused within
    ``DEDUP_WINDOW_S`` of its first dispatch; one still running is awaited
    (single flight); a failed or killed one may run again.
    """

    def __init__(self, window_s: float = DEDUP_WINDOW_S, clock: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self.clock = clock  # seconds, monotonic
        self._entries: dict[str, _Dispatch] = {}

    def idle(self) -> bool:
        """True when no dispatch is running and every entry is past the window."""
        self._prune(self.clock())
        return not self._entries

    def _prune(self, now: float) -> None:
        for key, entry in list(self._entries.items()):
            if entry.done.is_set() and now - entry.started > self.window_s:
                del self._entries[key]

    async def run(self, key: str, dispatch: Callable[[], Awaitable[Any]]) -> tuple[Any, bool]:
        """Run ``dispatch()`` once per key; returns ``(outcome, duplicate)``.

        ``dispatch()`` returns an outcome with a ``status``.  A key seen within
        the window whose dispatch is still running waits for it (its outcome
        is returned as a duplicate, whatever its status); one that completed
        is returned as a duplicate; otherwise ``dispatch()`` runs.  Exceptions
        and cancellation of ``dispatch()`` propagate to its own caller only
        (waiting duplicates then run their own dispatch).
        """
        now = self.clock()
        self._prune(now)
        entry = self._entries.get(key)
        if entry is not None and now - entry.started <= self.window_s:
            if not entry.done.is_set():
                await entry.done.wait()
                if entry.outcome is not None:
                    return entry.outcome, True
            elif entry.outcome is not None and entry.outcome.status == "completed":
                return entry.outcome, True
        entry = _Dispatch(started=now)
        self._entries[key] = entry
        try:
            entry.outcome = await dispatch()
        finally:
            entry.done.set()
            failed = entry.outcome is None or entry.outcome.status != "completed"
            if failed and self._entries.get(key) is entry:  # failed, killed or crashed: may run again
                del self._entries[key]
        return entry.outcome, False


AGENT_TOOL_SCHEMA = {
    "type": "object",
    "properties": {
        "description": {"type": "string", "minLength": 1,
                        "description": "One line (5-60 characters) shown on the agent tile."},
        "subagent_type": {"type": "string", "minLength": 1, "description": "A spawnable persona name."},
        "prompt": {"type": "string", "minLength": 1,
                   "description": "The whole brief: the worker sees nothing of this conversation. Include ids, "
                                  "hosts, metric values and the user's own words."},
    },
    "required": ["description", "subagent_type", "prompt"],
    "additionalProperties": False,
}
SEND_MESSAGE_SCHEMA = {"type": "object", "properties": {"text": {"type": "string", "minLength": 1}},
                       "required": ["text"], "additionalProperties": False}
TASK_STOP_SCHEMA = {"type": "object", "properties": {"task_id": {"type": "string", "minLength": 1}},
                    "required": ["task_id"], "additionalProperties": False}
# the control tools' schemas are shared by every turn's tools (a tool's parameters are never mutated)

SPAWN_HINT = ("Summarise the worker's findings for the user in your own words; do not paste the whole report. "
              "Do not dispatch the same task again.")
DEDUP_HINT = ("You already dispatched this exact task to this specialist within the last 2 minutes; this is "
              "that dispatch's result. Do not dispatch it again: answer from it, or change the brief or the "
              "specialist if something is really missing.")


@attrs.frozen
class ControlDeps:
    """What the control tools need from the runtime for one coordinator turn.

    ``spawnable``: persona names AgentTool accepts (this turn's snapshot).
    ``spawn(ctx, persona, description, prompt) -> WorkerOutcome``.
    ``stop(task_id) -> WorkerTask`` (raises NotFound/TaskStateError).
    ``interim(text)``: sends an ``interim`` frame.  ``dedup``: this session's table.
    """

    spawnable: Sequence[str]
    spawn: Callable[[ToolCallContext, str, str, str], Awaitable[Any]]
    stop: Callable[[str], Awaitable[Any]]
    interim: Callable[[str], None]
    dedup: DedupTable
    result_max_chars: int = 16000


def dispatch_audit_status(status: str, reason: str | None) -> str:
    """The audit status of an AgentTool call whose worker ended ``status``
    (completed|failed|killed) for ``reason``: ``ok``, ``cancelled`` (killed:
    stopped by the user, TaskStop or shutdown), ``timeout`` (failed past its
    time limit) or ``error`` (any other failure)."""
    if status == "completed":
        return "ok"
    if status == "killed":
        return "cancelled"
    return "timeout" if (reason or "").startswith("timeout") else "error"


def build_control_tools(deps: ControlDeps) -> list[Tool]:
    """AgentTool, SendMessage and TaskStop bound to one coordinator turn."""

    async def agent_tool(args: dict[str, Any], ctx: ToolCallContext) -> Any:
        persona = unicodedata.normalize("NFC", args["subagent_type"].strip())  # names are NFC everywhere
        valid = sorted(deps.spawnable)
        if persona in RESERVED or persona not in valid:
            why = "is a reserved role" if persona in RESERVED else "is not a known persona"
            raise ToolError(f"subagent_type {persona!r} {why}; valid subagent_type values: {', '.join(valid)}")
        # one line, read as it is: no bidirectional override or zero-width character can make the
        # tile (console, chat bridges, CLI) say something the text does not
        description = " ".join(visible_text(args["description"]).split())[:200] or persona
        key = dedup_key(persona, args["prompt"])
        outcome, duplicate = await deps.dedup.run(
            key, lambda: deps.spawn(ctx, persona, description, args["prompt"]))
        result = outcome.result if outcome.status == "completed" else (
            f"{outcome.reason or outcome.status}" + (f"\npartial output:\n{outcome.result}" if outcome.result else ""))
        body = {"task_id": outcome.task_id, "subagent_type": persona, "status": outcome.status,
                "result": result, "stopped_by": outcome.stopped_by}  # cut inside the string by fit_result
        if duplicate:
            body["hint"] = DEDUP_HINT if outcome.status == "completed" else (
                f"An identical dispatch was already running and ended {outcome.status}; this is its result. "
                "You may dispatch it again if retrying can help.")
            return Outcome(fit_result(body, deps.result_max_chars), "dedup")
        if outcome.status == "completed":
            body["hint"] = SPAWN_HINT
            return fit_result(body, deps.result_max_chars)
        body["hint"] = "The worker did not complete. Tell the user what happened; dispatch again only if retrying can help."
        # the audit row says how the dispatch ended, not that the tool itself returned
        return Outcome(fit_result(body, deps.result_max_chars), dispatch_audit_status(outcome.status, outcome.reason))

    async def send_message(args: dict[str, Any], ctx: ToolCallContext) -> Any:
        text = args["text"].strip()
        if not text:
            raise ToolError("SendMessage: text must not be empty")
        deps.interim(text)
        return {"status": "sent"}

    async def task_stop(args: dict[str, Any], ctx: ToolCallContext) -> Any:
        task_id = args["task_id"].strip()
        try:
            task = await deps.stop(task_id)
        except (NotFound, TaskStateError) as exc:
            raise ToolError(str(exc)) from None
        return {"task_id": task_id, "status": task.status}

    return [
        Tool(name="AgentTool", tool_class="control", timeout_s=24 * 3600.0, handler=agent_tool,
             parameters=AGENT_TOOL_SCHEMA,
             description="Dispatch a specialist worker and wait for its answer. Use for deep work (5+ focused "
                         "steps, several hosts or signals), host-side tools, or a specialist's domain. Several "
                         "AgentTool calls in one message run in parallel. The worker sees only your prompt."),
        Tool(name="SendMessage", tool_class="control", timeout_s=15.0, handler=send_message,
             parameters=SEND_MESSAGE_SCHEMA,
             description="Send the user a short interim message without ending your turn (e.g. what you are "
                         "checking now)."),
        Tool(name="TaskStop", tool_class="control", timeout_s=15.0, handler=task_stop,
             parameters=TASK_STOP_SCHEMA,
             description="Stop a running worker of this conversation by its task_id; it ends killed."),
    ]


def json_preview(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "…"
