"""Server → client frames (docs/architecture.md §15.5), built in one place.

``final``, ``interim`` and ``agent_result`` carry ``html``: the text's
markdown rendered and sanitised on the server (:mod:`ongridd.render`); for a
long text not rendered before, the text as plain text and ``html_later: true``
(the stored transcript has it rendered).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from ongridd.render import frame_html, markdown_html


def token(text: str) -> dict[str, Any]:
    return {"type": "token", "text": text}


def _with_html(frame: dict[str, Any], text: str) -> dict[str, Any]:
    """``frame`` with ``html`` (:func:`~ongridd.render.frame_html`), and ``html_later: true`` when
    that is the long text as plain text, rendered in full by the stored transcript."""
    html, later = frame_html(text)
    frame["html"] = html
    if later:
        frame["html_later"] = True
    return frame


def interim(text: str) -> dict[str, Any]:
    return _with_html({"type": "interim", "text": text}, text)


def queued(position: int) -> dict[str, Any]:
    """An ``interim`` about turn admission: ``queue_position`` ≥ 1 is the
    turn's place in the queue; 0 says it left the queue and starts now."""
    text, html = _queued_text(position)
    return {"type": "interim", "text": text, "html": html, "queue_position": position}


@functools.lru_cache(maxsize=1024)
def _queued_text(position: int) -> tuple[str, str]:
    # every waiting turn is told its place again and again as the queue moves:
    # the same few texts, rendered once
    text = f"queued (position {position})" if position > 0 else "the turn is starting (it waited in the queue)"
    return text, markdown_html(text)


#: characters of a failed call's error a ``tool`` frame carries
TOOL_ERROR_CHARS = 500


def tool(name: str, status: str, content: str = "") -> dict[str, Any]:
    """A coordinator's tool call: ``status`` ``started``, or how it ended with its answer
    ``content`` (as the model gets it).  ``error``: what a call that did not succeed answered (its
    ``error`` or ``message``, or a redirect stub's ``hint``; at most :data:`TOOL_ERROR_CHARS`
    characters), so the person sees why; absent otherwise.  ``dispatched: false``, on a finished
    ``AgentTool`` no worker ran for (refused before any did, e.g. an unknown persona, so no tile
    stands for it); absent otherwise."""
    frame: dict[str, Any] = {"type": "tool", "name": name, "status": status}
    if status == "started" or status == "ok":  # a dispatch that ran ends "ok" only with a worker's answer
        return frame
    answer = _answer(content)
    said = answer.get("error") or answer.get("message") or answer.get("hint") if status != "ok" else None
    if isinstance(said, str) and said:
        frame["error"] = said[:TOOL_ERROR_CHARS]
    if name == "AgentTool" and not answer.get("task_id"):
        frame["dispatched"] = False
    return frame


def _answer(content: str) -> dict[str, Any]:
    """A tool call's answer as a JSON object, else ``{}``."""
    if not content.startswith("{"):
        return {}
    try:
        answer = json.loads(content)
    except (ValueError, RecursionError):
        return {}
    return answer if isinstance(answer, dict) else {}


def agent_tile(task_id: str, subagent_type: str, description: str, status: str, started_at: str,
               decision: str | None = None, parent_task_id: str | None = None,
               changes_not_made: int = 0) -> dict[str, Any]:
    """``started_at``: when the worker started (ISO 8601 UTC), so a client that re-attaches shows its
    true elapsed time.  ``decision``: a reviewer's, once the review gate has decided (``approve`` or
    ``reject``: the gate's reading of the answer, recorded on the proposal, not the answer's text).
    ``parent_task_id``: the worker that started this one (the reviewer its change waits for, a
    worker's own worker); absent for the coordinator's own dispatches.  ``changes_not_made``: how
    many of the worker's changes the review gate did not let run (rejected, or refused for a
    read-only persona); absent when none."""
    tile: dict[str, Any] = {"type": "agent_tile", "task_id": task_id, "subagent_type": subagent_type,
                            "description": description, "status": status, "started_at": started_at}
    if decision is not None:
        tile["decision"] = decision
    if parent_task_id is not None:
        tile["parent_task_id"] = parent_task_id
    if changes_not_made:
        tile["changes_not_made"] = changes_not_made
    return tile


def agent_result(task_id: str, status: str, text: str) -> dict[str, Any]:
    return _with_html({"type": "agent_result", "task_id": task_id, "status": status, "text": text}, text)


def final(text: str) -> dict[str, Any]:
    return _with_html({"type": "final", "text": text}, text)


#: the message of the ``stopped`` error that ends a turn a daemon shutdown stopped (a bridge tells its
#: chat to send the message again)
SHUTDOWN_STOPPED = "the turn was stopped by a daemon shutdown"
#: the message of the ``stopped`` error that ends a turn a tool call of which carried or printed part of a
#: held secret (ongridd/tools/runner.py SecretTaint)
SECRET_STOPPED = ("the turn was stopped: one of its tool calls carried or printed part of a secret Ongrid itself "
                  "is configured with (a chat token, the model's key or a bridge secret); nothing of that reached "
                  "the model, and the daemon log names the call")


def error(code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message}
