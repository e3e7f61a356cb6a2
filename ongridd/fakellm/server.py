"""The scripted model server: an OpenAI-compatible test double (docs/architecture.md §16).

It never pretends to be a real model: the model id is
``ongrid-scripted-model`` and every body says ``system_fingerprint:
ongrid-scripted-model``.

Endpoints (base URL ``http://HOST:PORT/v1``):

* ``POST /v1/chat/completions`` — non-streaming and SSE streaming.  The
  persona is the ``X-Ongrid-Agent`` header (``default`` when absent), the
  session the ``X-Ongrid-Session`` header (``""`` when absent); both are
  percent-decoded (the provider percent-encodes non-ASCII names).  Every call
  takes the next step of that (persona, session) cursor — a failed step
  included.  A persona missing from the script or a list used up answers
  HTTP 400 naming the persona.  A malformed body answers 400 without taking
  a step.
* ``GET /v1/models`` — one model, ``ongrid-scripted-model``.

In-process use: ``async with open_fake_llm(script) as fake:`` gives a
:class:`FakeLLM` with ``fake.base_url`` (ends with ``/v1``) and
``fake.requests`` (a :class:`RecordedRequest` per chat-completion call, in
arrival order); ``await fake.wait_requests(n)`` waits until ``n`` have
arrived.  Or run :func:`serve_fake_llm` in a nursery with ``nursery.start``.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import unquote

import attrs
import trio
from quart import Response, request
from quart_trio import QuartTrio

from ongridd.errors import leaf_exceptions
from ongridd.fakellm.replies import (
    completion_body,
    estimate_usage,
    make_reply,
    stream_bodies,
)
from ongridd.fakellm.script import MissingVariable, Script, Step, coerce_script
from ongridd.logs import get_logger

MODEL_ID = "ongrid-scripted-model"
AGENT_HEADER = "X-Ongrid-Agent"
SESSION_HEADER = "X-Ongrid-Session"
_SECRET_HEADERS = frozenset({"authorization", "api-key", "x-api-key", "proxy-authorization"})

log = get_logger("ongridd.fakellm")


@attrs.define(kw_only=True)
class RecordedRequest:
    """One ``POST /v1/chat/completions`` as received.

    ``agent``/``session``: the decoded headers (``None`` when the header was
    absent).  ``headers``: every request header (lower-case names;
    credentials such as ``authorization`` are kept as ``***``).
    ``body``: the parsed JSON body (``None`` if it was not JSON).  ``step``:
    the index of the step it took (``None`` when it took none).  ``status``:
    the HTTP status answered (0 while the answer is pending, e.g. during a
    ``delay_s``).
    """

    agent: str | None
    session: str | None
    headers: dict[str, str]
    body: Any
    step: int | None = None
    status: int = 0


def _error(status: int, message: str, kind: str = "invalid_request_error") -> tuple[dict[str, Any], int]:
    return {"error": {"message": message, "type": kind, "param": None, "code": "ongrid_scripted_model"}}, status


class FakeLLM:
    """The scripted model: script, per-session cursors, request log and the
    quart-trio app.  ``env``: where ``${NAME}`` is looked up (default: the
    process environment, read when each step is answered).  ``record``: a
    file to which every chat-completion request is appended once answered,
    as one JSON line ``{agent, session, headers, body, step, status}``
    (credential headers as ``***``); opening it raises OSError."""

    def __init__(self, script: Script, *, env: Mapping[str, str] | None = None,
                 record: str | os.PathLike[str] | None = None) -> None:
        self.script = script
        self.env = env
        self._record = open(record, "a", encoding="utf-8") if record is not None else None  # noqa: SIM115
        self.requests: list[RecordedRequest] = []
        self.base_url: str | None = None
        self._cursors: dict[tuple[str, str], int] = {}
        self._arrivals = trio.lowlevel.ParkingLot()
        self._ids = itertools.count(1)
        self.app = self._build_app()

    # -- state ------------------------------------------------------------

    def cursor(self, persona: str, session: str = "") -> int:
        """How many steps the (persona, session) cursor has taken."""
        return self._cursors.get((persona, session), 0)

    async def wait_requests(self, count: int) -> None:
        """Wait until at least ``count`` chat-completion requests arrived.
        Cancellation: just stops waiting."""
        while len(self.requests) < count:
            await self._arrivals.park()

    def take_step(self, persona: str, session: str) -> Step | str:
        """Advance the cursor of (persona, session): the step, or an error
        message when the persona is missing or its list is used up."""
        steps = self.script.personas.get(persona)
        if steps is None:
            known = ", ".join(sorted(self.script.personas)) or "none"
            return f"persona {persona!r} is not in the script {self.script.source} (personas: {known})"
        taken = self._cursors.get((persona, session), 0)
        if taken >= len(steps):
            return (
                f"the script for persona {persona!r} is used up: it has {len(steps)} step(s) and "
                f"session {session!r} asked for step {taken} (every model call takes a step, retries included)"
            )
        self._cursors[(persona, session)] = taken + 1
        return steps[taken]

    # -- HTTP -------------------------------------------------------------

    def _build_app(self) -> Any:
        app = QuartTrio("ongrid-fake-llm")
        app.config["RESPONSE_TIMEOUT"] = None
        app.config["BODY_TIMEOUT"] = None
        app.config["MAX_CONTENT_LENGTH"] = 256 * 1024 * 1024  # long histories are fine for a test double

        @app.get("/v1/models")
        async def models() -> Any:
            return {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "ongrid"}]}

        @app.post("/v1/chat/completions")
        async def chat_completions() -> Any:
            raw = await request.get_data()
            agent_h, session_h = request.headers.get(AGENT_HEADER), request.headers.get(SESSION_HEADER)
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            record = RecordedRequest(
                agent=unquote(agent_h) if agent_h is not None else None,
                session=unquote(session_h) if session_h is not None else None,
                headers={k.lower(): ("***" if k.lower() in _SECRET_HEADERS else v) for k, v in request.headers.items()},
                body=body,
            )
            self.requests.append(record)
            self._arrivals.unpark_all()
            answer = await self._answer(record)
            status = answer[1] if isinstance(answer, tuple) else answer.status_code
            record.status = status
            log.info("fake_llm_call", agent=record.agent, session=record.session, step=record.step, status=status)
            self._write_record(record)
            return answer

        return app

    def _write_record(self, record: RecordedRequest) -> None:
        if self._record is None:
            return
        line = json.dumps(attrs.asdict(record), ensure_ascii=False, default=str)
        self._record.write(line + "\n")
        self._record.flush()

    def close(self) -> None:
        """Close the record file (idempotent)."""
        if self._record is not None:
            self._record.close()
            self._record = None

    async def _answer(self, record: RecordedRequest) -> Any:
        body = record.body
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "the body must be a JSON object with a 'messages' list (no step was taken)")
        persona = record.agent if record.agent is not None else "default"
        step = self.take_step(persona, record.session or "")
        if isinstance(step, str):
            return _error(400, step)
        record.step = step.index
        if step.delay_s:
            await trio.sleep(step.delay_s)
        if step.http_status is not None:
            kind = "rate_limit_error" if step.http_status == 429 else (
                "server_error" if step.http_status >= 500 else "invalid_request_error"
            )
            body, status = _error(step.http_status, f"scripted HTTP {step.http_status} ({step.where})", kind)
            if step.retry_after is not None:
                return body, status, {"Retry-After": step.retry_after}
            return body, status
        env = self.env if self.env is not None else os.environ
        try:
            reply = make_reply(step, body["messages"], env)
        except MissingVariable as exc:
            return _error(400, str(exc))
        requested = body.get("model")
        model = requested if isinstance(requested, str) and requested else MODEL_ID
        completion_id = f"chatcmpl-scripted-{next(self._ids)}"
        created = int(time.time())
        usage = estimate_usage(body["messages"], reply, step.usage)
        if not body.get("stream"):
            return completion_body(reply, completion_id=completion_id, model=model, created=created, usage=usage), 200
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        chunks = list(
            stream_bodies(
                reply, completion_id=completion_id, model=model, created=created,
                usage=usage if include_usage else None,
            )
        )

        async def events() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return Response(
            events(), status=200, content_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    # -- serving ----------------------------------------------------------

    async def serve(
        self, *, host: str = "127.0.0.1", port: int = 0, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled.  Calls ``task_status.started(base_url)``
        once listening, with the real bound port (``http://HOST:PORT/v1``).
        Raises ``OSError`` if the address cannot be bound.  Cancellation
        stops the server at once (open streams are cut)."""
        from hypercorn.config import Config as HypercornConfig
        from hypercorn.trio import serve

        config = HypercornConfig()
        config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
        config.accesslog = None
        config.loglevel = "WARNING"
        config.graceful_timeout = 1.0
        # keep idle connections longer than any client's pool does, and never close one after N
        # requests: a server-side close racing a client's reuse of that connection looks like a
        # model failure ("server disconnected") to a caller that does not retry
        config.keep_alive_timeout = 75.0
        config.keep_alive_max_requests = 2**31
        # a burst of hundreds of connections at once (load tests): hypercorn's default backlog of
        # 100 overflows and the kernel resets connections the client thinks are open
        config.backlog = 4096

        async def run(task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
            await serve(self.app, config, task_status=task_status, mode="asgi")

        bind_error: OSError | None = None
        async with trio.open_nursery() as nursery:
            try:
                binds = await nursery.start(run)
            except BaseExceptionGroup as group:
                # hypercorn binds inside its own nurseries: unwrap a plain
                # "cannot bind" so callers can catch OSError.
                bind_error = _sole_os_error(group)
                if bind_error is None:
                    raise
            else:
                self.base_url = binds[0].rstrip("/") + "/v1"
                log.info("fake_llm_listening", base_url=self.base_url, personas=sorted(self.script.personas))
                task_status.started(self.base_url)
        if bind_error is not None:
            raise bind_error


def _sole_os_error(group: BaseExceptionGroup) -> OSError | None:
    leaves = leaf_exceptions(group)
    if len(leaves) == 1 and isinstance(leaves[0], OSError):
        return leaves[0]
    return None


async def serve_fake_llm(
    script: Script | FakeLLM | Mapping[str, Any] | str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the scripted model until cancelled.

    ``script``: a :class:`Script`, a mapping, a YAML path, or a ready
    :class:`FakeLLM` (to keep access to its ``requests``).  Use with
    ``base_url = await nursery.start(serve_fake_llm, script)``; the base URL
    ends with ``/v1`` and carries the real port when ``port`` is 0.  Raises
    :class:`~ongridd.fakellm.script.ScriptError` for a bad script before
    listening, ``OSError`` when the address cannot be bound.
    """
    fake = script if isinstance(script, FakeLLM) else FakeLLM(coerce_script(script))
    await fake.serve(host=host, port=port, task_status=task_status)


@asynccontextmanager
async def open_fake_llm(
    script_or_path: Script | Mapping[str, Any] | str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[FakeLLM]:
    """Run the scripted model for the duration of the block.

    Yields the :class:`FakeLLM` once it listens: ``.base_url`` (``.../v1``),
    ``.requests`` (every chat-completion call received), ``.wait_requests``.
    ``env`` overrides where ``${NAME}`` is looked up (default: the process
    environment).  Leaving the block stops the server.  Raises
    :class:`~ongridd.fakellm.script.ScriptError` for a bad script and
    ``OSError`` when the address cannot be bound.
    """
    fake = FakeLLM(coerce_script(script_or_path), env=env)
    bind_error: OSError | None = None
    async with trio.open_nursery() as nursery:
        try:
            await nursery.start(functools.partial(fake.serve, host=host, port=port))
        except OSError as exc:
            bind_error = exc  # raised outside the nursery, so it is not wrapped in a group
        else:
            try:
                yield fake
            finally:
                nursery.cancel_scope.cancel()
    if bind_error is not None:
        raise bind_error
