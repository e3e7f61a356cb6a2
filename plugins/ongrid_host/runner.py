"""Run a program without a shell, with bounded time and bounded output.

Used for local commands (``host_bash``, ``systemctl``) and for the ``ssh``
client (remote hosts).  Output beyond the caps is read and counted but not
kept, so a chatty command can neither fill memory nor block on a full pipe.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence

import attrs
import trio

from ongridd.plugins.api import ToolError

DEFAULT_MAX_STDOUT = 64 * 1024
DEFAULT_MAX_STDERR = 16 * 1024
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: the only variables a local child sees (the daemon's own environment holds
#: API keys and tokens: a child's /proc/self/environ must not)
LOCAL_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "HOME", "TZ")
#: what the ssh client needs (agent socket, home for ~/.ssh, user names)
SSH_ENV_KEYS = ("PATH", "HOME", "USER", "LOGNAME", "SSH_AUTH_SOCK")


def scrubbed_env(keys: tuple[str, ...] = LOCAL_ENV_KEYS) -> dict[str, str]:
    """A minimal child environment: only ``keys`` copied from ours (PATH
    defaulted when unset).  Never contains anything else."""
    env = {k: os.environ[k] for k in keys if k in os.environ}
    env.setdefault("PATH", _DEFAULT_PATH)
    return env


#: the groups the systemd unit gives the daemon's user to read /var/log and the journal
LOG_GROUPS = ("adm", "systemd-journal")
#: CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: the capabilities that bypass file permission checks
_DAC_CAPABILITIES = (1 << 1) | (1 << 2)


@functools.cache
def reduced_privileges_prefix() -> tuple[str, ...]:
    """The argv prefix that starts a program without the capabilities that bypass file permission
    checks (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH: ``setpriv`` from util-linux), so that the kernel
    checks every file it opens against the daemon's user and groups, however the path got there;
    ``()`` when this process would not pass them on anyway.  Read once (capabilities do not change).
    Raises ToolError when they must be dropped and ``setpriv`` is not installed (fail closed)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            caps = {k: int(v, 16) for k, v in re.findall(r"^(Cap\w+):\s*([0-9a-fA-F]+)$", fh.read(), re.M)}
    except OSError:  # no /proc: not Linux, no capabilities to pass on
        return ()
    if os.geteuid() == 0:  # a root program gets its bounding set: take the two out of it
        # and read as the unit's user does, with the groups meant for logs and the journal (a log
        # folder of a service's own, drwxr-s--- redis adm, stays readable)
        words: tuple[str, ...] = ("--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all",
                 "--groups=" + ",".join(str(g) for g in sorted(set(os.getgroups()) | log_group_ids())))
        needed = bool(caps.get("CapBnd", 0) & _DAC_CAPABILITIES)
    else:  # another user's program gets its ambient set (the unit's AmbientCapabilities)
        words = ("--ambient-caps=-all", "--inh-caps=-all")
        needed = bool(caps.get("CapAmb", 0) or caps.get("CapInh", 0) & _DAC_CAPABILITIES)
    if not needed:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise ToolError("cannot run the command without the daemon's file-read capability: setpriv (util-linux) "
                        "is not installed; nothing was run")
    return (setpriv, *words, "--")


def log_group_ids() -> set[int]:
    """The ids of the groups that may read the logs and the journal (``adm``, ``systemd-journal``)
    on this host; those that do not exist are left out."""
    import grp

    out = set()
    for name in LOG_GROUPS:
        try:
            out.add(grp.getgrnam(name).gr_gid)
        except KeyError:
            pass
    return out


async def run_reduced(argv: Sequence[str], *, timeout_s: float, max_stdout: int = DEFAULT_MAX_STDOUT,
                      max_stderr: int = DEFAULT_MAX_STDERR,
                      on_stdout: Callable[[bytes], None] | None = None, cwd: str | None = None,
                      pass_fds: Sequence[int] = ()) -> RunResult:
    """:func:`run_bounded` for a program that reads on the daemon's behalf (a read-only ``host_bash``
    command, a log scan): started without the capabilities that bypass file permission checks
    (:func:`reduced_privileges_prefix`), so a path swapped for a symlink to ``/etc/shadow`` after it
    was checked is refused by the kernel; with a private ``TMPDIR`` that is removed afterwards, so
    what it leaves there (``sort``'s temporary files after a kill at the time limit) goes with it.
    The result's ``argv`` is ``argv`` as given.  Raises ToolError as :func:`run_bounded`, or when
    the capabilities cannot be dropped.  Cancellation kills the program, removes its folder and
    propagates ``trio.Cancelled``."""
    prefix = reduced_privileges_prefix()
    scratch = await trio.to_thread.run_sync(functools.partial(tempfile.mkdtemp, prefix="ongrid-cmd-"))
    try:
        result = await run_bounded((*prefix, *argv), timeout_s=timeout_s, max_stdout=max_stdout,
                                   max_stderr=max_stderr, on_stdout=on_stdout, cwd=cwd,
                                   env=scrubbed_env() | {"TMPDIR": scratch}, pass_fds=pass_fds)
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(functools.partial(shutil.rmtree, scratch, ignore_errors=True))
    return attrs.evolve(result, argv=tuple(argv))


