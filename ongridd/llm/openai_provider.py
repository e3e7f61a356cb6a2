"""OpenAI-compatible model provider (OpenAI, vLLM, Ollama, llama.cpp server,
DeepSeek, the scripted model, ...): ``POST {base_url}/chat/completions``
over :mod:`ongridd.llm.http` (keep-alive HTTP/1.1 on Trio), streamed as
server-sent events or read whole.

The request body is written here in wire form (``Message.to_wire``, tool
schemas as dicts; a run's tool list is serialised once and reused while the
same tuple is sent; each message's JSON text is remembered, bounded, so a
long thread's history is not encoded again on every call), and each stream chunk is handed to the assembler as
decoded JSON.  This provider retries itself so the count is exact:

* retried, with exponential backoff and jitter (``trio.sleep``): HTTP 429,
  408, 5xx, timeouts (no byte for ``timeout_s``) and connection errors —
  only while nothing of the attempt has been handed to the caller;
* not retried: every other status (400, 401, 403, 404, 422, ...), a
  malformed response, an error object in the stream, a failure after text
  was already streamed;
* then :class:`ongridd.errors.ProviderError` saying what failed, the status,
  the persona, the model and how many attempts were made.  The API key never
  appears in a message or a log.

Every call carries ``X-Ongrid-Agent`` (persona) and ``X-Ongrid-Session``
(session id), percent-encoded when not plain ASCII.  ``base_url`` ``None``
means ``$OPENAI_BASE_URL`` or ``https://api.openai.com/v1``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any, Self
from urllib.parse import quote, urlsplit

import orjson
import trio

from ongridd.errors import ProviderError
from ongridd.llm.assemble import StreamAssembler, completion_from_response
from ongridd.llm.http import HTTPClient, HTTPConnectionError, HTTPTimeout, Response
from ongridd.llm.limiter import RateLimitHold, parse_retry_after
from ongridd.llm.memo import BoundedMemo
from ongridd.llm.sse import SSEDecoder, SSEError
from ongridd.llm.types import Completion, Message, ModelRequest, StreamEvent, TextDelta, ToolCall
from ongridd.logs import get_logger, redact_url
from ongridd.metrics import MODEL_CALLS_WAITING, MODEL_RESPONSE_SECONDS
from ongridd.unicodetext import valid_text

log = get_logger("ongridd.llm")

AGENT_HEADER = "X-Ongrid-Agent"
SESSION_HEADER = "X-Ongrid-Session"
PLACEHOLDER_API_KEY = "not-needed"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
_RETRY_STATUSES = frozenset({408, 429})
#: model calls in flight at once, and HTTP connections kept, per provider (``llm.max_concurrent_calls``)
DEFAULT_CONCURRENT_CALLS = 64
#: a call that waited this long (seconds) for a slot is logged (``model_call_waited_for_a_slot``)
SLOT_WAIT_LOGGED_S = 1.0
_MESSAGE_MAX_CHARS = 400
#: the largest non-streamed response body read, bytes; an error body is read up to ERROR_BODY_BYTES
MAX_BODY_BYTES = 64 * 1024 * 1024
ERROR_BODY_BYTES = 1024 * 1024
#: after ``[DONE]``, how long the rest of a body is read (to keep the connection), seconds
_DRAIN_S = 1.0
#: tool lists kept serialised (a run sends the same tuple on every call), and each tool entry (a
#: turn builds new lists of the same tools)
_TOOLS_CACHE_SIZE = 1024
_TOOLS_CACHE_CHARS = 16_000_000
#: messages kept as JSON text (the same history is sent on every call of a thread), and their
#: characters at most
_WIRE_CACHE_SIZE = 8192
_WIRE_CACHE_CHARS = 8_000_000
#: the encoder of request bodies (what ``json.dumps(..., default=str)`` uses)
_ENCODER = json.JSONEncoder(default=str)
#: a JSON escape of a UTF-16 surrogate (``\ud800``–``\udfff``): JSON allows one alone, UTF-8 cannot carry it
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")
#: a run of digits that may be an integer past 64 bits, which orjson would decode as a float,
#: found as ``_LONG_NUMBER`` in the text with every digit made ``0``
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 19
#: text with this many brackets may nest deeper than ``json.loads`` goes (about 990 levels, fewer
#: the deeper the caller's stack; orjson goes to 1,024): it is left to ``json.loads``
_DEEP_BRACKETS = 512


def _is_text(value: Any) -> bool:
    return type(value) is str


def _rememberable(m: Message) -> bool:
    """Whether ``m``'s wire text may be remembered under its fields: a :class:`Message` itself (a
    subclass may write other wire) whose fields ``to_wire`` reads are ``str`` (or None) and whose
    tool calls are plain :class:`ToolCall` of ``str`` fields.  Anything else is encoded each time:
    ``1 == True == 1.0`` and ``0.0 == -0.0`` as keys, yet JSON writes them differently."""
    return (type(m) is Message and _is_text(m.role)
            and (m.content is None or _is_text(m.content))
            and (m.tool_call_id is None or _is_text(m.tool_call_id))
            and all(type(c) is ToolCall and _is_text(c.id) and _is_text(c.name) and _is_text(c.arguments)
                    for c in m.tool_calls))


def header_value(value: str) -> str:
    """A header-safe form of ``value``: printable ASCII kept, anything else
    (non-ASCII persona names, control characters, ``%``) percent-encoded as
    UTF-8, and so are leading and trailing spaces (a header value may not
    start or end with one).  The scripted model server decodes it with
    ``unquote``."""
    text = quote(value, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")
    core = text.strip(" ")
    if len(core) == len(text):
        return text
    lead = len(text) - len(text.lstrip(" "))
    return "%20" * lead + core + "%20" * (len(text) - lead - len(core))


class _StatusError(Exception):
    """An HTTP error status with its (bounded) body and headers."""

    def __init__(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body
        self.headers = headers

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def message(self) -> str:
        """The server's own message (``error.message`` or ``message`` of a JSON body), else the body
        text; whitespace folded, not cut (the caller masks the key first, then cuts)."""
        try:
            data = json.loads(self.body)
        except (ValueError, RecursionError):
            data = None
        message = None
        if isinstance(data, dict):
            error = data.get("error")
            inner = error if isinstance(error, dict) else data
            message = inner.get("message") if isinstance(inner, dict) else None
            if message is None and isinstance(error, str):
                message = error
        return " ".join(str(message if message is not None else (self.text() or "(no body)")).split())


class _CallTimeout(HTTPTimeout):
    """The answer was still arriving when the attempt's ``call_timeout_s`` ran out."""


