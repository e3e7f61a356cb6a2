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
