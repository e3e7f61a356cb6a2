"""OpenAI-compatible model provider (OpenAI, vLLM, Ollama, llama.cpp server,
DeepSeek, the scripted model, ...) through the official ``openai`` SDK.

The SDK (and its HTTP stack) is imported on first use, not when this module
is imported (it costs ~0.3 s of start-up).  ``AsyncOpenAI`` runs under Trio
through anyio.  The SDK's own retries are off (``max_retries=0``); this
provider retries itself so the count is exact:

* retried, with exponential backoff and jitter (``trio.sleep``): HTTP 429,
  408, 5xx, timeouts (no byte for ``timeout_s``) and connection errors —
  only while nothing of the attempt has been handed to the caller;
* not retried: every other status (400, 401, 403, 404, 422, ...), a
  malformed response, a failure after text was already streamed;
* then :class:`ongridd.errors.ProviderError` saying what failed, the status,
  the persona, the model and how many attempts were made.  The API key never
  appears in a message or a log.

Every call carries ``X-Ongrid-Agent`` (persona) and ``X-Ongrid-Session``
(session id), percent-encoded when not plain ASCII.
"""

from __future__ import annotations

import json
import random
import warnings
from collections.abc import AsyncIterator
from typing import Any, Self
from urllib.parse import quote

import trio

from ongridd.errors import ProviderError
from ongridd.llm.assemble import StreamAssembler, completion_from_response
from ongridd.llm.limiter import RateLimitHold, parse_retry_after
from ongridd.llm.types import Completion, ModelRequest, StreamEvent, TextDelta
from ongridd.logs import get_logger, redact_url
from ongridd.metrics import MODEL_CALLS_WAITING

log = get_logger("ongridd.llm")

AGENT_HEADER = "X-Ongrid-Agent"
SESSION_HEADER = "X-Ongrid-Session"
PLACEHOLDER_API_KEY = "not-needed"
_RETRY_STATUSES = frozenset({408, 429})
_CLOSE_TIMEOUT_S = 2.0
#: model calls in flight at once, and HTTP connections kept, per provider (``llm.max_concurrent_calls``)
DEFAULT_CONCURRENT_CALLS = 64
#: a call that waited this long (seconds) for a slot is logged (``model_call_waited_for_a_slot``)
SLOT_WAIT_LOGGED_S = 1.0
_MESSAGE_MAX_CHARS = 400

# After a fully read stream (and after an error response),
# the SDK leaves its HTTP stack's byte-stream async generators to the garbage
# collector, and Trio warns about each.  Only those generators' warnings are
# silenced; the response itself is closed explicitly.
warnings.filterwarnings(
    "ignore",
    message=r"Async generator '(openai\._streaming|httpx2\._models|httpcore2\._async)\.",
    category=ResourceWarning,
)


async def _post_chat(client: Any, body: dict[str, Any], headers: dict[str, str]) -> Any:
    """``POST /chat/completions`` through the SDK client (its HTTP stack,
    auth, timeouts, error classes and SSE decoding), with ``body`` sent as
    it is and the response (each stream chunk) as the decoded JSON.

    ``body`` is already in wire form (``Message.to_wire``, tool schemas as
    dicts), so the SDK's request transform — a recursive walk of every
    message and schema against its TypedDicts, several ms per call on a long
    history — and its per-chunk pydantic models have nothing to add; the
    assembler reads mappings.  Raises the SDK's exceptions (APIStatusError,
    APIConnectionError, APITimeoutError, ...) as ``chat.completions.create``
    does."""
    from openai import AsyncStream

    if body.get("stream"):
        return await client.post("/chat/completions", body=body, options={"headers": headers}, cast_to=object,
                                 stream=True, stream_cls=AsyncStream[object])
    return await client.post("/chat/completions", body=body, options={"headers": headers}, cast_to=object)


