"""Ids from ``new_id``: canonical UUID7 text (time-ordered), unique across threads, and a forked child
draws its own."""

from __future__ import annotations

import os
import threading
import time
import uuid

from ongridd.store.rows import new_id


def test_ids_are_canonical_uuid7_text_and_unique_across_threads():
    out: list[list[str]] = [[] for _ in range(4)]

    def draw(bucket: list[str]) -> None:
        bucket.extend(new_id() for _ in range(5000))

    threads = [threading.Thread(target=draw, args=(b,)) for b in out]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for bucket in out for i in bucket]
    assert len(set(ids)) == len(ids) == 20000
    for text in ids[::97]:
        parsed = uuid.UUID(text)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122 and str(parsed) == text


def test_ids_carry_the_time_they_were_drawn():
    before = time.time_ns() // 1_000_000
    ids = [new_id() for _ in range(1000)]
    after = time.time_ns() // 1_000_000
    stamps = [int(i.replace("-", "")[:12], 16) for i in ids]
    assert before <= stamps[0] and stamps == sorted(stamps) and stamps[-1] <= after
    assert len({i[14:] for i in ids}) == 1000  # the random part differs within one millisecond


def test_a_forked_child_does_not_repeat_the_parents_next_ids():
    new_id()  # the pool holds ids not handed out yet
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, " ".join(new_id() for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    child = set(os.read(read, 1 << 16).decode().split())
    os.waitpid(pid, 0)
    parent = {new_id() for _ in range(50)}
    assert len(child) == 50 and not child & parent
