"""folder_changes: the kernel's inotify events read on the event loop — changes in a folder and
(recursively) in folders created under it later, bursts made one batch, the descriptor closed
when the watch ends, OSError for a folder it cannot watch."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
import trio

from ongridd.marketplace.fswatch import folder_changes


async def test_changes_in_new_subfolders_are_reported_and_the_descriptor_is_closed(tmp_path: Path):
    ready = trio.Event()
    before = set(os.listdir("/proc/self/fd"))
    batches: list[int] = []
    async with contextlib.aclosing(folder_changes(tmp_path, debounce_ms=50, recursive=True, ready=ready)) as gen:
        async with trio.open_nursery() as nursery:
            async def writer() -> None:
                await ready.wait()
                (tmp_path / "a.md").write_text("one")
                await trio.sleep(0.3)
                (tmp_path / "team" / "ops").mkdir(parents=True)
                await trio.sleep(0.3)  # the new folders are watched once their batch is read
                (tmp_path / "team" / "ops" / "b.md").write_text("two")

            nursery.start_soon(writer)
            with trio.fail_after(30):
                async for count in gen:
                    batches.append(count)
                    if (tmp_path / "team" / "ops" / "b.md").exists() and len(batches) >= 3:
                        break
            nursery.cancel_scope.cancel()
    assert all(n > 0 for n in batches) and len(batches) >= 3
    # the inotify descriptor went with the watch
    assert set(os.listdir("/proc/self/fd")) - before == set()


async def test_a_burst_is_one_batch(tmp_path: Path):
    ready = trio.Event()
    async with contextlib.aclosing(folder_changes(tmp_path, debounce_ms=300, recursive=False, ready=ready)) as gen:
        async with trio.open_nursery() as nursery:
            async def burst() -> None:
                await ready.wait()
                for i in range(20):
                    (tmp_path / f"p{i}.md").write_text("x")

            nursery.start_soon(burst)
            with trio.fail_after(30):
                first = await gen.__anext__()
    assert first >= 20 * 2  # created and written, twenty times, in one batch


async def test_a_folder_that_cannot_be_watched_is_an_oserror(tmp_path: Path):
    with pytest.raises(OSError):
        async with contextlib.aclosing(folder_changes(tmp_path / "missing", debounce_ms=50, recursive=True)) as gen:
            await gen.__anext__()