class _Malformed(Exception):
    """A response that is not what a chat completion looks like."""


class _ServerError(Exception):
    """An error object the server sent inside a successful (streamed) response."""


class _Failure:
    """One failed attempt, classified."""

    def __init__(self, what: str, *, status: int | None, retryable: bool, retry_after_s: float | None = None):
        self.what = what
        self.status = status
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class OpenAIProvider:
    """A :class:`~ongridd.llm.types.ModelClient` for OpenAI-compatible servers.

    ``base_url``: e.g. ``http://127.0.0.1:8000/v1`` (``None``:
    ``$OPENAI_BASE_URL`` or api.openai.com).  ``api_key``: ``None``/empty is fine for local
    servers (a placeholder is sent).  ``model``: default model name; a
    request's ``model`` overrides it; when both are missing the first model
    of ``GET /models`` is used (once looked up, remembered).  ``timeout_s``:
    how long to wait for the connection and for each read (a server silent
    that long is a timeout).  ``call_timeout_s``: the longest one attempt
    may take, request sent to the answer's last byte (a server that streams
    without end, or trickles, is a timeout; checked as the answer arrives, so
    an attempt ends at most ``timeout_s`` after it).  ``max_retries``: retries after the first
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
        call_timeout_s: float = 600.0,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        streaming: bool = True,
        max_concurrent_calls: int = DEFAULT_CONCURRENT_CALLS,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        if not call_timeout_s > 0:
            raise ValueError(f"call_timeout_s must be > 0, got {call_timeout_s!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries!r}")
        if max_concurrent_calls < 1:
            raise ValueError(f"max_concurrent_calls must be >= 1, got {max_concurrent_calls!r}")
        self.base_url = base_url
        self.model = model
        self.timeout_s = float(timeout_s)
        self.call_timeout_s = float(call_timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.streaming = streaming
        self._api_key = api_key or PLACEHOLDER_API_KEY
        self._client: HTTPClient | None = None
        self._tools_json: BoundedMemo[tuple[Any, str]] = BoundedMemo(_TOOLS_CACHE_SIZE, _TOOLS_CACHE_CHARS)
        self._wire_json: BoundedMemo[str] = BoundedMemo(_WIRE_CACHE_SIZE, _WIRE_CACHE_CHARS)
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
        """Close the HTTP client's kept connections (idempotent).  Later
        calls raise :class:`ProviderError`.  Never blocks (safe in a
        ``finally:`` of a cancelled task)."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def _http(self) -> HTTPClient:
        if self._closed:
            raise ProviderError("the model provider is closed")
        if self._client is None:
            url = self.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
            try:
                # one kept connection per call slot: a burst never closes and reopens them by the hundred
                self._client = HTTPClient(url, timeout_s=self.timeout_s, max_idle=self.max_concurrent_calls,
                                          user_agent="ongrid")
            except ValueError as exc:
                raise ProviderError(f"llm.base_url: {exc}") from None
        return self._client

    def _headers(self, request: ModelRequest, accept: str) -> list[tuple[str, str]]:
        return [("Authorization", f"Bearer {self._api_key}"), ("Content-Type", "application/json"),
                ("Accept", accept), (AGENT_HEADER, header_value(request.agent)),
                (SESSION_HEADER, header_value(request.session_id))]

    def _tools_wire(self, tools: Sequence[Any]) -> str:
        """``tools`` as JSON, the text of ``json.dumps([dict(t) for t in tools], default=str)``:
        serialised once per tuple (keyed by identity, the tuple kept alive), and each entry of
        the usual shape (see :meth:`_tool_entry_wire`) once per tool, so a new bag of the same
        tools (each turn builds its own) reuses the entries' text."""
        key = id(tools)
        hit = self._tools_json.get(key)
        if hit is not None and hit[0] is tools:
            return hit[1]
        text = "[" + ", ".join(self._tool_entry_wire(t) for t in tools) + "]"
        if isinstance(tools, tuple):
            self._tools_json.put(key, (tools, text), len(text))
        return text

    def _tool_entry_wire(self, entry: Any) -> str:
        """One ``tools`` entry as JSON (``json.dumps(dict(entry), default=str)``).  An entry
        shaped ``{"type": str, "function": {"name": str, "description": str, "parameters":
        dict}}`` (what ``Tool.schema()`` and a stub give) is remembered under its type, name,
        description and the identity of its ``parameters`` dict (kept alive with the text, so
        the identity cannot be reused while remembered): a tool's parameters are its schema,
        checked at registration and never changed after."""
        fn = entry.get("function") if type(entry) is dict and len(entry) == 2 else None
        if (type(fn) is dict and len(fn) == 3 and type(entry.get("type")) is str
                and type(fn.get("name")) is str and type(fn.get("description")) is str
                and type(fn.get("parameters")) is dict):
            params = fn["parameters"]
            key = ("tool-entry", entry["type"], fn["name"], fn["description"], id(params))
            hit = self._tools_json.get(key)
            if hit is not None and hit[0] is params:
                return hit[1]
            text = json.dumps(entry, default=str)
            self._tools_json.put(key, (params, text), len(text))
            return text
        return json.dumps(dict(entry), default=str)

    def _messages_wire(self, messages: Sequence[Message]) -> str:
        """``messages`` in wire form as a JSON array, the same text as
        ``json.dumps([m.to_wire() for m in messages], default=str)``; each
        message's text is remembered, keyed on the fields ``to_wire`` reads
        (only where those are ``str`` or None, see :func:`_rememberable`)."""
        memo = self._wire_json
        parts = []
        for m in messages:
            key: tuple[Any, ...] | None = None
            text: str | None = None
            if _rememberable(m):
                key = (m.role, m.content, m.tool_calls, m.tool_call_id)
                try:
                    text = memo.get(key)
                except TypeError:  # tool calls given as a list: not remembered
                    key = None
            if text is None:
                text = _ENCODER.encode(m.to_wire())
                if key is not None:
                    memo.put(key, text, len(text))
            parts.append(text)
        return "[" + ", ".join(parts) + "]"

    def _body(self, model: str, request: ModelRequest, *, stream: bool) -> bytes:
        """The request body: model, messages, tools, and for a stream ``stream`` / ``stream_options``
        (the bytes of ``json.dumps({"model": ..., "messages": [...], ...}, default=str)``, UTF-8)."""
        parts = ['{"model": ' + _ENCODER.encode(model) + ', "messages": ' + self._messages_wire(request.messages)]
        if request.tools:
            parts.append(', "tools": ' + self._tools_wire(request.tools))
        if stream:
            parts.append(', "stream": true')
            if self._stream_options_ok:
                parts.append(', "stream_options": {"include_usage": true}')
        parts.append("}")
        return "".join(parts).encode()

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
        client = self._http()
        model = request.model or self.model or await self._default_model(client)
        attempt = 0
        while True:
            attempt += 1
            emitted = False  # text handed to the caller: no retry after that
            whole = False  # the answer came in one piece: its text is yielded before the completion
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
            until = trio.current_time() + self.call_timeout_s  # this attempt's end at the latest
            try:
                try:
                    if self.streaming:
                        response = await self._open_stream(client, model, request)
                        try:
                            if response.headers.get("content-type", "").startswith("application/json"):
                                # a server that ignores ``stream``: the whole completion at once
                                completion, whole = await _whole_completion(response, until), True
                            else:
                                _check_event_stream(response)
                                assembler = StreamAssembler()
                                async with contextlib.aclosing(_chunks(response, self.timeout_s, until)) as chunks:
                                    async for chunk in chunks:
                                        for event in _assembled(assembler.feed, chunk):
                                            emitted = True
                                            yield event
                                completion = _assembled(assembler.finish)
                        finally:
                            await response.aclose()
                    else:
                        response = await self._post(client, request, self._body(model, request, stream=False),
                                                    accept="application/json")
                        try:
                            completion, whole = await _whole_completion(response, until), True
                        finally:
                            await response.aclose()
                except Exception as exc:
                    failure = self._classify(exc)
                    if failure is None:
                        raise
            finally:
                self._slots.release_on_behalf_of(slot)
            if completion is not None:
                log.debug("model_call_answered", model=model, attempts=attempt)
                if whole and completion.message.content:
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

    async def _post(self, client: HTTPClient, request: ModelRequest, body: bytes, *, accept: str) -> Response:
        """``POST /chat/completions``: the response whose head arrived with a
        2xx status (closed and raised as ``_StatusError`` otherwise)."""
        started = time.perf_counter()
        response = await client.request("POST", "/chat/completions", headers=self._headers(request, accept),
                                        body=body)
        MODEL_RESPONSE_SECONDS.observe(time.perf_counter() - started)
        if 200 <= response.status < 300:
            return response
        try:
            raw = await response.read(ERROR_BODY_BYTES)
        except (HTTPTimeout, HTTPConnectionError):
            raw = b""
        finally:
            await response.aclose()
        raise _StatusError(response.status, raw, response.headers)

    async def _open_stream(self, client: HTTPClient, model: str, request: ModelRequest) -> Response:
        if self._stream_options_ok:
            try:
                return await self._post(client, request, self._body(model, request, stream=True),
                                        accept="text/event-stream")
            except _StatusError as exc:
                if exc.status != 400 or ("stream_options" not in exc.text() and "include_usage" not in exc.text()):
                    raise
                # An older server that rejects stream_options: go without usage.
                self._stream_options_ok = False
                log.info("model_stream_options_unsupported", base_url=redact_url(self.base_url))
        return await self._post(client, request, self._body(model, request, stream=True), accept="text/event-stream")

    async def _default_model(self, client: HTTPClient) -> str:
        if self._discovered_model:
            return self._discovered_model
        try:
            response = await client.request("GET", "/models", headers=[
                ("Authorization", f"Bearer {self._api_key}"), ("Accept", "application/json")])
            try:
                raw = await response.read(MAX_BODY_BYTES if response.status < 300 else ERROR_BODY_BYTES)
            finally:
                await response.aclose()
            if response.status >= 300:
                raise _StatusError(response.status, raw, response.headers)
            page = _json(raw)
            data = page.get("data") if isinstance(page, dict) else None
            ids = [m["id"] for m in data or () if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]]
        except Exception as exc:
            failure = self._classify(exc)
            if failure is None:
                raise
            raise ProviderError(self._scrub(
                f"no model name configured (set llm.model or the persona's model) and listing the models of "
                f"{self._where()} failed: {failure.what}{self._not_found_hint(failure.status)}"),
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
        """Map a failed attempt to a failure; ``None`` for exceptions that
        are not about the provider (bugs: re-raised as they are)."""
        if isinstance(exc, _CallTimeout):
            return _Failure(f"the answer was still arriving after call_timeout_s={self.call_timeout_s:g}",
                            status=None, retryable=True)
        if isinstance(exc, HTTPTimeout):
            return _Failure(f"no response within timeout_s={self.timeout_s:g}", status=None, retryable=True)
        if isinstance(exc, HTTPConnectionError):
            return _Failure(f"connection error: {exc}", status=None, retryable=True)
        if isinstance(exc, _StatusError):
            status = exc.status
            retryable = status in _RETRY_STATUSES or status >= 500
            return _Failure(
                f"HTTP {status}: {self._cut(self._scrub(exc.message()))}",
                status=status,
                retryable=retryable,
                retry_after_s=parse_retry_after(exc.headers.get("retry-after")) if retryable else None,
            )
        if isinstance(exc, _ServerError):
            return _Failure(f"error from the server: {self._cut(self._scrub(str(exc)))}", status=None,
                            retryable=False)
        if isinstance(exc, (_Malformed, SSEError)):
            return _Failure(f"malformed response: {exc}", status=None, retryable=False)
        return None

    def _backoff_s(self, attempt: int, failure: _Failure) -> float:
        if failure.retry_after_s is not None and failure.status in (429, 503):
            return 0.0  # the shared hold (``rate_limit``) makes this and every other call wait
        if failure.retry_after_s is not None and failure.retry_after_s <= self.backoff_max_s:
            return max(0.0, failure.retry_after_s)
        cap = min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))
        return cap / 2 + random.uniform(0, cap / 2)

    def _where(self) -> str:
        return redact_url(self.base_url) or "the default OpenAI endpoint"

    def _not_found_hint(self, status: int | None) -> str:
        """For a 404 from a base URL whose path does not end in ``/v1``: the likely cause
        (``http://host:8000`` given for ``http://host:8000/v1``), else ``""``."""
        if status != 404 or not self.base_url:
            return ""
        if urlsplit(self.base_url).path.rstrip("/").endswith("/v1"):
            return ""
        return ("; OpenAI-compatible servers usually serve the API under /v1: does llm.base_url "
                "(ONGRID_LLM_BASE_URL) lack it, as in http://HOST:PORT/v1?")

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
            f"model {model!r} at {self._where()}; {attempt} attempt(s), {why}{self._not_found_hint(failure.status)}"
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

    @staticmethod
    def _cut(text: str) -> str:
        return text if len(text) <= _MESSAGE_MAX_CHARS else text[:_MESSAGE_MAX_CHARS] + "…"

    def _scrub(self, text: str) -> str:
        if len(text) > 2000:
            text = text[:2000] + "…"
        if self._api_key and self._api_key != PLACEHOLDER_API_KEY and len(self._api_key) >= 4:
            text = text.replace(self._api_key, "***")
        return text


