"""query_knowledge never hangs or exhausts memory on special files named
*.md (a FIFO, a symlink to /dev/zero, a huge file), and a stuck read cannot
block cancellation (breaker findings)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import trio
from ongrid_knowledge import index
from ongrid_knowledge.index import KnowledgeBase

from tests.knowledge.test_query_knowledge import ask, knowledge_tool

GOOD = "# Certificates\n\nRenew the TLS certificate with certbot renew.\n"


async def test_fifo_named_md_is_skipped_not_read(tmp_path):
    (tmp_path / "good.md").write_text(GOOD)
    os.mkfifo(tmp_path / "pipe.md")
    with trio.fail_after(10):  # before the fix: blocked forever in open()
        result = await ask(knowledge_tool(tmp_path), "renew certificate")
    assert [Path(h["path"]).name for h in result["results"]] == ["good.md"]
    assert f"skipped {tmp_path / 'pipe.md'}: a named pipe (FIFO), not a regular file" in result["notes"]


async def test_symlink_to_dev_zero_is_skipped(tmp_path):
    (tmp_path / "good.md").write_text(GOOD)
    (tmp_path / "zero.md").symlink_to("/dev/zero")
    with trio.fail_after(10):
        result = await ask(knowledge_tool(tmp_path), "renew certificate")
    assert result["searched"]["files"] == 1
    assert f"skipped {tmp_path / 'zero.md'}: a device, not a regular file" in result["notes"]


async def test_huge_file_is_skipped_before_reading(tmp_path, monkeypatch):
    (tmp_path / "good.md").write_text(GOOD)
    (tmp_path / "huge.md").touch()
    os.truncate(tmp_path / "huge.md", 50 * 1024 * 1024)  # sparse: 50 MB without writing them
    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(index.os, "open", lambda p, *a, **k: (opened.append(str(p)), real_open(p, *a, **k))[1])
    result = await ask(knowledge_tool(tmp_path), "renew certificate")
    assert result["searched"]["files"] == 1
    assert any(n.startswith(f"skipped {tmp_path / 'huge.md'}: 52428800 bytes, more than") for n in result["notes"])
    assert str(tmp_path / "huge.md") not in opened  # never opened, let alone read


def test_read_refuses_a_non_regular_file_swapped_in_after_the_scan(tmp_path):
    os.mkfifo(tmp_path / "late.md")
    text, note = index._read(tmp_path / "late.md", "late.md", 1000)  # O_NONBLOCK: returns at once
    assert text is None and "named pipe" in note


async def test_cancel_abandons_a_stuck_search(tmp_path, monkeypatch):
    (tmp_path / "good.md").write_text(GOOD)
    release = threading.Event()
    entered = trio.Event()
    real_scan = index._scan

    def stuck_scan(*a, **k):
        trio.from_thread.run_sync(entered.set)
        release.wait(30)  # a read stuck on a hung filesystem
        return real_scan(*a, **k)

    monkeypatch.setattr(index, "_scan", stuck_scan)
    kb = KnowledgeBase(dirs=(str(tmp_path),))
    try:
        with trio.fail_after(10):  # before the fix: cancellation waited 30 s for the thread
            async with trio.open_nursery() as nursery:
                nursery.start_soon(kb.search, "renew", 3)
                await entered.wait()
                nursery.cancel_scope.cancel()
        assert nursery.cancel_scope.cancelled_caught
    finally:
        release.set()