def kill_group(pgid: int) -> None:
    """SIGKILL every process of the group ``pgid`` (a child started with
    ``start_new_session=True`` leads the group with its own pid); nothing
    when the group is already gone."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@attrs.frozen(kw_only=True)
class RunResult:
    """What a bounded run produced.

    ``stdout``/``stderr``: the kept bytes (at most the caps);
    ``stdout_total``/``stderr_total``: bytes the program wrote in all;
    ``exit_code``: None when it was killed at the time limit
    (``timed_out``), negative for a signal; ``duration_ms``: wall time.
    """

    argv: tuple[str, ...]
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    stdout_total: int
    stderr_total: int
    timed_out: bool
    duration_ms: int

    @property
    def stdout_cut(self) -> int:
        return self.stdout_total - len(self.stdout)

    @property
    def stderr_cut(self) -> int:
        return self.stderr_total - len(self.stderr)

    def text(self, which: str = "stdout") -> str:
        data = self.stdout if which == "stdout" else self.stderr
        return data.decode("utf-8", "replace")


class _Sink:
    def __init__(self, cap: int, on_chunk: Callable[[bytes], None] | None = None):
        self.cap = cap
        self.kept = bytearray()
        self.total = 0
        self.on_chunk = on_chunk

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self.on_chunk is not None:
            self.on_chunk(chunk)
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]


async def _drain(stream: trio.abc.ReceiveStream, sink: _Sink) -> None:
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return
        sink.feed(bytes(chunk))  # a no-op for bytes (trio's pipes); a copy of a bytearray


async def run_bounded(
    argv: Sequence[str],
    *,
    timeout_s: float,
    max_stdout: int = DEFAULT_MAX_STDOUT,
    max_stderr: int = DEFAULT_MAX_STDERR,
    on_stdout: Callable[[bytes], None] | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    pass_fds: Sequence[int] = (),
) -> RunResult:
    """Run ``argv`` (no shell) for at most ``timeout_s`` seconds.

    stdin is ``/dev/null``.  ``on_stdout(chunk)`` is called for every stdout
    chunk as it arrives (streaming parsers use it; it must be quick and not
    raise).  The program starts in a session and process group of its own;
    at the time limit the whole group is killed (SIGKILL: children that
    would outlive their parent die with it) and the result has
    ``timed_out=True`` with the output read so far.  When the program ends,
    whatever it left running in its group is killed too.  Raises ToolError when
    the program cannot be started (not installed, not executable).
    ``env``: the child's whole environment; None gives
    :func:`scrubbed_env` (never the daemon's own).  ``cwd``: the folder it
    starts in (None: the daemon's).  ``pass_fds``: open files it inherits, at the same numbers.
    Cancellation kills the process and propagates ``trio.Cancelled``.
    """
    argv = tuple(argv)
    out = _Sink(max_stdout, on_stdout)
    err = _Sink(max_stderr)
    started = time.monotonic()
    try:
        proc = await trio.lowlevel.open_process(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=scrubbed_env() if env is None else env, cwd=cwd, start_new_session=True, pass_fds=tuple(pass_fds))
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        raise ToolError(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
    try:
        with trio.move_on_after(timeout_s) as scope:
            async with trio.open_nursery() as readers:
                assert proc.stdout is not None and proc.stderr is not None  # both are PIPE
                readers.start_soon(_drain, proc.stdout, out)
                readers.start_soon(_drain, proc.stderr, err)
            await proc.wait()
        timed_out = scope.cancelled_caught
    finally:
        kill_group(proc.pid)
        if proc.returncode is None:
            proc.kill()
        with trio.move_on_after(5, shield=True):
            await proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    await pipe.aclose()
    duration_ms = int((time.monotonic() - started) * 1000)
    exit_code = None if timed_out else proc.returncode
    return RunResult(argv=argv, exit_code=exit_code, stdout=bytes(out.kept), stderr=bytes(err.kept),
                     stdout_total=out.total, stderr_total=err.total, timed_out=timed_out,
                     duration_ms=duration_ms)