def _json(raw: bytes | str) -> Any:
    """The server's JSON, decoded; a surrogate it escaped alone (valid JSON, not text that UTF-8,
    the store or a client could carry) becomes U+FFFD.

    Decoded by orjson (a streamed chunk in about half the time, the check below included) where it gives
    what ``json.loads`` gives: text it accepts with no run of 19 or more digits (orjson turns
    an integer past 64 bits into a float) and fewer than 512 brackets (it nests deeper than
    ``json.loads``, which would refuse).  Anything else — what orjson refuses (``NaN``,
    ``1e400``, a surrogate escaped alone, a byte-order mark), a long number, many brackets —
    is decoded by ``json.loads`` as before, errors included."""
    try:
        data = raw.encode() if isinstance(raw, str) else raw
    except UnicodeEncodeError:  # a surrogate in the text itself
        return _json_stdlib(raw)
    if ((len(data) < _DEEP_BRACKETS or data.count(b"[") + data.count(b"{") < _DEEP_BRACKETS)
            and data.translate(_DIGITS_AS_ZERO).find(_LONG_NUMBER) < 0):  # (bytes: translate is fast)
        try:
            return orjson.loads(data)  # (refuses surrogates escaped alone: nothing to replace)
        except orjson.JSONDecodeError:
            pass
    return _json_stdlib(raw)


