"""``context.chat``: the small runtime API channel bridges drive turns with.

The same calls the chat socket makes (open the thread of a user, subscribe
to its frames, submit a message, stop), plus what a bridge needs around
them: :meth:`ChatAPI.claim_event` (platform event-id dedup kept in the
database for 10 minutes) and :meth:`ChatAPI.spawn` (run a task in the
daemon's nursery, e.g. the relay that edits a placeholder message while the
turn runs — a route handler must answer the platform at once).

Frames are those of the chat socket (``token``, ``interim``, ``tool``,
``agent_tile``, ``agent_result``, then one ``final`` or ``error`` ending the
turn).  Every turn a bridge starts records its ``origin`` (``platform``,
``im_user``, ``conversation``) in ``turn_origins``.

Before the daemon binds it (``bind``) — e.g. ``ongrid plugins list`` — every
call raises :class:`ongridd.errors.OngridError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

from ongridd.errors import OngridError
from ongridd.logs import get_logger

log = get_logger(__name__)

END_FRAMES = ("final", "error")
MAX_TEXT_CHARS = 32 * 1024
MAX_THREAD_CHARS = 128


@attrs.frozen(kw_only=True)
class Origin:
    """Where a turn came from: ``platform`` (``slack``…), ``im_user`` (the
    platform's user id) and ``conversation`` (channel/chat + thread)."""

    platform: str
    im_user: str
    conversation: str

    @classmethod
    def coerce(cls, value: Any) -> Origin:
        if isinstance(value, Origin):
            return value
        if isinstance(value, Mapping):
            try:
                return cls(platform=str(value["platform"]), im_user=str(value["im_user"]),
                           conversation=str(value["conversation"]))
            except KeyError as exc:
                raise ValueError(f"origin: missing {exc.args[0]!r}") from None
        raise ValueError(f"origin: expected an Origin or a mapping, got {type(value).__name__}")


class ChatTurn:
    """A turn started by :meth:`ChatAPI.start_turn`, already subscribed.

    ``session_id``, ``thread``; ``interjected``: True when a turn was already
    running in the thread and the text was handed to it.  Iterate it for
    frames (``async for frame in turn``); the iteration ends after the
    turn's ``final`` or ``error`` frame, or when the hub dropped this
    subscriber (it fell too far behind).  :meth:`close` unsubscribes (also
    ``async with turn``)."""

    def __init__(self, *, session_id: str, thread: str, interjected: bool, stack: contextlib.ExitStack,
                 initial: list[dict], channel: trio.MemoryReceiveChannel):
        self.session_id = session_id
        self.thread = thread
        self.interjected = interjected
        self._stack = stack
        self._initial = list(initial)
        self._channel = channel
        self._ended = False

    def __aiter__(self) -> ChatTurn:
        return self

    async def __anext__(self) -> dict:
        if self._ended:
            raise StopAsyncIteration
        if self._initial:
            frame = self._initial.pop(0)
        else:
            try:
                frame = await self._channel.receive()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                self._ended = True
                raise StopAsyncIteration from None
        if frame.get("type") in END_FRAMES:
            self._ended = True
        return frame

    def close(self) -> None:
        self._stack.close()

    async def __aenter__(self) -> ChatTurn:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()


class ChatAPI:
    """Shared by every plugin context; bound to the runtime by the daemon."""

    def __init__(self, *, store: Any = None):
        self._store = store
        self._runtime: Any = None
        self._nursery: trio.Nursery | None = None
        #: :meth:`spawn` tasks not yet ended, and an event set when none is left (:meth:`settle`)
        self._running = 0
        self._none_running = trio.Event()
        self._none_running.set()

    def bind(self, runtime: Any, nursery: trio.Nursery) -> None:
        """Called by the daemon once the runtime serves; ``nursery`` runs :meth:`spawn` tasks."""
        self._runtime = runtime
        self._nursery = nursery

    @property
    def ready(self) -> bool:
        return self._runtime is not None and self._nursery is not None

    def _need(self) -> Any:
        if not self.ready:
            raise OngridError("the chat API is not available here (the daemon is not running)")
        return self._runtime

    def _locale(self, locale: str | None) -> str | None:
        from ongridd.personas.prompt import normalize_locale

        if locale is None:
            return None
        return normalize_locale(locale)

    async def start_turn(self, *, user: str, thread: str, text: str, locale: str | None = None,
                         origin: Any) -> ChatTurn:
        """Start a turn of Ongrid ``user`` in ``thread`` with ``text`` (or hand
        it to the thread's running turn).  ``locale``: e.g. ``fr`` (an
        unusable tag is ignored; None: ``server.default_locale``).
        ``origin``: an :class:`Origin` or ``{platform, im_user, conversation}``.

        Returns a subscribed :class:`ChatTurn` (close it).  Raises ValueError
        for bad arguments, OngridError when the daemon is not running,
        StoreError when the database fails, :class:`~ongridd.errors.Busy`
        when the daemon is shutting down or its turn queue is full (nothing was run or
        stored; no origin recorded)."""
        runtime = self._need()
        origin = Origin.coerce(origin)
        if not isinstance(user, str) or not user.strip():
            raise ValueError("user: expected a non-empty Ongrid user name")
        if not isinstance(thread, str) or not (0 < len(thread) <= MAX_THREAD_CHARS):
            raise ValueError(f"thread: expected 1..{MAX_THREAD_CHARS} characters")
        if not isinstance(text, str) or not text.strip():
            raise ValueError("text: expected a non-empty message")
        text = text[:MAX_TEXT_CHARS]
        if locale is None:
            locale = getattr(getattr(runtime.config, "server", None), "default_locale", None)
        # held while the turn is set up: a refused turn (Busy) of a new conversation leaves no row
        session_id, resumed = await runtime.open_thread(user_id=user, thread=thread, hold=True)
        stack = contextlib.ExitStack()
        ticket = None
        handed = False  # submit() owns the ticket once called (it releases it on its own errors)
        try:
            # subscribed first: the queue position the reservation publishes is this turn's
            initial, channel = stack.enter_context(runtime.subscribe(session_id))
            interjected = session_id in runtime.turns
            # a new turn takes its place in the queue before anything is stored: refused (Busy),
            # it records no origin either
            ticket = None if interjected else runtime.reserve_turn(session_id, user_id=user)
            if not interjected:  # the turn's user message will take the next seq
                await runtime.writer.flush(session_id, timeout_s=10.0)
            await runtime.store.channel_store.record_origin(
                session_id=session_id, platform=origin.platform, im_user=origin.im_user,
                conversation=origin.conversation, predict_seq=not interjected)
            interjected = session_id in runtime.turns
            if not interjected:  # the end of an earlier turn nobody saw is not this turn's end
                initial = [f for f in initial if f.get("type") not in END_FRAMES]
            handed = True
            await runtime.submit(session_id, user_id=user, text=text, locale=self._locale(locale), ticket=ticket)
        except BaseException:
            stack.close()
            if ticket is not None and not handed:
                ticket.release()
            raise
        finally:  # a started turn (or this subscription) keeps the row; an empty new one goes
            await runtime.release_thread(session_id, created=not resumed)
        log.info("channel_turn", platform=origin.platform, user=user, thread=thread, session_id=session_id,
                 interjected=interjected)
        return ChatTurn(session_id=session_id, thread=thread, interjected=interjected, stack=stack,
                        initial=initial, channel=channel)

    @contextlib.contextmanager
    def subscribe(self, session_id: str):
        """``with chat.subscribe(session_id) as (initial_frames, channel)``: the
        session's frames, as the chat socket gets them."""
        with self._need().subscribe(session_id) as pair:
            yield pair

    async def stop(self, session_id: str, *, user: str, task_id: str | None = None) -> bool:
        """Stop the thread's running turn (or one worker, ``task_id``) on
        behalf of the Ongrid ``user``.  Returns False when nothing was
        running, the session is unknown, or it is not ``user``'s."""
        from ongridd.errors import NotFound, TaskStateError

        runtime = self._need()
        row = await runtime.store.get_session(session_id)
        if row is None or row["user_id"] != user:
            return False
        try:
            await runtime.stop(session_id, user_id=user, task_id=task_id)
        except (NotFound, TaskStateError):
            return False
        return True

    async def stop_thread(self, *, user: str, thread: str) -> bool:
        """Stop the running turn of (``user``, ``thread``); False when
        nothing was running.  A thread that does not exist yet is not left
        behind (its row is made only to look and deleted again)."""
        from ongridd.errors import NotFound, TaskStateError

        runtime = self._need()
        session_id, resumed = await runtime.open_thread(user_id=user, thread=thread, hold=True)
        try:
            await runtime.stop(session_id, user_id=user)
        except (NotFound, TaskStateError):
            return False
        finally:
            await runtime.release_thread(session_id, created=not resumed)
        return True

    def running(self, session_id: str) -> bool:
        """Whether a turn is running in the session."""
        return session_id in self._need().turns

    async def claim_event(self, platform: str, event_id: str) -> bool:
        """True the first time the platform event id is seen in 10 minutes
        (across restarts); False for a retry, which must start nothing."""
        return await self._need().store.channel_store.claim_event(platform, event_id)

    async def origins(self, session_id: str) -> list[dict]:
        """The recorded origins of a session's turns (oldest first)."""
        return await self._need().store.channel_store.list_origins(session_id)

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str | None = None) -> None:
        """Run ``fn(*args)`` in the daemon's nursery (cancelled at shutdown).
        An exception in it is logged, never propagated (the daemon stays up)."""
        self._need()
        assert self._nursery is not None

        async def guarded() -> None:
            try:
                await fn(*args)
            except Exception:
                log.exception("plugin_task_failed", task=name or getattr(fn, "__name__", "task"))
            finally:
                self._running -= 1
                if not self._running:
                    self._none_running.set()

        if not self._running:
            self._none_running = trio.Event()
        self._running += 1
        self._nursery.start_soon(guarded, name=name)

    async def settle(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` seconds for the :meth:`spawn` tasks to end — at shutdown, once the
        turns are drained, so a bridge's relay tells its chat how its turn ended before the daemon
        cancels it.  Returns how many were still running (then cancelled with the nursery).
        Cancellation: only the wait is cancelled."""
        with trio.move_on_after(timeout_s):
            await self._none_running.wait()
        return self._running
