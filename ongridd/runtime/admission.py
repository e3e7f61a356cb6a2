"""Turn admission: how many coordinator turns run at once (docs/architecture.md §4).

A turn takes a *slot* before it runs.  At most ``max_running`` turns run in
the whole daemon and at most ``max_per_user`` per user; a turn beyond that
waits in a queue of at most ``max_queued`` entries.  The queue is fair:

* per user, first in first out;
* across users, round-robin: when a slot frees, the users with waiting
  turns are visited in turn order, each user's oldest waiting turn is
  admitted and that user goes to the back of the rotation — a user with
  many queued turns cannot starve another.  A user at its own limit is
  skipped (keeping its place) until one of its turns ends.
* one user's waiting turns take at most half of the queue
  (``max_queued_per_user``, at least 1): a user opening thread after thread
  cannot fill the queue so that everyone else is told ``busy``.

Built on Trio primitives only (one :class:`trio.Event` per waiting ticket);
no task of its own.  Everything but :meth:`Ticket.wait` is synchronous, so
the admission decision and the queue bound are atomic.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import trio

from ongridd.errors import Busy
from ongridd.logs import get_logger

log = get_logger(__name__)

#: a queue position is shown again when it is at most this, or when it moved by
#: at least POSITION_STEP of the last shown value (a long queue costs a client
#: a few dozen updates, not one per admission)
POSITION_ALWAYS_SHOWN = 10
POSITION_STEP = 0.1


class Ticket:
    """One turn's place: ``state`` is ``queued``, ``admitted`` or ``released``.

    ``on_position(n)``: called (synchronously, never awaited) with the
    1-based queue position when the ticket is queued and whenever the
    position changes noticeably (see POSITION_ALWAYS_SHOWN/POSITION_STEP);
    an exception it raises is swallowed.  ``waited``: whether it ever
    queued."""

    def __init__(self, admission: TurnAdmission, user_id: str, on_position: Callable[[int], None] | None):
        self._admission = admission
        self.user_id = user_id
        self.on_position = on_position
        self.state = "queued"
        self.waited = False
        self.position = 0
        self._shown = 0
        self._event = trio.Event()

    @property
    def queued(self) -> bool:
        return self.state == "queued"

    async def wait(self) -> None:
        """Return once the ticket is admitted (at once when it already is).

        Cancellation while queued removes the ticket from the queue (it will
        never be admitted); a ticket admitted at the moment of cancellation
        stays admitted — the caller's :meth:`release` frees the slot.
        Raises :class:`Busy` when the admission was closed while queued."""
        if self.state == "queued":
            try:
                await self._event.wait()
            finally:
                if self.state == "queued":
                    self._admission._drop(self)
        if self.state != "admitted":
            raise Busy("the daemon is shutting down; the queued turn was not run")

    def release(self) -> None:
        """Give the slot back (admitted) or leave the queue (queued);
        idempotent.  Frees the slot for the next waiting turn at once."""
        if self.state == "admitted":
            self.state = "released"
            self._admission._free(self)
        elif self.state == "queued":
            self._admission._drop(self)

    def _show(self, position: int) -> None:
        self.position = position
        last = self._shown
        if position == last:
            return
        if last and position > POSITION_ALWAYS_SHOWN and abs(position - last) < POSITION_STEP * last:
            return
        self._shown = position
        if self.on_position is not None:
            try:
                self.on_position(position)
            except Exception:  # a display problem never breaks admission
                log.exception("queue_position_update_failed", user=self.user_id)


class TurnAdmission:
    """The slots and the fair queue.  ``max_running`` ≥ 1, ``max_per_user``
    ≥ 1, ``max_queued`` ≥ 0 (0: no queue — a turn beyond the limits is
    refused at once).  Raises ValueError for other values."""

    def __init__(self, *, max_running: int, max_per_user: int, max_queued: int):
        if max_running < 1 or max_per_user < 1 or max_queued < 0:
            raise ValueError("max_running and max_per_user must be >= 1, max_queued >= 0")
        self.max_running = max_running
        self.max_per_user = max_per_user
        self.max_queued = max_queued
        #: the most waiting turns of one user: half the queue (rounded up), at least 1
        self.max_queued_per_user = max(1, (max_queued + 1) // 2)
        self.running = 0
        self.running_by_user: dict[str, int] = {}
        self._queues: dict[str, deque[Ticket]] = {}
        self._rotation: deque[str] = deque()  # users with queued tickets, in admission order
        self.closed = False

    @property
    def queued(self) -> int:
        """How many tickets wait."""
        return sum(len(q) for q in self._queues.values())

    def enqueue(self, user_id: str, *, on_position: Callable[[int], None] | None = None,
                force: bool = False) -> Ticket:
        """A ticket for one turn of ``user_id``: admitted at once when a slot
        is free and none of the user's turns waits, else queued (and
        ``on_position`` told its place).  Raises :class:`Busy` — nothing
        queued — when the queue already holds ``max_queued`` tickets or
        ``max_queued_per_user`` of this user's (with ``force``: never; for a turn that continues one that just ended) or
        the admission is closed."""
        if self.closed:
            raise Busy("the daemon is shutting down; try again shortly")
        ticket = Ticket(self, user_id, on_position)
        if not self._queues.get(user_id) and self._can_run(user_id):
            self._admit(ticket)
            return ticket
        if not force and self.queued >= self.max_queued:
            raise Busy(f"the daemon is busy: {self.running} turn(s) running and {self.queued} waiting "
                       f"(limits.max_queued_turns={self.max_queued}); try again in a moment")
        if not force and len(self._queues.get(user_id, ())) >= self.max_queued_per_user:
            raise Busy(f"you already have {len(self._queues[user_id])} turn(s) waiting (at most half of "
                       f"limits.max_queued_turns={self.max_queued} per user); try again when one has started")
        ticket.waited = True
        queue = self._queues.setdefault(user_id, deque())
        if not queue:
            self._rotation.append(user_id)
        queue.append(ticket)
        self._positions()
        return ticket

    def refuses(self, user_id: str) -> bool:
        """Whether :meth:`enqueue` for ``user_id`` would raise :class:`Busy` now."""
        if self.closed:
            return True
        if not self._queues.get(user_id) and self._can_run(user_id):
            return False
        return self.queued >= self.max_queued or len(self._queues.get(user_id, ())) >= self.max_queued_per_user

    def close(self) -> None:
        """Admit nothing more (daemon shutdown).  Queued tickets stay until
        their waiters are cancelled or released; running ones are untouched."""
        self.closed = True

    # ---- internals ----------------------------------------------------------
    def _can_run(self, user_id: str) -> bool:
        return (not self.closed and self.running < self.max_running
                and self.running_by_user.get(user_id, 0) < self.max_per_user)

    def _admit(self, ticket: Ticket) -> None:
        ticket.state = "admitted"
        self.running += 1
        self.running_by_user[ticket.user_id] = self.running_by_user.get(ticket.user_id, 0) + 1
        ticket._event.set()

    def _free(self, ticket: Ticket) -> None:
        self.running -= 1
        left = self.running_by_user.get(ticket.user_id, 1) - 1
        if left > 0:
            self.running_by_user[ticket.user_id] = left
        else:
            self.running_by_user.pop(ticket.user_id, None)
        self._dispatch()

    def _drop(self, ticket: Ticket) -> None:
        queue = self._queues.get(ticket.user_id)
        ticket.state = "released"
        if queue is not None and ticket in queue:
            queue.remove(ticket)
            if not queue:
                del self._queues[ticket.user_id]
                self._rotation.remove(ticket.user_id)
        self._positions()

    def _dispatch(self) -> None:
        """Admit waiting tickets round-robin while slots are free."""
        changed = False
        while self.running < self.max_running and not self.closed:
            user = next((u for u in self._rotation if self._can_run(u)), None)
            if user is None:
                break
            queue = self._queues[user]
            self._admit(queue.popleft())
            self._rotation.remove(user)
            if queue:
                self._rotation.append(user)
            else:
                del self._queues[user]
            changed = True
        if changed:
            self._positions()

    def _positions(self) -> None:
        """Tell every queued ticket its place in the round-robin order: the
        k-th waiting turn (from 0) of the user at rotation place r comes
        after every user's first k turns and after turn k of the users
        ahead of it in the rotation."""
        lengths = [len(self._queues[u]) for u in self._rotation]
        if not lengths:
            return
        # in time linear in the queue (this runs on every admission): with
        # at_least[j] the users with j or more waiting turns, every user's
        # first k turns are sum(min(n, k)) = before[k] = at_least[1] + … +
        # at_least[k]; ahead[k] counts the users earlier in the rotation with
        # more than k turns
        longest = max(lengths)
        at_least = [0] * (longest + 1)
        for n in lengths:
            at_least[n] += 1
        for j in range(longest - 1, -1, -1):
            at_least[j] += at_least[j + 1]
        before = [0] * longest
        for k in range(1, longest):
            before[k] = before[k - 1] + at_least[k]
        ahead = [0] * longest
        for user in self._rotation:
            queue = self._queues[user]
            for k, ticket in enumerate(queue):
                ticket._show(before[k] + ahead[k] + 1)
            for k in range(len(queue)):
                ahead[k] += 1


__all__ = ["Ticket", "TurnAdmission"]
