"""The typed seams of the runtime (docs/architecture.md §3).

The runtime talks to the database through two narrow interfaces, declared
here as :class:`typing.Protocol` classes (beside the plugins' own
``ongridd.plugins.api.PluginStore``):

- :class:`RuntimeStore` — the reads and the few direct writes the runtime
  makes (``ongridd.store.store.Store`` implements it; the daemon assigns its
  Store to a ``RuntimeStore`` variable, so a drift fails the type check);
- :class:`RuntimeWriter` — the queued writes of a turn
  (``ongridd.store.writer.StoreWriter`` implements it).

Row dicts are the store's: session rows ``{id, agent_id, user_id,
parent_session_id, thread_id, status, description, created_at, ...}``,
message rows ``{seq, role, content, tool_calls, tool_call_id, name,
created_at}``, summary rows ``{id, session_id, through_seq, content, source,
summarizer_session_id, created_at}`` (times ISO 8601 UTC).  Every async
method runs its database call in a worker thread and raises
:class:`ongridd.errors.StoreError` when the database fails; cancellation
abandons the wait (the thread finishes its statement).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import trio

if TYPE_CHECKING:  # the type only: the runtime does not import the store's writer module for this
    from ongridd.store.writer import PendingWrite

Row = dict[str, Any]


class RuntimeStore(Protocol):
    """The store API the runtime relies on (see the module doc for the row shapes)."""

    async def get_session(self, session_id: str) -> Row | None: ...

    async def get_or_create_coordinator(self, user_id: str, thread_id: str) -> tuple[Row, bool]: ...

    async def delete_empty_coordinator(self, session_id: str) -> bool: ...

    async def session_tree(self, session_id: str) -> Row | None: ...

    async def export_tree(self, session_id: str) -> Row | None: ...

    async def close_open_workers(self, status: str, reason: str) -> int: ...

    async def list_threads(self, user_id: str, *, limit: int, before: datetime | None = None,
                           before_id: str | None = None) -> list[Row]: ...

    async def list_messages(self, session_id: str, *, after_seq: int, limit: int) -> list[Row]: ...

    async def list_audit_items(self, session_id: str, *, include_children: bool, limit: int,
                               offset: int = 0) -> list[Row]: ...

    async def list_origins(self, session_id: str) -> list[Row]: ...

    async def load_messages_after(self, session_id: str, after_seq: int) -> list[Row]: ...

    async def add_summary(self, session_id: str, *, through_seq: int, content: str, source: str,
                          summarizer_session_id: str | None = None) -> Row: ...

    async def latest_summary(self, session_id: str) -> Row | None: ...

    async def list_summaries(self, session_id: str, *, after_seq: int, through_seq: int | None) -> list[Row]: ...

    async def create_proposal(self, *, session_id: str, action: str, target: str, reason: str,
                              blast_radius: str, operator: str, tool_call_id: str | None = None) -> str: ...

    async def decide_proposal(self, proposal_id: str, *, decision: str, decision_reason: str | None,
                              reviewer_session_id: str | None) -> None: ...

    async def record_change_event(self, *, kind: str, subject: str, actor: str,
                                  detail: Mapping[str, Any]) -> Row: ...


class RuntimeWriter(Protocol):
    """The queued writes of the runtime (the store writer's API).

    The ``create_session``..``add_usage`` calls never block: each queues one
    write and returns its :class:`~ongridd.store.writer.PendingWrite`;
    ``owner`` is the coordinator session a final failure is reported to.
    """

    @property
    def retry_for_s(self) -> float: ...

    @property
    def queued(self) -> int: ...

    def create_session(self, *, owner: str, agent_id: str, user_id: str, parent_session_id: str | None,
                       description: str | None = None, status: str = "pending",
                       thread_id: str | None = None, turn_seq: int | None = None) -> PendingWrite: ...

    def mark_running(self, session_id: str, *, owner: str) -> PendingWrite: ...

    def append_message(self, session_id: str, *, owner: str, role: str, content: str | None,
                       tool_calls: Iterable[Any] | None = None, tool_call_id: str | None = None,
                       name: str | None = None, settles: Sequence[str] = (),
                       at: datetime | None = None) -> PendingWrite: ...

    def hold_message(self, session_id: str, *, owner: str, content: str) -> PendingWrite: ...

    def drop_held(self, session_id: str, ids: Sequence[str], *, owner: str) -> PendingWrite: ...

    def add_audit(self, *, session_id: str, owner: str, tool_name: str, arguments: str, result: str,
                  status: str, duration_ms: int, tool_call_id: str | None = None) -> PendingWrite: ...

    def add_usage(self, session_id: str, *, owner: str, model_calls: int = 1, prompt_tokens: int = 0,
                  completion_tokens: int = 0, cached_tokens: int = 0) -> PendingWrite: ...

    def close_session(self, session_id: str, status: str, reason: str | None = None, *,
                      owner: str) -> PendingWrite: ...

    def note_turn_error(self, session_id: str, error: str, *, owner: str) -> PendingWrite: ...

    async def flush(self, key: str | None = None, *, timeout_s: float = ...) -> bool: ...

    def take_failures(self, owner: str) -> list[str]: ...

    def committed_seq(self, session_id: str) -> int | None: ...

    def note_empty(self, session_id: str) -> None: ...

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None: ...

    async def aclose(self, timeout_s: float = ...) -> None: ...
