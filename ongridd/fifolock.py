"""A strict-FIFO lock for Trio, cheaper than :class:`trio.Lock` on the daemon's hot paths
(every kernel event delivered, every frame written to a chat socket).
"""

from __future__ import annotations

import trio

__all__ = ["FIFOLock"]


class FIFOLock:
    """A strict-FIFO lock: who waits gets it in arrival order, a release handing it straight to
    the first waiter (nobody can take it in between).  :class:`trio.Lock` and
    :class:`trio.StrictFIFOLock` do the same and also watch for an owner task that ends while
    holding the lock (a parking-lot breaker registered and removed on every acquire, most of
    their cost); every use here releases in ``finally``, so nothing needs that — a holder
    that ends without releasing would leave its waiters waiting.  Misuse that is cheap to see
    raises ``RuntimeError`` as with trio's locks: taking it again in the task that holds it,
    and a release by a task that does not hold it (a second release included)."""

    __slots__ = ("_owner", "_waiters")

    def __init__(self) -> None:
        self._owner: trio.lowlevel.Task | None = None
        self._waiters = trio.lowlevel.ParkingLot()

    def try_acquire(self) -> bool:
        """Take the lock if it is free (no checkpoint); False when another task holds it."""
        task = trio.lowlevel.current_task()
        if self._owner is not None:
            if self._owner is task:
                raise RuntimeError("this task already holds the FIFOLock (it is not re-entrant)")
            return False
        self._owner = task
        return True

    async def acquire(self) -> None:
        """Take the lock, waiting in line behind earlier waiters (a checkpoint; cancelled while
        waiting, the caller does not get the lock and leaves the line)."""
        task = trio.lowlevel.current_task()
        if self._owner is task:
            raise RuntimeError("this task already holds the FIFOLock (it is not re-entrant)")
        if self._owner is None and not self._waiters:  # as trio.Lock: a cancel point, then a schedule point
            await trio.lowlevel.checkpoint_if_cancelled()
            if self._owner is None:
                self._owner = task
                await trio.lowlevel.cancel_shielded_checkpoint()
                return
        await self._waiters.park()  # woken by release(), the lock already ours

    def release(self) -> None:
        """Give the lock to the first waiter, or free it when nobody waits.  ``RuntimeError``
        when the calling task does not hold it."""
        if self._owner is not trio.lowlevel.current_task():
            raise RuntimeError("a task that does not hold the FIFOLock released it")
        if self._waiters:
            (self._owner,) = self._waiters.unpark()
        else:
            self._owner = None
