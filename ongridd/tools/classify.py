"""Classify a tool call once, off the event loop.

A tool whose class depends on its arguments (``Tool.classify``) may block
while it decides — ``host_bash`` resolves paths with ``os.path.realpath``,
which can hang on a dead network mount.  :func:`classify_once` runs it in a
worker thread (``trio.to_thread.run_sync(..., abandon_on_cancel=True)``)
bounded by ``Tool.classify_timeout_s``, so a hung mount refuses the call
instead of stalling the event loop (and the watchdog).  The result is put
in the context (:attr:`ToolCallContext.classification`) for the review gate
and the handler, so the verdict is computed a single time per call.

Errors: :class:`~ongridd.errors.ToolError` when classifying took too long;
an exception of ``classify`` itself propagates (the runner reports it).
Cancellation propagates (the worker thread is abandoned).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import trio

from ongridd.errors import ToolError
from ongridd.tools.args import canonical_json
from ongridd.tools.spec import Classification, Tool, ToolCallContext


def call_key(tool_name: str, args: Mapping[str, Any]) -> str:
    """The identity of one call: tool name and canonical JSON of its arguments."""
    return f"{tool_name}\x00{canonical_json(dict(args))}"


async def classify_off_thread(fn: Any, *args: Any, timeout_s: float, what: str) -> Any:
    """``fn(*args)`` in a worker thread, at most ``timeout_s`` seconds.

    Raises ToolError naming ``what`` at the limit (the thread is abandoned:
    it finishes in the background and its result is dropped)."""
    with trio.move_on_after(timeout_s):
        return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)
    raise ToolError(f"{what}: could not decide within {timeout_s:g} s whether the call is read-only (a path may "
                    "be on a hung mount); nothing was run")


async def classify_once(tool: Tool, args: Mapping[str, Any], ctx: ToolCallContext) -> ToolCallContext:
    """``ctx`` with the :class:`Classification` of ``tool(args)``.

    Kept as is when it already carries one for these very arguments; a tool
    without ``classify`` is classified without a thread (its class is fixed).
    """
    key = call_key(tool.name, args)
    if ctx.classification_for(key) is not None:
        return ctx
    if tool.classify is None:
        classification = Classification(tool_class=tool.tool_class, call_key=key)
    else:
        classification = await classify_off_thread(tool.classify_call, dict(args), key,
                                                   timeout_s=tool.classify_timeout_s, what=tool.name)
    return attrs.evolve(ctx, classification=classification)