def _json_stdlib(raw: bytes | str) -> Any:
    """:func:`_json` by ``json.loads`` (what orjson refuses or may decode otherwise)."""
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise _Malformed(f"not JSON: {exc}") from None
    except RecursionError:
        raise _Malformed("JSON nested too deeply") from None
    pattern = _SURROGATE_ESCAPE_BYTES if isinstance(raw, bytes) else _SURROGATE_ESCAPE
    if pattern.search(raw):  # type: ignore[arg-type]
        return _without_lone_surrogates(value)
    return value


def _without_lone_surrogates(value: Any) -> Any:
    """``value`` (decoded JSON) with every surrogate code point in its strings, keys included,
    replaced by U+FFFD; a valid pair was already joined by the decoder into one character.
    Iterative: the JSON may be nested as deep as the decoder allowed."""
    if isinstance(value, str):
        return valid_text(value)
    if not isinstance(value, (dict, list)):
        return value
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in list(node):
                item = node[key]
                if isinstance(item, str):
                    item = valid_text(item)
                elif isinstance(item, (dict, list)):
                    stack.append(item)
                valid_key = valid_text(key) if isinstance(key, str) else key
                if valid_key is not key:
                    del node[key]
                node[valid_key] = item
        else:
            for i, item in enumerate(node):
                if isinstance(item, str):
                    node[i] = valid_text(item)
                elif isinstance(item, (dict, list)):
                    stack.append(item)
    return value


