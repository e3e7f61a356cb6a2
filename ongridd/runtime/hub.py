"""Per-session event fan-out to any number of subscribers.

Publishing never blocks and never fails: a subscriber whose buffer is full
(a stuck client) is dropped, so no client can disturb a turn.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import trio

SUBSCRIBER_BUFFER = 16384  # frames; a 256 KB answer streams as 16,384 token frames
#: turn-ending frames kept for threads nobody was attached to, at most (oldest dropped first)
MAX_UNDELIVERED = 256
#: and at most this many characters of text and html in all
MAX_UNDELIVERED_CHARS = 8_000_000


class SessionHub:
    """Fan-out for one coordinator session, plus what a re-attaching client
    must see: the agent tiles of the running turn and, when a turn ended
    while nobody was attached, its ``final`` (or ``error``) frame."""

    def __init__(self) -> None:
        self._subscribers: set[trio.MemorySendChannel[dict[str, Any]]] = set()
        self.tiles: dict[str, dict[str, Any]] = {}
        self.turn_running = False
        self.undelivered_end: dict[str, Any] | None = None
        #: the last "queued (position N)" interim of a turn still waiting for a slot
        self.queue_frame: dict[str, Any] | None = None

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    @property
    def idle(self) -> bool:
        """No subscriber, no running turn and no final waiting for a re-attach."""
        return not self._subscribers and not self.turn_running and self.undelivered_end is None

    def publish(self, frame: dict[str, Any]) -> None:
        """Send ``frame`` to every subscriber without waiting."""
        if frame.get("type") == "agent_tile":
            self.tiles[frame["task_id"]] = frame
        elif frame.get("type") == "interim" and "queue_position" in frame:
            self.queue_frame = frame if frame["queue_position"] > 0 else None
        for chan in list(self._subscribers):
            try:
                chan.send_nowait(frame)
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                self._subscribers.discard(chan)
                chan.close()

    def end_turn(self, frame: dict[str, Any]) -> None:
        """Publish the turn's last frame; keep it for a later re-attach when
        nobody received it."""
        self.turn_running = False
        if self._subscribers:
            self.publish(frame)
            self.undelivered_end = None
        else:
            self.undelivered_end = frame
        self.tiles.clear()
        self.queue_frame = None

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[tuple[list[dict[str, Any]], trio.MemoryReceiveChannel[dict[str, Any]]]]:
        """Yield ``(initial_frames, channel)``; unsubscribes on exit."""
        send, recv = trio.open_memory_channel[dict[str, Any]](SUBSCRIBER_BUFFER)
        initial: list[dict[str, Any]] = []
        if self.undelivered_end is not None:  # a turn ended while nobody was attached
            initial.append(self.undelivered_end)
            self.undelivered_end = None
        if self.turn_running:
            initial.extend(self.tiles.values())
            if self.queue_frame is not None:  # re-attached while the turn waits for a slot
                initial.append(self.queue_frame)
        self._subscribers.add(send)
        try:
            yield initial, recv
        finally:
            self._subscribers.discard(send)
            send.close()
            recv.close()


def frame_chars(frame: dict[str, Any]) -> int:
    """The characters of a frame's ``text``, ``html`` and ``message`` (what
    makes a kept frame large)."""
    return sum(len(v) for k in ("text", "html", "message") if isinstance(v := frame.get(k), str))


class UndeliveredEnds:
    """Bounds the turn-ending frames that hubs keep for a client that may
    re-attach: at most ``max_frames`` of them and ``max_chars`` characters in
    all.  Past either bound the oldest is dropped from its hub (the answer
    stays in the stored transcript); :meth:`note` returns the session ids
    whose frame was dropped."""

    def __init__(self, max_frames: int = MAX_UNDELIVERED, max_chars: int = MAX_UNDELIVERED_CHARS) -> None:
        self.max_frames = max_frames
        self.max_chars = max_chars
        self._kept: OrderedDict[str, tuple[SessionHub, dict[str, Any], int]] = OrderedDict()
        self.chars = 0

    def __len__(self) -> int:
        return len(self._kept)

    def note(self, session_id: str, hub: SessionHub) -> list[str]:
        """Call after ``hub.end_turn``: counts the hub's undelivered frame (if
        any) and drops the oldest past the bounds."""
        old = self._kept.pop(session_id, None)
        if old is not None:
            self.chars -= old[2]
        frame = hub.undelivered_end
        if frame is not None:
            size = frame_chars(frame)
            self._kept[session_id] = (hub, frame, size)
            self.chars += size
        dropped: list[str] = []
        while self._kept and (len(self._kept) > self.max_frames or self.chars > self.max_chars):
            sid, (old_hub, old_frame, size) = self._kept.popitem(last=False)
            self.chars -= size
            if old_hub.undelivered_end is old_frame:  # still waiting: a client never came back
                old_hub.undelivered_end = None
                dropped.append(sid)
        return dropped

    def prune(self) -> None:
        """Forget the frames that were delivered (their client re-attached)."""
        for sid, (hub, frame, size) in list(self._kept.items()):
            if hub.undelivered_end is not frame:
                del self._kept[sid]
                self.chars -= size
