"""This machine's speed now, for reading CPU figures taken on different days or hosts."""

from __future__ import annotations

import time


def reference_loop_ms() -> float:
    """This machine's speed now: CPU milliseconds (this thread's) of a fixed pure-Python loop
    (dict, string and integer work; the best of three).  Compare it between runs before comparing
    their CPU figures."""
    def loop() -> int:
        seen: dict[str, int] = {}
        for i in range(200_000):
            key = f"k{i % 1000}"
            seen[key] = seen.get(key, 0) + i
        return sum(seen.values())

    best = float("inf")
    for _ in range(3):
        start = time.thread_time()
        loop()
        best = min(best, time.thread_time() - start)
    return best * 1e3


def page_touch_us(gap_s: float, pages: int = 1000, rounds: int = 15) -> float:
    """CPU microseconds (this thread's) per 4 KiB page of memory written once, ``pages`` distinct
    pages one after another, after sleeping ``gap_s`` seconds (the median of ``rounds``): what
    code pays for the memory it touches after waking up.  On a host where that is far more than
    back to back, a wake-up costs by the pages the code then touches, whatever its instruction count."""
    buf = bytearray(pages * 4096)
    for i in range(0, len(buf), 4096):
        buf[i] = 1  # faulted in: the figure is the touch, not the first allocation
    took = []
    for _ in range(rounds):
        time.sleep(gap_s)
        start = time.thread_time_ns()
        for i in range(0, len(buf), 4096):
            buf[i] ^= 1
        took.append((time.thread_time_ns() - start) / 1e3 / pages)
    return sorted(took)[rounds // 2]