def _assembled(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` of the assembler on data from the server: a shape it
    cannot read (a number where a list belongs, parts nested without end) is
    a malformed response, not a crash."""
    try:
        return fn(*args)
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError) as exc:
        raise _Malformed(f"an answer of an unexpected shape ({type(exc).__name__}: {str(exc)[:200]})") from None


async def _whole_completion(response: Response, until: float = math.inf) -> Completion:
    """A non-streamed ``chat.completion`` body, read (up to MAX_BODY_BYTES, by ``until``, trio
    time: HTTPTimeout after it) and assembled."""
    _check_encoding(response)
    with trio.move_on_at(until) as reading:
        body = await response.read(MAX_BODY_BYTES)
    if reading.cancelled_caught:
        raise _CallTimeout()
    return _assembled(completion_from_response, _json(body))


def _check_encoding(response: Response) -> None:
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise _Malformed(f"a compressed answer (Content-Encoding: {encoding}) that was not asked for")


def _check_event_stream(response: Response) -> None:
    """A streamed answer is ``text/event-stream`` (or says no type at all)."""
    _check_encoding(response)
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in ("", "text/event-stream"):
        raise _Malformed(f"a streamed answer of type {kind!r} (expected text/event-stream)")


async def _chunks(response: Response, silent_s: float = math.inf,
                  until: float = math.inf) -> AsyncGenerator[Any, None]:
    """The decoded JSON of each ``data:`` event up to ``[DONE]`` (or the end
    of the body; what follows ``[DONE]`` is read and dropped, up to 64 KiB
    and 1 s, so the connection can be kept).  An event whose JSON holds ``error``
    raises _ServerError; a stream past MAX_BODY_BYTES, or one that sends no
    ``data:`` event for ``silent_s`` however many other bytes it sends
    (comments, unfinished lines), is refused; one still arriving after
    ``until`` (trio time) is a timeout, however steadily it comes."""
    decoder = SSEDecoder()
    size = 0
    last_event = trio.current_time()
    async with contextlib.aclosing(response.aiter_bytes()) as body:
        async for data in body:
            size += len(data)
            if size > MAX_BODY_BYTES:
                raise _Malformed(f"a streamed answer larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB")
            events = decoder.feed(data)
            now = trio.current_time()
            if now > until:
                raise _CallTimeout()
            if events:
                last_event = now
            elif now - last_event > silent_s:
                raise HTTPTimeout(f"no event within {silent_s:g} s")
            for sse in events:
                if sse.data.startswith("[DONE]"):
                    # the answer is complete: what follows is only read to keep the connection,
                    # briefly; a failure or a body held open just closes it (in Response.aclose)
                    if response.at_end():  # the body's end came with it (the usual case): nothing to wait for
                        return
                    drained = 0
                    with trio.move_on_after(_DRAIN_S):
                        try:
                            async for rest in body:
                                drained += len(rest)
                                if drained > 65536:
                                    break
                        except (HTTPTimeout, HTTPConnectionError):
                            pass
                    return
                yield _chunk(sse.data)
    for sse in decoder.close():
        if not sse.data.startswith("[DONE]"):
            yield _chunk(sse.data)


def _chunk(data: str) -> Any:
    chunk = _json(data)  # text already (the event stream was decoded): no re-encoding for json
    if isinstance(chunk, dict) and chunk.get("error"):
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise _ServerError(" ".join(str(message).split())[:ERROR_BODY_BYTES])
    return chunk


__all__ = ["AGENT_HEADER", "SESSION_HEADER", "OpenAIProvider", "header_value"]
