"""Turn admission (ongridd/runtime/admission.py): limits, the fair queue,
cancellation; and the provider's shared rate-limit hold
(ongridd/llm/limiter.py).  docs/architecture.md §4 Load."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
import trio
import trio.testing

from ongridd.errors import Busy
from ongridd.llm.limiter import RETRY_AFTER_MAX_S, RateLimitHold, parse_retry_after
from ongridd.runtime.admission import TurnAdmission


def test_limits_and_busy() -> None:
    adm = TurnAdmission(max_running=3, max_per_user=2, max_queued=2)
    a1, a2 = adm.enqueue("a"), adm.enqueue("a")
    assert (a1.state, a2.state) == ("admitted", "admitted")
    a3 = adm.enqueue("a")  # per-user limit
    assert a3.queued
    b1 = adm.enqueue("b")  # global slot 3 is free
    assert b1.state == "admitted"
    b2 = adm.enqueue("b")  # global limit
    assert b2.queued and adm.queued == 2
    with pytest.raises(Busy, match="max_queued_turns=2"):
        adm.enqueue("c")
    assert adm.queued == 2 and adm.running == 3  # the refused one left nothing behind


def test_round_robin_across_users_fifo_per_user() -> None:
    adm = TurnAdmission(max_running=1, max_per_user=1, max_queued=100)
    first = adm.enqueue("a")
    a_tickets = [adm.enqueue("a") for _ in range(5)]
    b_tickets = [adm.enqueue("b") for _ in range(2)]
    order = []
    running = first
    for _ in range(7):
        running.release()
        running = next(t for t in a_tickets + b_tickets if t.state == "admitted")
        order.append(("a", a_tickets.index(running)) if running in a_tickets else ("b", b_tickets.index(running)))
    # b is not starved by a's five waiting turns; each user's turns in order
    assert order == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("a", 3), ("a", 4)]


def test_positions_follow_round_robin_and_are_bounded() -> None:
    shown: dict[str, list[int]] = {}
    adm = TurnAdmission(max_running=1, max_per_user=1, max_queued=500)
    head = adm.enqueue("x")
    tickets = []
    for i in range(200):
        key = f"a{i}"
        tickets.append(adm.enqueue("a", on_position=lambda n, key=key: shown.setdefault(key, []).append(n)))
    b = adm.enqueue("b", on_position=lambda n: shown.setdefault("b", []).append(n))
    assert tickets[0].position == 1 and b.position == 2 and tickets[1].position == 3
    assert shown["b"] == [2]
    # drain the queue: every ticket saw its position fall to 1, with few updates
    current = head
    while True:
        current.release()
        nxt = [t for t in tickets + [b] if t.state == "admitted"]
        if not nxt:
            break
        current = nxt[0]
    last = shown["a199"]
    assert last[0] == 200 and last[-1] == 1  # b joining moved it to 201: too small a change to show
    assert last == sorted(last, reverse=True)
    assert len(last) < 60  # not one update per admission (200)


def test_positions_are_the_round_robin_places_for_any_queue() -> None:
    """The k-th waiting turn (from 0) of the user at rotation place r comes
    after every user's first k turns and after turn k of the users ahead of
    it: checked against that rule for queues of many shapes."""
    rng = random.Random(7)
    for _ in range(300):
        adm = TurnAdmission(max_running=1, max_per_user=1, max_queued=1000)
        adm.enqueue("running")
        users = [f"u{i}" for i in range(rng.randint(1, 6))]
        for _ in range(rng.randint(1, 30)):
            adm.enqueue(rng.choice(users))
        rotation = list(adm._rotation)
        lengths = [len(adm._queues[u]) for u in rotation]
        for r, user in enumerate(rotation):
            for k, ticket in enumerate(adm._queues[user]):
                ahead = sum(min(n, k) for n in lengths) + sum(1 for n in lengths[:r] if n > k)
                assert ticket.position == ahead + 1, (lengths, r, k)


async def test_cancel_while_queued_never_runs() -> None:
    adm = TurnAdmission(max_running=1, max_per_user=1, max_queued=10)
    holder = adm.enqueue("a")
    waiter = adm.enqueue("a")
    after = adm.enqueue("a")
    with trio.move_on_after(0.01) as scope:
        await waiter.wait()
    assert scope.cancelled_caught
    assert waiter.state == "released" and adm.queued == 1
    holder.release()
    assert after.state == "admitted" and waiter.state == "released"
    await after.wait()  # returns at once
    after.release()
    assert adm.running == 0 and adm.queued == 0


async def test_waiters_wake_in_order(autojump_clock: trio.testing.MockClock) -> None:
    adm = TurnAdmission(max_running=2, max_per_user=2, max_queued=50)
    started: list[int] = []
    peak = 0

    async def turn(i: int) -> None:
        nonlocal peak
        ticket = adm.enqueue("u")
        try:
            await ticket.wait()
            started.append(i)
            peak = max(peak, adm.running)
            await trio.sleep(1)
        finally:
            ticket.release()

    async with trio.open_nursery() as nursery:
        for i in range(10):
            nursery.start_soon(turn, i)
            await trio.lowlevel.checkpoint()
    # two slots: turns start in pairs, first come first served
    assert [sorted(started[i:i + 2]) for i in range(0, 10, 2)] == [[i, i + 1] for i in range(0, 10, 2)]
    assert peak == 2 and adm.running == 0


async def test_close_admits_nothing_more() -> None:
    adm = TurnAdmission(max_running=1, max_per_user=1, max_queued=10)
    holder = adm.enqueue("a")
    waiter = adm.enqueue("b")
    adm.close()
    holder.release()
    assert waiter.queued
    with pytest.raises(Busy):
        adm.enqueue("c")


def test_parse_retry_after() -> None:
    now = datetime(2026, 10, 21, 7, 28, 0, tzinfo=UTC)
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now=now) == 30.0
    assert parse_retry_after(format_datetime(now - timedelta(seconds=30), usegmt=True), now=now) == 0.0
    assert parse_retry_after("86400") == RETRY_AFTER_MAX_S
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None and parse_retry_after("") is None
    assert parse_retry_after("nan") is None
    assert parse_retry_after("1e400") == parse_retry_after("9" * 5000) == RETRY_AFTER_MAX_S  # past a float
    assert parse_retry_after("-5") == parse_retry_after("-inf") == 0.0
    assert parse_retry_after("Wed, 21 Oct 9999 07:28:00 GMT", now=now) == RETRY_AFTER_MAX_S
    assert parse_retry_after("Mon, 99 Foo 2026 99:99:99 GMT") is None and parse_retry_after("\x00") is None


async def test_hold_is_shared(autojump_clock: trio.testing.MockClock) -> None:
    hold = RateLimitHold()
    starts: list[tuple[str, float]] = []

    async def call(name: str) -> None:
        await hold.wait()
        starts.append((name, trio.current_time()))

    t0 = trio.current_time()
    hold.hold(5)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, "a")
        nursery.start_soon(call, "b")
        await trio.sleep(1)
        hold.hold(2)  # a shorter hold does not shorten the one in place
    assert sorted(n for n, _ in starts) == ["a", "b"]
    assert all(t - t0 >= 5 for _, t in starts)
    assert await hold.wait() == 0.0


def test_one_user_cannot_fill_the_queue() -> None:
    """A user's waiting turns take at most half the queue: another user
    still gets a place, and the first is told why it is refused."""
    adm = TurnAdmission(max_running=1, max_per_user=1, max_queued=5)
    assert adm.max_queued_per_user == 3
    running = adm.enqueue("a")
    waiting = [adm.enqueue("a") for _ in range(3)]
    assert all(t.queued for t in waiting) and adm.refuses("a") and not adm.refuses("b")
    with pytest.raises(Busy, match="you already have 3 turn"):
        adm.enqueue("a")
    assert adm.enqueue("a", force=True).queued  # a turn continuing one that just ended is never refused
    b = adm.enqueue("b")
    assert b.queued and adm.queued == 5
    with pytest.raises(Busy, match="max_queued_turns=5"):
        adm.enqueue("c")
    running.release()
    waiting[0].release()
    assert TurnAdmission(max_running=1, max_per_user=1, max_queued=1).max_queued_per_user == 1
