"""Run one tool call of one agent run.

Nothing a model does raises out of :meth:`ToolRunner.run`: an unknown name,
bad arguments, a handler exception, a timeout each become a
:class:`ToolResult` whose ``content`` the model can read.  Only
cancellation (``trio.Cancelled``) propagates.

Error results are JSON text ``{"status": "error", "error": "..."}`` (``"timeout"``
for a timeout; ``"cancelled"`` for a call cut off, with what its handler noted).  A runner belongs to one run: it holds that run's read cache.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

from ongridd.errors import ToolArgumentsError, ToolError, ToolTimeout
from ongridd.llm.types import ToolCall
from ongridd.logs import get_logger
from ongridd import secretset
from ongridd.secretset import redact_pieces
from ongridd.tools.args import canonical_json, parse_arguments, validate_arguments
from ongridd.tools.bag import ToolBag
from ongridd.tools.classify import classify_once
from ongridd.tools.spec import (
    AUDIT_STATUSES,
    Outcome,
    Tool,
    ToolCallContext,
    ToolResult,
)
from ongridd.tools.stubs import redirect_text
from ongridd.tools.truncate import truncate_result
from ongridd.unicodetext import valid_text

log = get_logger(__name__)

DEFAULT_MAX_RESULT_CHARS = 16000
#: the answer to a call whose arguments carry part of a held secret, and to every later call of its turn
SECRET_PIECE_REFUSAL = ("refused: a tool call of this turn carried or printed part of a secret Ongrid itself is "
                        "configured with (a chat token, the model's key or a bridge secret); nothing was run, and no "
                        "further tool call of this turn will be, its workers' included")
#: the answer to a call whose result held part of a held secret (the result is withheld whole)
SECRET_OUTPUT_WITHHELD = ("withheld: this call's result held part of a secret Ongrid itself is configured with (a chat "
                          "token, the model's key or a bridge secret); none of it is shown, and no further tool call "
                          "of this turn will run, its workers' included")


@attrs.define
class SecretTaint:
    """Whether a tool call carried or printed a piece of a held secret, shared by every run of one
    turn (the coordinator's, its workers', their reviewers'): once set, no further call of any of
    them runs, no result not yet given to a model is given (:meth:`ToolRunner.run`, the kernel's
    tool step), and ``on_set`` is called once (the runtime stops the turn), so the calls a model
    had running at the time answer nothing each on their own."""

    seen: bool = False
    on_set: Callable[[], None] | None = None

    def set(self) -> None:
        """Mark the turn tainted; the first time, call ``on_set``."""
        if not self.seen:
            self.seen = True
            if self.on_set is not None:
                self.on_set()


CACHED_HINT = (
    "[cached: an identical {name} call earlier in this run returned this result; it was not run again. "
    "Use it and do not repeat the call.]"
)


def error_text(message: str, status: str = "error", extra: Mapping[str, Any] | None = None) -> str:
    """An error result as the model sees it: ``{"status": "error", "error": message}``, after the
    members of ``extra`` (JSON values; they cannot replace ``status`` or ``error``); a held secret
    in it is hidden, one wrapped over lines included (an error can quote a command's output)."""
    return redact_pieces(_error_json(message, status, extra))


def _error_json(message: str, status: str = "error", extra: Mapping[str, Any] | None = None) -> str:
    """:func:`error_text` before its redaction: the runner's own errors, whose text :meth:`ToolRunner.run`
    redacts — and checks — with the rest of the result."""
    return _json_text({**(extra or {}), "status": status, "error": message})


#: what ``json.dumps(value, ensure_ascii=False, default=str)`` makes on every call, made once
_JSON_TEXT = json.JSONEncoder(ensure_ascii=False, default=str)


def _json_text(value: Any) -> str:
    return _JSON_TEXT.encode(value)


#: a tool result longer than this (characters) is searched for secrets in a worker thread, so a
#: large one (a log search) does not hold the event loop
THREAD_REDACT_CHARS = 64 * 1024


def _carries_secret_piece(arguments: Any) -> bool:
    """Whether a call's arguments (the model's text, and as decoded from JSON) hold a piece of a
    held secret that the results' redaction would hide (:func:`~ongridd.secretset.redact_pieces`)."""
    texts = [arguments if isinstance(arguments, str) else _json_text(arguments)]
    if isinstance(arguments, str) and len(arguments) <= 1_000_000:
        try:
            texts.append(json.dumps(json.loads(arguments), ensure_ascii=False))
        except (ValueError, RecursionError):
            pass
    return any(secretset.redact_pieces(text) != text for text in texts)


def render_value(value: Any) -> str:
    """A handler's value as text: ``str`` as is, anything else as JSON
    (``ensure_ascii=False``, unknown types through ``str``).  Raises
    ValueError/TypeError when the value cannot be serialised (e.g. a cycle)."""
    if isinstance(value, str):
        return value
    return _json_text(value)


class ToolRunner:
    """Runs the tool calls of one agent run against one :class:`ToolBag`.

    ``max_result_chars``: results are cut to this many characters
    (``limits.tool_result_max_chars``).  The runner keeps the run's read
    cache: an identical call (same name, same canonical validated arguments)
    of a call whose class is ``read`` that succeeded earlier in this run is
    answered from that result with a hint (status ``cached``).  Two identical
    read calls running at the same time share one execution.  A call is
    classified once, off the event loop (:func:`ongridd.tools.classify.classify_once`);
    the classification goes to the review gate and the handler in the context.
    """

    def __init__(self, bag: ToolBag, *, max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
                 taint: SecretTaint | None = None):
        self.bag = bag
        self.max_result_chars = max_result_chars
        self._cache: dict[tuple[str, str], str] = {}
        self._inflight: dict[tuple[str, str], trio.Event] = {}
        #: a call of this run — or of another run sharing it (its turn's) — carried part of a held
        #: secret: no further call runs (see :meth:`run`)
        self.taint = taint if taint is not None else SecretTaint()

    # ---- public ---------------------------------------------------------

    async def run(self, call: ToolCall, ctx: ToolCallContext) -> ToolResult:
        """Run ``call`` and return its result (held secrets redacted, then truncated).

        Statuses: ``ok`` (or what the handler's ``Outcome`` says), ``error``
        (unknown tool, bad arguments, ``ToolError``, handler exception),
        ``timeout`` (past ``tool.timeout_s``), ``redirect`` (a stubbed name),
        ``cached`` (read cache).  A call whose arguments carry, or whose result holds, a piece of
        a held secret is answered ``error`` (:data:`SECRET_PIECE_REFUSAL`,
        :data:`SECRET_OUTPUT_WITHHELD`: nothing of the result is shown) and sets :attr:`taint`,
        after which every call sharing it is refused.  Cancellation: ``trio.Cancelled`` propagates
        immediately (the handler is cancelled with it); callers record status
        ``cancelled`` themselves with :meth:`cancelled_result`.
        """
        started = time.perf_counter()
        # the results' redaction hides a secret's pieces, so a model that echoes guesses through a tool
        # (`date '+ALICEtoa%%ALICEtob…'`) would learn which guess is a piece: a call that carries one is
        # not run nor echoed, and its turn's later calls neither (workers' included) — one yes/no per turn,
        # in the log
        if self.taint.seen or _carries_secret_piece(call.arguments):
            if not self.taint.seen:
                log.warning("tool_call_secret_piece_refused", tool=call.name, agent=ctx.agent,
                            session_id=ctx.session_id)
            self.taint.set()
            return self.secret_refusal(call, started)
        status, text = await self._run(call, ctx)
        if self.taint.seen:  # another call of the turn tainted it meanwhile: this result says nothing either
            return self.secret_refusal(call, started)
        plain = valid_text(text)
        if len(plain) > THREAD_REDACT_CHARS:  # a large result (a log search): searched off the event loop
            shown = await trio.to_thread.run_sync(redact_pieces, plain)
        else:
            shown = redact_pieces(plain)
        if shown != plain:
            # what the redaction hid would tell the model which of the strings it had a tool print (spelled
            # with escapes, `stat --printf='\x41…'`, `date '+A%nB…'`, that no check of the arguments sees) is
            # a piece of a held secret: the result is withheld whole and the turn's calls end — one yes/no
            log.warning("tool_result_secret_piece_withheld", tool=call.name, agent=ctx.agent, session_id=ctx.session_id)
            self.taint.set()
            withheld = _error_json(SECRET_OUTPUT_WITHHELD)
            return self._result(call, "error", withheld, started, shown=withheld)
        return self._result(call, status, text, started, shown=shown)

    def cancelled_result(self, call: ToolCall, started: float | None = None,
                         reason: str = "stopped before it finished", notes: Mapping[str, Any] | None = None) -> ToolResult:
        """The result to record for a call that was cancelled (status ``cancelled``).

        ``started``: a ``time.perf_counter()`` value to compute the duration from.  ``notes``:
        what its handler recorded while it ran (:attr:`ToolCallContext.notes`), added to the result.
        """
        text = _error_json(f"{call.name or '(no name)'} was cancelled: {reason}", "cancelled", notes)
        return self._result(call, "cancelled", text, started)

    def secret_refusal(self, call: ToolCall, started: float | None = None) -> ToolResult:
        """The result every call of a tainted turn is answered with (:data:`SECRET_PIECE_REFUSAL`)."""
        refusal = _error_json(SECRET_PIECE_REFUSAL)
        return self._result(call, "error", refusal, started, shown=refusal)

    def not_run_result(self, call: ToolCall, reason: str) -> ToolResult:
        """An error result for a call that is deliberately not executed (budget, cut output)."""
        return self._result(call, "error", _error_json(f"{call.name or '(no name)'} was not run: {reason}"), None)

    # ---- internals ------------------------------------------------------

    def _result(self, call: ToolCall, status: str, text: str, started: float | None,
                shown: str | None = None) -> ToolResult:
        """The result of ``call`` with ``text`` as the model sees it: every held secret hidden — also
        one the output wrapped over lines or a command read in pieces (``shown``: ``text`` already
        so) — then cut."""
        duration_ms = int((time.perf_counter() - started) * 1000) if started is not None else 0
        if shown is None:
            # a file name's undecodable byte (or a plugin's stray surrogate) becomes U+FFFD for the
            # model and the store
            shown = redact_pieces(valid_text(text))
        return ToolResult(
            call_id=call.id,
            name=call.name,
            # redacted before cutting: a cut must never leave half a secret behind
            content=truncate_result(shown, self.max_result_chars),
            status=status,
            duration_ms=duration_ms,
            raw_chars=len(text),
        )

    def _unknown(self, call: ToolCall, ctx: ToolCallContext) -> tuple[str, str]:
        stub = self.bag.stubs.get(call.name)
        if stub is not None:
            return "redirect", redirect_text(stub)
        agent = ctx.agent or self.bag.agent
        have = ", ".join(self.bag.names()) or "(none)"
        name = call.name or "(a tool call without a name)"
        return "error", _error_json(
            f"{name} is not available to {agent}: it is not one of its tools, and nothing was run. "
            f"Tools available to {agent}: {have}"
        )

    async def _run(self, call: ToolCall, ctx: ToolCallContext) -> tuple[str, str]:
        tool = self.bag.tools.get(call.name)
        if tool is None:
            return self._unknown(call, ctx)
        try:
            args = parse_arguments(tool.name, call.arguments)
            args = validate_arguments(tool.name, tool.parameters, args)
        except ToolArgumentsError as exc:
            return "error", _error_json(str(exc))
        try:
            # computed once, off the event loop; the gate and the handler get it in ctx
            if ctx.classification is not None or ctx.approval is not None:  # none: most calls, no copy
                ctx = attrs.evolve(ctx, classification=None, approval=None)
            ctx = await classify_once(tool, args, ctx)
        except ToolError as exc:
            return "error", _error_json(str(exc))
        except Exception as exc:  # a buggy classify must not abort the turn
            log.exception("tool_classify_failed", tool=tool.name)
            return "error", _error_json(f"{tool.name} failed to classify the call: {type(exc).__name__}: {exc}")
        assert ctx.classification is not None
        is_read = ctx.classification.tool_class == "read"
        if not is_read:
            return await self._execute(tool, args, ctx)
        key = (tool.name, canonical_json(args))
        while True:
            cached = self._cache.get(key)
            if cached is not None:
                return "cached", CACHED_HINT.format(name=tool.name) + "\n" + cached
            pending = self._inflight.get(key)
            if pending is None:
                break
            await pending.wait()  # an identical call is running: share its result
        done = trio.Event()
        self._inflight[key] = done
        try:
            status, text = await self._execute(tool, args, ctx)
            if status == "ok":
                self._cache[key] = text
            return status, text
        finally:
            del self._inflight[key]
            done.set()

    async def _execute(self, tool: Tool, args: Mapping[str, Any], ctx: ToolCallContext) -> tuple[str, str]:
        value: Any = None
        with trio.move_on_after(tool.timeout_s) as scope:
            try:
                value = await tool.handler(dict(args), ctx)
            except ToolTimeout as exc:
                return "timeout", _error_json(str(exc) or f"{tool.name} timed out", "timeout")
            except ToolError as exc:
                return "error", _error_json(str(exc) or f"{tool.name} failed ({type(exc).__name__})")
            except Exception as exc:
                log.exception("tool_handler_failed", tool=tool.name, session_id=ctx.session_id)
                return "error", _error_json(f"{tool.name} failed with an internal error: {type(exc).__name__}: {exc}")
        if scope.cancelled_caught:
            return "timeout", _error_json(f"{tool.name} timed out after {tool.timeout_s:g} s and was stopped", "timeout")
        status = "ok"
        if isinstance(value, Outcome):
            status, value = value.status, value.value
            if status not in AUDIT_STATUSES:
                log.warning("tool_outcome_bad_status", tool=tool.name, status=status)
                status = "ok"
        try:
            text = render_value(value)
        except (TypeError, ValueError) as exc:
            log.error("tool_result_not_serialisable", tool=tool.name, error=str(exc))
            return "error", _error_json(f"{tool.name} returned a value that cannot be sent as JSON: {exc}")
        return status, text
