"""The concurrent websocket load shared by the row-count load test
(``test_e2e_no_lost_rows.py``) and the serve-path benchmark
(``benchmarks/serve_bench.py``): N sessions connect first (hello →
session, at most 64 handshakes at a time), then each sends one turn, all
at once or spread evenly at a rate, and reads until the turn's ``final``
or ``error`` frame.

Needs trio and trio-websocket only (no pytest): the benchmark imports it
with the repository root on ``sys.path``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import attrs
import trio

#: websocket handshakes in flight at once while the sessions connect
CONNECT_AT_ONCE = 64


@attrs.define
class TurnEnd:
    """How one session's turn ended: its last frame (``final`` or
    ``error``), and when (``trio.current_time()``, seconds) the user
    message was sent and that frame received."""

    frame: dict[str, Any]
    sent: float
    ended: float


async def hello(ws: Any, thread: str) -> dict[str, Any]:
    """Send ``hello`` on ``thread``; returns the ``session`` frame
    (AssertionError if another frame comes first)."""
    await ws.send_message(json.dumps({"type": "hello", "thread": thread}))
    first = json.loads(await ws.get_message())
    assert first["type"] == "session", first
    return first


async def one_turn(ws: Any, text: str) -> dict[str, Any]:
    """Send ``text`` as a user message; returns the turn's ``final`` or
    ``error`` frame (the frames before it are read and dropped)."""
    await ws.send_message(json.dumps({"type": "user_message", "text": text}))
    while True:
        frame = json.loads(await ws.get_message())
        if frame["type"] in ("final", "error"):
            return frame


async def concurrent_turns(ws_url: str, n: int, rate: float, *, prefix: str, connect_timeout_s: float,
                           turns_timeout_s: float = math.inf) -> tuple[dict[int, TurnEnd], float]:
    """Connect ``n`` sessions on threads ``{prefix}0`` … (``TooSlowError``
    after ``connect_timeout_s``), then send turn ``i`` (text ``turn {i}``)
    on each at once (``rate`` 0) or at ``i / rate`` seconds after the first;
    returns each session's :class:`TurnEnd` by index and the seconds from
    the first turn sent to the last answer (``TooSlowError`` after
    ``turns_timeout_s``).  A session whose connection fails fails the whole
    load.  The connections close when every turn has ended."""
    from trio_websocket import open_websocket_url

    ends: dict[int, TurnEnd] = {}
    connected = 0
    all_connected, go, finished = trio.Event(), trio.Event(), trio.Event()
    slots = trio.CapacityLimiter(CONNECT_AT_ONCE)
    start = 0.0

    async def session(i: int) -> None:
        nonlocal connected
        async with slots:  # the connection outlives the slot: entered and left by hand
            cm = open_websocket_url(ws_url)
            ws = await cm.__aenter__()
            await hello(ws, f"{prefix}{i}")
        try:
            connected += 1
            if connected == n:
                all_connected.set()
            await go.wait()
            if rate > 0:
                await trio.sleep_until(start + i / rate)
            sent = trio.current_time()
            frame = await one_turn(ws, f"turn {i}")
            ends[i] = TurnEnd(frame=frame, sent=sent, ended=trio.current_time())
            if len(ends) == n:
                finished.set()
        finally:
            await cm.__aexit__(None, None, None)

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(session, i)
        with trio.fail_after(connect_timeout_s):
            await all_connected.wait()
        start = trio.current_time()
        go.set()
        with trio.fail_after(turns_timeout_s):
            await finished.wait()
    return ends, max(end.ended for end in ends.values()) - start
