"""A CLI process on a pseudo-terminal, for the runtime tests of what
``ongrid ask`` and ``ongrid chat`` show on a terminal."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import attrs
import trio

#: CSI sequences (colours, cursor moves, erase)
_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain(text: str) -> str:
    """``text`` without its CSI escape sequences (colours, cursor moves)."""
    return _CSI.sub("", text)


@attrs.define
class Terminal:
    """The master side of a pseudo-terminal a process runs on; ``shown``
    holds every byte the terminal showed so far."""

    proc: trio.Process
    master: int
    shown: bytes = b""

    async def read(self) -> bytes:
        """The next chunk the terminal shows (up to 64 KiB, also appended to
        ``shown``); ``b""`` once the terminal closed with the process.
        Cancellation: the wait ends at once (nothing is read)."""
        try:
            await trio.lowlevel.wait_readable(self.master)  # cancellable, unlike a read in a thread
            chunk = os.read(self.master, 65536)
        except OSError:  # the terminal closed with the process
            return b""
        self.shown += chunk
        return chunk

    async def until(self, text: str) -> None:
        """Read until ``text`` is in ``shown``; AssertionError if the
        terminal closes first (no time limit of its own)."""
        while text.encode() not in self.shown:
            if not await self.read():
                raise AssertionError(f"the terminal closed before {text!r}: {self.shown.decode(errors='replace')}")

    async def read_to_end(self) -> None:
        """Read until the terminal closes."""
        while await self.read():
            pass

    def write(self, data: bytes) -> None:
        """Type ``data`` (``b"\\x04"``: Ctrl-D)."""
        os.write(self.master, data)

    @property
    def text(self) -> str:
        """``shown`` decoded, without CSI escape sequences."""
        return plain(self.shown.decode(errors="replace"))


@asynccontextmanager
async def on_a_terminal(cmd: list[str], env: Mapping[str, str], *, stdin: int | None = None,
                        stdout: int | None = None) -> AsyncIterator[Terminal]:
    """Run ``cmd`` with stdin, stdout and stderr on a new pseudo-terminal
    (``stdin`` / ``stdout``: another target, e.g. ``subprocess.PIPE``) for
    the block.  On the way out the process is killed if it still runs and
    waited for, and the terminal is closed."""
    master, slave = os.openpty()
    try:
        proc = await trio.lowlevel.open_process(cmd, stdin=slave if stdin is None else stdin,
                                                stdout=slave if stdout is None else stdout, stderr=slave,
                                                env=dict(env))
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    try:
        yield Terminal(proc=proc, master=master)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        os.close(master)
