"""systemd notification protocol (sd_notify) and watchdog pings.

A few lines over a datagram socket rather than a dependency: the protocol
is one ``sendto`` of ``KEY=VALUE`` lines to ``$NOTIFY_SOCKET``
(sd_notify(3)); the PyPI ``sdnotify`` package is unmaintained and
``systemd-python`` needs libsystemd headers.  Without ``NOTIFY_SOCKET``
(not under systemd) every call does nothing.
"""

from __future__ import annotations

import os
import socket

import trio

from ongridd.logs import get_logger

log = get_logger(__name__)


def notify(state: str, environ: dict | None = None) -> bool:
    """Send ``state`` (e.g. ``"READY=1"``); True when a socket was there."""
    env = os.environ if environ is None else environ
    addr = env.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(state.encode(), addr)
        return True
    except OSError as exc:
        log.warning("sd_notify_failed", error=str(exc))
        return False


def watchdog_interval_s(environ: dict | None = None) -> float | None:
    """Half of ``WATCHDOG_USEC`` in seconds when the watchdog is on for us."""
    env = os.environ if environ is None else environ
    usec = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return max(int(usec) / 1e6 / 2, 0.5)
    except ValueError:
        return None


async def watchdog_loop(interval_s: float) -> None:
    """Ping ``WATCHDOG=1`` every ``interval_s`` until cancelled.

    The pings come from the Trio loop itself, so a wedged loop stops them
    and systemd restarts the daemon.
    """
    while True:
        notify("WATCHDOG=1")
        await trio.sleep(interval_s)
