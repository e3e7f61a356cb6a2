"""The kernel event sink that persists and publishes (one per agent run).

Messages and audit rows are written through the Store inside a bounded
shield, so a stop or shutdown cannot drop the record of a call that
finished.  Coordinator runs also publish frames to the session's clients.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from ongridd.kernel import events as ev
from ongridd.logs import get_logger
from ongridd.metrics import TOOL_CALLS, TOOL_SECONDS
from ongridd.runtime import frames
from ongridd.runtime.history import tool_calls_to_json

log = get_logger(__name__)
WRITE_SHIELD_S = 5.0


class PersistSink:
    """``store``: the Store; ``session_id``: the run's session; ``publish``:
    a frame callback for coordinator runs (None for workers); ``on_text``:
    called with each assistant text (workers keep partial output with it).
    """

    def __init__(self, store: Any, session_id: str, *, publish: Callable[[dict], None] | None = None,
                 on_text: Callable[[str], None] | None = None, persist_messages: bool = True,
                 known_tools: Any = None):
        self.known_tools = known_tools
        self.persist_messages = persist_messages
        self.store = store
        self.session_id = session_id
        self.publish = publish
        self.on_text = on_text

    async def _write(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        with trio.move_on_after(WRITE_SHIELD_S, shield=True):
            try:
                await fn(*args, **kwargs)
            except Exception:
                log.exception("persist_failed", what=what, session_id=self.session_id)

    async def persist_message(self, message: Any) -> None:
        """Append ``message`` to the session's stored history (bounded shield; errors are logged)."""
        await self._write("message", self.store.append_message, self.session_id, role=message.role,
                          content=message.content,
                          tool_calls=tool_calls_to_json(message.tool_calls) if message.tool_calls else None,
                          tool_call_id=message.tool_call_id, name=message.name)

    async def __call__(self, event: Any) -> None:
        if isinstance(event, ev.TokenEvent):
            if self.publish and self.persist_messages:
                self.publish(frames.token(event.text))
        elif isinstance(event, (ev.AssistantMessageEvent, ev.ToolResultMessageEvent, ev.UserMessageEvent)):
            msg = event.message
            if msg.role == "assistant" and msg.content and self.on_text:
                self.on_text(msg.content)
            if self.persist_messages:
                await self.persist_message(msg)
        elif isinstance(event, ev.ToolStartEvent):
            if self.publish:
                self.publish(frames.tool(event.name, "started"))
        elif isinstance(event, ev.ToolEndEvent):
            res = event.result
            # metric labels only for tools the agent has: model-invented names
            # would grow /metrics without bound
            label = res.name if self.known_tools is None or res.name in self.known_tools else "(unknown)"
            TOOL_CALLS.labels(label, res.status).inc()
            TOOL_SECONDS.labels(label).observe(res.duration_ms / 1000.0)
            await self._write("audit", self.store.add_audit, session_id=self.session_id, tool_name=res.name,
                              arguments=event.arguments or "", result=res.content, status=res.status,
                              duration_ms=res.duration_ms)
            if self.publish:
                self.publish(frames.tool(res.name, res.status))
