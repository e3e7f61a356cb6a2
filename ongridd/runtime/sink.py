"""The kernel event sink that persists and publishes (one per agent run).

Messages and audit rows are handed to the runtime's
:class:`ongridd.store.writer.StoreWriter` — a synchronous hand-off, so a
stop or shutdown cannot drop the record of a call that finished; the
writer commits them (batched, retried) and reports a write that finally
fails to the turn of ``owner``.  Each model call's usage is added to the
session's counters the same way.  Coordinator runs also publish frames to
the session's clients.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import trio

from ongridd.kernel import events as ev
from ongridd.llm.types import Message, Usage
from ongridd.metrics import TOOL_CALLS, TOOL_SECONDS, labelled
from ongridd.runtime import frames
from ongridd.runtime.history import tool_calls_to_json
from ongridd.runtime.ports import Row, RuntimeWriter

if TYPE_CHECKING:
    from ongridd.store.writer import PendingWrite

#: how long a coordinator run waits for its user message to be committed before the model call
USER_MESSAGE_WAIT_S = 10.0

class PersistSink:
    """``writer``: the StoreWriter; ``session_id``: the run's session;
    ``owner``: the coordinator session whose turn this run belongs to
    (default ``session_id``); ``publish``: a frame callback for coordinator
    runs (None for workers); ``on_text``: called with each assistant text
    (workers keep partial output with it); ``on_user_message``: called with
    the write of each message a person sent (not a worker's brief, not a
    kernel note) on the coordinator's own session; ``settles(message,
    source)``: the ids of held messages (``pending_messages``) the stored row
    of such a message carries, deleted with its insert; ``mutating_tools``: the
    names of the run's tools that may change something — their audit rows
    are committed at once instead of waiting for group commit.
    """

    def __init__(self, writer: RuntimeWriter, session_id: str, *, owner: str | None = None,
                 publish: Callable[[Row], None] | None = None,
                 on_text: Callable[[str], None] | None = None, persist_messages: bool = True,
                 known_tools: Collection[str] | None = None,
                 on_user_message: Callable[[PendingWrite], None] | None = None,
                 settles: Callable[[Message, str], tuple[Sequence[str], datetime | None]] | None = None,
                 mutating_tools: Collection[str] = ()):
        self.settles = settles
        self.known_tools = known_tools
        self.mutating_tools = mutating_tools
        self.on_user_message = on_user_message
        self.persist_messages = persist_messages
        self.writer = writer
        self.session_id = session_id
        self.owner = owner or session_id
        self.publish = publish
        self.on_text = on_text

    def persist_message(self, message: Message, settles: Sequence[str] = (), at: datetime | None = None) -> PendingWrite:
        """Queue ``message`` for the session's stored history, carrying the
        held messages ``settles``, with the time ``at`` (default: now) — never
        blocks; a write that finally fails is logged and reported to the
        owner's turn."""
        write = self.writer.append_message(self.session_id, owner=self.owner, role=message.role, content=message.content,
                                   tool_calls=tool_calls_to_json(message.tool_calls) if message.tool_calls else None,
                                   tool_call_id=message.tool_call_id, name=message.name, settles=settles, at=at)
        return write

    def add_usage(self, usage: Usage | None) -> None:
        """Queue one model call (and its ``usage``, a Usage or None) for the
        session's counters (``model_calls``, ``prompt_tokens``,
        ``completion_tokens``, ``cached_tokens``; added in the database, so
        concurrent calls never lose an increment)."""
        self.writer.add_usage(self.session_id, owner=self.owner, model_calls=1,
                              prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                              completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
                              cached_tokens=getattr(usage, "cached_tokens", 0) or 0)

    async def __call__(self, event: ev.KernelEvent) -> None:
        if isinstance(event, ev.TokenEvent):
            if self.publish and self.persist_messages:
                self.publish(frames.token(event.text))
        elif isinstance(event, (ev.AssistantMessageEvent, ev.ToolResultMessageEvent, ev.UserMessageEvent)):
            msg = event.message
            if msg.role == "assistant" and msg.content and self.on_text:
                self.on_text(msg.content)
            if self.persist_messages:
                source = event.source if isinstance(event, ev.UserMessageEvent) else ""
                person = source in ("user", "inbox") and self.owner == self.session_id
                settles, at = self.settles(msg, source) if person and self.settles is not None else ((), None)
                write = self.persist_message(msg, settles, at)
                if person:
                    # what a person sent (not a worker's brief, not a kernel note) is committed at once
                    # and before the model is asked, so a crash of the turn that answers it keeps it;
                    # bounded: a database outage delays the turn, never blocks it
                    if self.on_user_message is not None:
                        self.on_user_message(write)
                    if source == "inbox":
                        # messages that joined the turn are drained together: each is queued at once,
                        # without a wait between them (held meanwhile: a stop there keeps the rest
                        # for the thread, a crash for the start-up recovery)
                        write.commit_soon()
                    else:
                        with trio.move_on_after(USER_MESSAGE_WAIT_S):
                            await write.settled()
        elif isinstance(event, ev.ModelCallEvent):
            self.add_usage(event.usage)
        elif isinstance(event, ev.ToolStartEvent):
            if self.publish:
                self.publish(frames.tool(event.name, "started"))
        elif isinstance(event, ev.ToolEndEvent):
            res = event.result
            # metric labels only for tools the agent has: model-invented names
            # would grow /metrics without bound
            label = res.name if self.known_tools is None or res.name in self.known_tools else "(unknown)"
            labelled(TOOL_CALLS, label, res.status).inc()
            labelled(TOOL_SECONDS, label).observe(res.duration_ms / 1000.0)
            audit = self.writer.add_audit(session_id=self.session_id, owner=self.owner, tool_name=res.name,
                                          arguments=event.arguments or "", result=res.content, status=res.status,
                                          duration_ms=res.duration_ms, tool_call_id=event.call_id or None)
            if res.name in self.mutating_tools:  # what changed something is on record at once
                audit.commit_soon()
            if self.publish:
                self.publish(frames.tool(res.name, res.status, res.content))
