"""The tool contract: what a tool is, what a handler gets,
what a call produces.

A handler is ``async def handler(args: dict, ctx: ToolCallContext) -> Any``.
``args`` has been validated against ``Tool.parameters`` (JSON schema) and
optional parameters given as ``null`` have been removed.  The handler returns
``str`` (sent as is) or any JSON-serialisable value (sent as compact JSON).
It raises :class:`ongridd.errors.ToolError` for "could not do what was
asked"; any other exception is reported to the model as an internal error of
the tool.  Cancellation: handlers are cancelled through Trio cancel scopes
(timeout, stop); they must not swallow ``trio.Cancelled``.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

TOOL_CLASSES = ("read", "write", "destructive", "control")
CONTROL_TOOL_NAMES = ("AgentTool", "SendMessage", "TaskStop")
BLAST_RADII = ("single_host", "service", "cluster", "tenant_wide")
TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}\Z")

#: audit statuses
AUDIT_STATUSES = ("ok", "error", "timeout", "cancelled", "redirect", "rejected", "dedup", "cached")


@attrs.frozen(kw_only=True)
class Classification:
    """The class of one call, computed once and carried to the gate and the
    handler in :attr:`ToolCallContext.classification`.

    ``tool_class``: one of ``TOOL_CLASSES``.  ``detail``: the tool's own
    verdict object (e.g. ``host_bash``'s verdict with the argv to run), or
    None.  ``reason``: why the call has this class (shown when a read-only
    persona is refused).  ``call_key``: the canonical JSON of the arguments
    it was computed for; a consumer uses the classification only for those
    arguments.
    """

    tool_class: str
    detail: Any = None
    reason: str = ""
    call_key: str = ""


@attrs.frozen(kw_only=True)
class Approval:
    """The review gate's mark on a call it approved: ``proposal_id`` (the
    proposal row) and ``call_key`` (canonical JSON of the approved
    arguments).  A handler that runs ``write`` calls checks that the
    approval names the very arguments it got (:meth:`ToolCallContext.approved`)."""

    proposal_id: str
    call_key: str


@attrs.frozen(kw_only=True)
class ToolCallContext:
    """What a handler knows about the call it serves.

    ``session_id``: the calling session's id (coordinator, worker or reviewer).
    ``agent``: the persona name running the call.  ``user_id``: the chat user
    (operator).  ``call_id``: the model's tool-call id.  ``read_only``: the
    persona has ``permission_mode: read-only`` (a tool whose class depends on
    its arguments, such as ``host_bash``, must refuse anything but ``read``).
    ``services``: runtime hooks for control tools (AgentTool & co.); ``None``
    for plain tools.  ``classification``: the call's :class:`Classification`,
    set by the tool runner (computed once, off the event loop) and passed on
    by the review gate.  ``approval``: set by the review gate on the context
    it hands to the inner handler of an approved call; ``None`` otherwise.
    ``notes``: what a handler records about its call while it runs (AgentTool:
    the worker it started), added to the stored result if the call is
    cancelled before it returns; a fresh mapping for each call.
    """

    session_id: str
    agent: str
    user_id: str = "local"
    call_id: str = ""
    read_only: bool = False
    services: Any = None
    classification: Classification | None = None
    approval: Approval | None = None
    notes: dict[str, Any] = attrs.field(factory=dict, eq=False)

    @property
    def approved_proposal_id(self) -> str | None:
        return self.approval.proposal_id if self.approval is not None else None

    def approved(self, call_key: str) -> bool:
        """True when the review gate approved the call with these canonical arguments."""
        return self.approval is not None and bool(call_key) and self.approval.call_key == call_key

    def classification_for(self, call_key: str) -> Classification | None:
        """The carried classification when it was computed for ``call_key``."""
        c = self.classification
        return c if c is not None and c.call_key == call_key else None


@attrs.frozen(kw_only=True)
class Proposal:
    """What a ``write``/``destructive`` call would do, shown to the reviewer.

    ``blast_radius`` is one of ``BLAST_RADII``.
    """

    action: str
    target: str
    blast_radius: str = "single_host"


Handler = Callable[[dict[str, Any], ToolCallContext], Awaitable[Any]]


def _check_name(instance: Any, attribute: Any, value: str) -> None:
    if not isinstance(value, str) or not TOOL_NAME_RE.match(value):
        raise ValueError(f"invalid tool name {value!r}: letters, digits, '_' and '-', at most 64")


def _check_class(instance: Any, attribute: Any, value: str) -> None:
    if value not in TOOL_CLASSES:
        raise ValueError(f"tool class must be one of {', '.join(TOOL_CLASSES)}, got {value!r}")


@attrs.frozen(kw_only=True)
class Tool:
    """One tool.

    ``parameters``: a JSON schema of type object.  ``tool_class``: the class
    when ``classify`` is not given.  ``classify(args) -> Classification | str``:
    for tools whose class depends on the arguments (``host_bash``); it gets
    validated arguments and returns a :class:`Classification` (class plus the
    tool's own verdict) or a plain class name.  It is called once per call,
    in a worker thread (it may block, e.g. resolving paths), bounded by
    ``classify_timeout_s``; see :mod:`ongridd.tools.classify`.
    ``describe(args) -> Proposal``: required
    for tools that can be ``write``/``destructive``; the review gate builds the
    proposal from it.  ``timeout_s``: the handler's own limit in seconds (the
    review gate's reviewer time is separate).  ``plugin``: the registering
    plugin's name (set by the registry).
    """

    name: str = attrs.field(validator=_check_name)
    description: str
    parameters: Mapping[str, Any] = attrs.field(factory=lambda: {"type": "object", "properties": {}})
    handler: Handler = attrs.field(repr=False, eq=False)
    tool_class: str = attrs.field(default="read", validator=_check_class)
    timeout_s: float = 15.0
    classify: Callable[[dict[str, Any]], Any] | None = attrs.field(default=None, repr=False, eq=False)
    describe: Callable[[dict[str, Any]], Proposal] | None = attrs.field(default=None, repr=False, eq=False)
    plugin: str = "ongridd"
    classify_timeout_s: float = 5.0

    def classify_call(self, args: Mapping[str, Any], call_key: str = "") -> Classification:
        """The :class:`Classification` of a call with these (validated)
        arguments (blocking: run it off the event loop).  A ``classify``
        returning a plain str is accepted; an unknown class counts as
        ``write`` (treated as mutating)."""
        if self.classify is None:
            return Classification(tool_class=self.tool_class, call_key=call_key)
        value = self.classify(dict(args))
        if isinstance(value, Classification):
            if value.tool_class not in TOOL_CLASSES:
                value = attrs.evolve(value, tool_class="write")
            return attrs.evolve(value, call_key=call_key)
        return Classification(tool_class=value if value in TOOL_CLASSES else "write", call_key=call_key)

    def class_for(self, args: Mapping[str, Any]) -> str:
        """The class of a call with these (validated) arguments (blocking)."""
        return self.classify_call(args).tool_class

    @property
    def may_mutate(self) -> bool:
        """True when some call of this tool can be ``write``/``destructive``."""
        return self.tool_class in ("write", "destructive") or self.classify is not None

    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool: a new dict each call, whose
        ``parameters`` is the tool's own ``parameters`` dict (not a copy: it is
        the schema checked at registration, and the model client remembers
        its JSON text by that dict's identity; never mutate it)."""
        params = self.parameters
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": params if type(params) is dict else dict(params),
            },
        }


@attrs.frozen(kw_only=True)
class RedirectStub:
    """A name models hallucinate on the coordinator, and where to send it.

    ``tool``: the stubbed name; ``persona``: the specialist that has the real
    tool; ``reason``: why that persona.
    """

    tool: str = attrs.field(validator=_check_name)
    persona: str
    reason: str
    plugin: str = "ongridd"


@attrs.frozen(kw_only=True)
class ToolResult:
    """The outcome of one tool call as the model and the audit see it.

    ``content``: the text sent back as the ``role: tool`` message (already
    truncated).  ``status``: one of ``AUDIT_STATUSES``.  ``duration_ms``:
    wall time of the call.  ``raw_chars``: size before truncation.
    """

    call_id: str
    name: str
    content: str
    status: str = "ok"
    duration_ms: int = 0
    raw_chars: int = 0


@attrs.frozen
class Outcome:
    """A handler's return value when it must set the audit status itself.

    ``value``: what the model sees (str or JSON-serialisable).  ``status``:
    one of ``AUDIT_STATUSES`` — e.g. ``"dedup"`` for a deduplicated
    dispatch, ``"rejected"`` for a review-gate rejection, ``"error"`` for a
    handled failure that is not an exception.
    """

    value: Any
    status: str = "ok"
