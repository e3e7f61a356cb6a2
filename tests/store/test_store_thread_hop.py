"""The store's thread hop (``run_in_thread``): results, errors, slots, context and cancellation."""

from __future__ import annotations

import contextvars
import threading

import pytest
import trio

from ongridd.store.engine import _Slots, run_in_thread

pytestmark = pytest.mark.trio

WHO = contextvars.ContextVar("WHO", default="nobody")


async def test_runs_in_another_thread_and_returns_the_result() -> None:
    main = threading.get_ident()
    assert await run_in_thread(lambda a, b: (a + b, threading.get_ident() != main), 2, 3, slots=_Slots(1)) == (5, True)


async def test_the_threads_exception_is_raised_in_the_caller() -> None:
    def boom() -> None:
        raise ValueError("bad row")

    with pytest.raises(ValueError, match="bad row"):
        await run_in_thread(boom, slots=_Slots(1))


async def test_the_callers_context_variables_are_seen_in_the_thread() -> None:
    WHO.set("turn-7")
    assert await run_in_thread(WHO.get, slots=_Slots(1)) == "turn-7"


async def test_calls_beyond_the_slots_wait_for_one() -> None:
    slots = _Slots(2)
    running, most = 0, 0
    lock = threading.Lock()
    gate = threading.Event()

    def job() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        gate.wait(5)
        with lock:
            running -= 1

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(lambda: run_in_thread(job, slots=slots))
        await trio.sleep(0.2)
        assert most == 2  # the other three wait for a slot
        gate.set()
    assert most == 2 and running == 0
    assert slots.limiter.borrowed_tokens == 0  # every slot released


async def test_a_cancelled_call_finishes_its_work_and_returns_it() -> None:
    started, release = threading.Event(), threading.Event()
    done: list[str] = []

    def work() -> str:
        started.set()
        release.wait(5)
        done.append("committed")
        return "result"

    got: list[str] = []
    with trio.CancelScope() as scope:
        async def cancel_when_running() -> None:
            await trio.to_thread.run_sync(started.wait, 5)
            threading.Timer(0.1, release.set).start()  # the work ends after the cancellation
            scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_when_running)
            got.append(await run_in_thread(work, slots=_Slots(1)))
            await trio.lowlevel.checkpoint()  # the cancellation arrives here, after the work
            got.append("not reached")
    assert done == ["committed"]
    assert got == ["result"]
    assert scope.cancelled_caught


async def test_cancelled_before_a_slot_the_work_never_runs() -> None:
    slots = _Slots(1)
    slots.limiter.acquire_on_behalf_of_nowait("someone")
    ran: list[int] = []
    with trio.move_on_after(0.1) as scope:
        await run_in_thread(lambda: ran.append(1), slots=slots)
    assert scope.cancelled_caught and ran == []
    assert slots.limiter.borrowed_tokens == 1  # only the one taken above
