"""A strict-FIFO lock for Trio, cheaper than :class:`trio.Lock` on the daemon's hot paths
(every kernel event delivered, every frame written to a chat socket).
"""

from __future__ import annotations

import trio

__all__ = ["FIFOLock"]


class FIFOLock:
    """A strict-FIFO lock: who waits gets it in arrival order, a release handing it straight to
    the first waiter (nobody can take it in between).  :class:`trio.Lock` and
    :class:`trio.StrictFIFOLock` do the same and also track the owner task (a parking-lot
    breaker registered and removed on every acquire, most of their cost, and an error when
    another task releases); every use here releases in ``finally`` in the task that took it,
    so nothing needs that.  Not re-entrant; the holder must release it."""

    __slots__ = ("_held", "_waiters")

    def __init__(self) -> None:
        self._held = False
        self._waiters = trio.lowlevel.ParkingLot()

    def try_acquire(self) -> bool:
        """Take the lock if it is free (no checkpoint); False when it is held."""
        if self._held:
            return False
        self._held = True
        return True

    async def acquire(self) -> None:
        """Take the lock, waiting in line behind earlier waiters (a checkpoint; cancelled while
        waiting, the caller does not get the lock and leaves the line)."""
        if not self._held and not self._waiters:  # as trio.Lock: a cancel point, then a schedule point
            await trio.lowlevel.checkpoint_if_cancelled()
            if not self._held:
                self._held = True
                await trio.lowlevel.cancel_shielded_checkpoint()
                return
        await self._waiters.park()  # woken by release(), the lock already ours

    def release(self) -> None:
        """Give the lock to the first waiter, or free it when nobody waits."""
        if self._waiters:
            self._waiters.unpark()
        else:
            self._held = False
