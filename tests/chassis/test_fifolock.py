"""The strict-FIFO lock (``ongridd.fifolock.FIFOLock``): strict FIFO, a
release hands the lock to the first waiter, a waiter cancelled leaves the line."""

from __future__ import annotations

import trio
import trio.testing

from ongridd.fifolock import FIFOLock


async def _free_for_another_task(lock: FIFOLock) -> bool:
    """Whether another task could take ``lock`` now (it gives it back at once)."""
    got = False

    async def other() -> None:
        nonlocal got
        got = lock.try_acquire()
        if got:
            lock.release()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
    return got


async def test_waiters_get_the_lock_in_arrival_order_and_one_at_a_time():
    lock = FIFOLock()
    order: list[int] = []
    inside = 0

    async def deliver(i: int) -> None:
        nonlocal inside
        if not lock.try_acquire():
            await lock.acquire()
        try:
            inside += 1
            assert inside == 1
            order.append(i)
            await trio.sleep(0.001 * (5 - i % 5))  # later arrivals would overtake a sleeper
            inside -= 1
        finally:
            lock.release()

    assert lock.try_acquire()
    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(deliver, i)
            await trio.testing.wait_all_tasks_blocked()  # each one in line before the next starts
        lock.release()
    assert order == list(range(20))
    assert lock.try_acquire()  # free again once the line is empty


async def test_a_waiter_cancelled_leaves_the_line_and_the_lock_goes_to_the_next():
    lock = FIFOLock()
    assert lock.try_acquire()
    got: list[str] = []

    async def wait_for_it(name: str, scope: trio.CancelScope | None = None) -> None:
        with scope or trio.CancelScope():
            await lock.acquire()
            got.append(name)
            lock.release()

    cancelled = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_for_it, "first", cancelled)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(wait_for_it, "second")
        await trio.testing.wait_all_tasks_blocked()
        cancelled.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert got == []  # still held
        lock.release()
    assert got == ["second"]
    assert await _free_for_another_task(lock)


async def test_acquire_of_a_free_lock_is_a_checkpoint_that_takes_it():
    lock = FIFOLock()
    with trio.testing.assert_checkpoints():
        await lock.acquire()
    assert not await _free_for_another_task(lock)
    lock.release()
    assert await _free_for_another_task(lock)


async def test_a_release_hands_the_lock_over_before_anyone_can_barge_in():
    lock = FIFOLock()
    assert lock.try_acquire()
    got: list[str] = []

    async def waiter() -> None:
        await lock.acquire()
        got.append("waiter")
        lock.release()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        lock.release()
        assert not lock.try_acquire()  # the waiter owns it already, though it has not run yet
    assert got == ["waiter"]


async def test_misuse_raises_as_with_trio_locks():
    import pytest

    lock = FIFOLock()
    assert lock.try_acquire()
    with pytest.raises(RuntimeError, match="not re-entrant"):
        lock.try_acquire()
    with pytest.raises(RuntimeError, match="not re-entrant"):
        await lock.acquire()
    lock.release()
    with pytest.raises(RuntimeError, match="does not hold"):
        lock.release()  # a second release

    async def take_and_keep() -> None:
        assert lock.try_acquire()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take_and_keep)
    with pytest.raises(RuntimeError, match="does not hold"):
        lock.release()  # another task's lock