def header_value(value: str) -> str:
    """A header-safe form of ``value``: printable ASCII kept, anything else
    (non-ASCII persona names, control characters, ``%``) percent-encoded as
    UTF-8.  The scripted model server decodes it with ``unquote``."""
    return quote(value, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")


class _Failure:
    """One failed attempt, classified."""

    def __init__(self, what: str, *, status: int | None, retryable: bool, retry_after_s: float | None = None):
        self.what = what
        self.status = status
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class OpenAIProvider:
    """A :class:`~ongridd.llm.types.ModelClient` for OpenAI-compatible servers.

    ``base_url``: e.g. ``http://127.0.0.1:8000/v1`` (``None``: the SDK's
    default, api.openai.com).  ``api_key``: ``None``/empty is fine for local
    servers (a placeholder is sent).  ``model``: default model name; a
    request's ``model`` overrides it; when both are missing the first model
    of ``GET /models`` is used (once looked up, remembered).  ``timeout_s``:
    how long to wait for the connection and for each read (a server silent
    that long is a timeout).  ``max_retries``: retries after the first
    attempt (``3`` → at most 4 attempts).  ``backoff_base_s`` /
    ``backoff_max_s``: the retry delay before attempt ``n+1`` is
    ``min(max, base·2^(n-1))``, of which the upper half is random jitter.  A
    429/503 with ``Retry-After`` (delta-seconds or HTTP-date, capped at
    ``limiter.RETRY_AFTER_MAX_S``) instead holds *every* call of this
    provider until then (``rate_limit``, shared by all turns), the failed
    call included; each call still makes at most ``max_retries`` retries.  ``streaming``: ``False`` for servers whose streaming
    is broken (one ``TextDelta`` with the whole text, then the Completion).

    Use ``async with OpenAIProvider(...) as provider:`` or call
    :meth:`aclose`.  One provider serves concurrent calls.
    """

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None = None,
        model: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        *,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        streaming: bool = True,
        max_concurrent_calls: int = DEFAULT_CONCURRENT_CALLS,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries!r}")
        if max_concurrent_calls < 1:
            raise ValueError(f"max_concurrent_calls must be >= 1, got {max_concurrent_calls!r}")
        self.base_url = base_url
        self.model = model
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.streaming = streaming
        self._api_key = api_key or PLACEHOLDER_API_KEY
        self._client: Any = None
        self._closed = False
        self._discovered_model: str | None = None
        self._stream_options_ok = True
        # called with the request before each retry (the model client
        # wrapper counts retried attempts in ``ongrid_model_retries_total``)
        self.on_retry: Any = None
        # a 429/503 with Retry-After holds every call of this provider, not only the one told
        self.rate_limit = RateLimitHold()
        # calls in flight at once (a burst beyond waits here, in arrival order, not in the HTTP
        # pool, whose request-to-connection matching costs grow with the pool's size)
        self.max_concurrent_calls = max_concurrent_calls
        self._slots = trio.CapacityLimiter(max_concurrent_calls)

    # -- lifetime ---------------------------------------------------------

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client (idempotent).  Later calls raise
        :class:`ProviderError`.  Shielded for a short bound so it also works
        in a ``finally:`` of a cancelled task."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            with trio.move_on_after(_CLOSE_TIMEOUT_S, shield=True):
                await client.close()

    def _sdk_client(self) -> Any:
        if self._closed:
            raise ProviderError("the model provider is closed")
        if self._client is None:
            import openai  # lazy: ~0.3 s and its own HTTP stack

            import httpx2  # the SDK's HTTP stack

            # one connection per call slot, all kept alive: a burst never closes and reopens
            # connections by the hundred (the SDK's default keeps 100 of 1,000)
            n = self.max_concurrent_calls
            limits = httpx2.Limits(max_connections=n, max_keepalive_connections=n)
            kwargs: dict[str, Any] = {"api_key": self._api_key, "timeout": self.timeout_s, "max_retries": 0,
                                      "http_client": openai.DefaultAsyncHttpxClient(limits=limits)}
            if self.base_url:
                kwargs["base_url"] = self.base_url
            self._client = openai.AsyncOpenAI(**kwargs)
        return self._client

    # -- the model call ---------------------------------------------------

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Call the model: yields :class:`TextDelta` events as text streams,
        then exactly one :class:`Completion`.  Each attempt first waits out
        the provider's shared ``Retry-After`` hold, then for one of its
        ``max_concurrent_calls`` slots (held until the response is read).

        Raises :class:`ProviderError` when the call fails and may not or can
        no longer be retried.  Cancellation (or closing the iterator, e.g.
        with ``contextlib.aclosing``) aborts the HTTP stream promptly; no
        retry follows.  A failure after a ``TextDelta`` was yielded is not
        retried (the caller has shown the text already).
        """
        client = self._sdk_client()
        model = request.model or self.model or await self._default_model(client)
        params: dict[str, Any] = {
            "model": model,
            "messages": [m.to_wire() for m in request.messages],
        }
        if request.tools:
            params["tools"] = [dict(t) for t in request.tools]
        headers = {AGENT_HEADER: header_value(request.agent), SESSION_HEADER: header_value(request.session_id)}
        attempt = 0
        while True:
            attempt += 1
            emitted = False
            failure: _Failure | None = None
            completion: Completion | None = None
            held_s = await self.rate_limit.wait()
            if held_s:
                log.info("model_call_rate_limited", agent=request.agent, session_id=request.session_id,
                         model=model, waited_s=round(held_s, 3))
            slot = object()  # released from any task (a generator closed elsewhere)
            try:
                self._slots.acquire_on_behalf_of_nowait(slot)
            except trio.WouldBlock:
                waited = trio.current_time()
                MODEL_CALLS_WAITING.inc()
                try:
                    await self._slots.acquire_on_behalf_of(slot)
                finally:
                    MODEL_CALLS_WAITING.dec()
                waited = trio.current_time() - waited
                if waited >= SLOT_WAIT_LOGGED_S:
                    log.info("model_call_waited_for_a_slot", agent=request.agent, session_id=request.session_id,
                             waited_s=round(waited, 3), max_concurrent_calls=self.max_concurrent_calls)
            try:
                try:
                    if self.streaming:
                        sdk_stream = await self._open_stream(client, params, headers)
                        assembler = StreamAssembler()
                        try:
                            while True:
                                try:
                                    chunk = await sdk_stream.__anext__()
                                except StopAsyncIteration:
                                    break
                                for event in assembler.feed(chunk):
                                    emitted = True
                                    yield event
                        finally:
                            with trio.move_on_after(_CLOSE_TIMEOUT_S, shield=True):
                                await sdk_stream.close()
                        completion = assembler.finish()
                    else:
                        response = await _post_chat(client, params, headers)
                        completion = completion_from_response(response)
                except Exception as exc:
                    failure = self._classify(exc)
                    if failure is None:
                        raise
            finally:
                self._slots.release_on_behalf_of(slot)
            if completion is not None:
                if not self.streaming and completion.message.content:
                    yield TextDelta(completion.message.content)
                yield completion
                return
            assert failure is not None
            if failure.retry_after_s is not None and failure.status in (429, 503):
                self.rate_limit.hold(failure.retry_after_s)
            if emitted or not failure.retryable or attempt > self.max_retries:
                raise self._give_up(failure, attempt=attempt, model=model, request=request, emitted=emitted)
            delay_s = self._backoff_s(attempt, failure)
            if self.on_retry is not None:
                try:
                    self.on_retry(request)
                except Exception:
                    log.exception("model_call_retry_hook_failed")
            log.warning(
                "model_call_retry",
                agent=request.agent,
                session_id=request.session_id,
                model=model,
                attempt=attempt,
                status=failure.status,
                error=self._scrub(failure.what),
                delay_s=round(delay_s, 3),
            )
            await trio.sleep(delay_s)

    async def _open_stream(self, client: Any, params: dict[str, Any], headers: dict[str, str]) -> Any:
        import openai

        if self._stream_options_ok:
            try:
                return await _post_chat(client, {**params, "stream": True,
                                                 "stream_options": {"include_usage": True}}, headers)
            except openai.BadRequestError as exc:
                if "stream_options" not in str(exc) and "include_usage" not in str(exc):
                    raise
                # An older server that rejects stream_options: go without usage.
                self._stream_options_ok = False
                log.info("model_stream_options_unsupported", base_url=redact_url(self.base_url))
        return await _post_chat(client, {**params, "stream": True}, headers)

    async def _default_model(self, client: Any) -> str:
        if self._discovered_model:
            return self._discovered_model
        try:
            page = await client.models.list()
            ids = [m.id for m in page.data if getattr(m, "id", None)]
        except Exception as exc:
            failure = self._classify(exc)
            if failure is None:
                raise
            raise ProviderError(
                f"no model name configured (set llm.model or the persona's model) and listing the models of "
                f"{self._where()} failed: {failure.what}",
                status=failure.status,
            ) from None
        if not ids:
            raise ProviderError(
                f"no model name configured (set llm.model or the persona's model) and {self._where()} lists no models"
            )
        self._discovered_model = ids[0]
        log.info("model_discovered", model=ids[0], base_url=redact_url(self.base_url))
        return ids[0]

    # -- failures ---------------------------------------------------------

    def _classify(self, exc: Exception) -> _Failure | None:
        """Map an SDK exception to a failure; ``None`` for exceptions that
        are not about the provider (bugs: re-raised as they are)."""
        import openai

        if isinstance(exc, openai.APITimeoutError):
            return _Failure(f"no response within timeout_s={self.timeout_s:g}", status=None, retryable=True)
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            detail = f": {type(cause).__name__}: {cause}" if cause else ""
            return _Failure(f"connection error{detail}", status=None, retryable=True)
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            retryable = status in _RETRY_STATUSES or status >= 500
            return _Failure(
                f"HTTP {status}: {self._status_message(exc)}",
                status=status,
                retryable=retryable,
                retry_after_s=_retry_after(exc) if retryable else None,
            )
        if isinstance(exc, openai.APIResponseValidationError):
            return _Failure(f"malformed response: {exc.message}", status=exc.status_code, retryable=False)
        if isinstance(exc, openai.APIError):
            return _Failure(f"error from the server: {exc.message}", status=None, retryable=False)
        if isinstance(exc, json.JSONDecodeError):
            return _Failure(f"malformed response (not JSON): {exc}", status=None, retryable=False)
        return None

    @staticmethod
    def _status_message(exc: Any) -> str:
        body = exc.body
        message = None
        if isinstance(body, dict):
            error = body.get("error")
            inner = error if isinstance(error, dict) else body
            message = inner.get("message")
        text = " ".join(str(message or exc.message).split())
        return text if len(text) <= _MESSAGE_MAX_CHARS else text[:_MESSAGE_MAX_CHARS] + "…"

    def _backoff_s(self, attempt: int, failure: _Failure) -> float:
        if failure.retry_after_s is not None and failure.status in (429, 503):
            return 0.0  # the shared hold (``rate_limit``) makes this and every other call wait
        if failure.retry_after_s is not None and failure.retry_after_s <= self.backoff_max_s:
            return max(0.0, failure.retry_after_s)
        cap = min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))
        return cap / 2 + random.uniform(0, cap / 2)

    def _where(self) -> str:
        return redact_url(self.base_url) or "the default OpenAI endpoint"

    def _give_up(
        self, failure: _Failure, *, attempt: int, model: str, request: ModelRequest, emitted: bool
    ) -> ProviderError:
        if emitted:
            why = "not retried: the stream broke after text had already been streamed"
        elif not failure.retryable:
            why = "not retried: this kind of failure does not go away by retrying"
        else:
            why = f"gave up after {attempt} attempt(s) (max_retries={self.max_retries})"
        message = (
            f"model call failed: {failure.what} — chat completion for persona {request.agent!r}, "
            f"model {model!r} at {self._where()}; {attempt} attempt(s), {why}"
        )
        log.error(
            "model_call_failed",
            agent=request.agent,
            session_id=request.session_id,
            model=model,
            status=failure.status,
            attempts=attempt,
            error=self._scrub(failure.what),
        )
        return ProviderError(self._scrub(message), status=failure.status, retryable=failure.retryable)

    def _scrub(self, text: str) -> str:
        if len(text) > 2000:
            text = text[:2000] + "…"
        if self._api_key and self._api_key != PLACEHOLDER_API_KEY and len(self._api_key) >= 4:
            text = text.replace(self._api_key, "***")
        return text


def _retry_after(exc: Any) -> float | None:
    try:
        value = exc.response.headers.get("retry-after")
    except AttributeError:
        return None
    return parse_retry_after(value)


__all__ = ["AGENT_HEADER", "SESSION_HEADER", "OpenAIProvider", "header_value"]
