"""Remote hosts through the system OpenSSH client (never interactive).

Every remote command is a fixed script or an argv list, quoted by
:func:`quote_argv` so that the remote user's login shell, whichever it is
(sh, bash, zsh, fish, csh), sees only literal words.  ``BatchMode=yes`` makes ssh fail instead of prompting for a
password or a host key.

Every remote command is bounded on the remote side too: it runs under
coreutils ``timeout -s KILL <n>`` (which kills the command's whole process
group there), because killing the local ``ssh`` client does not stop a
command on the remote host that has no terminal.
"""

from __future__ import annotations

import base64
import math
import shlex
from collections.abc import Callable, Sequence

from ongrid_host.runner import (
    DEFAULT_MAX_STDERR,
    DEFAULT_MAX_STDOUT,
    SSH_ENV_KEYS,
    RunResult,
    run_bounded,
    scrubbed_env,
)
from ongrid_host.settings import HostSettings
from ongridd.plugins.api import HostConfig
from ongridd.plugins.api import ToolError

#: exit status ssh uses for its own failures (connection, auth, host key)
SSH_FAILURE = 255


def ssh_argv(host: HostConfig, settings: HostSettings, remote_command: str) -> list[str]:
    """The ``ssh`` argv that runs ``remote_command`` (a shell string) on ``host``."""
    address = host.address or host.name
    argv = [settings.ssh_binary]
    if settings.ssh_config_file:
        argv += ["-F", settings.ssh_config_file]
    argv += [
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={settings.connect_timeout_s}",
        "-o", f"StrictHostKeyChecking={settings.strict_host_key_checking}",
        "-o", "LogLevel=ERROR",
        "-o", "RequestTTY=no",
        "-o", "ClearAllForwardings=yes",
        "-o", "ControlMaster=no",
        "-o", "ServerAliveInterval=5",
        "-o", "ServerAliveCountMax=3",
        "-p", str(host.ssh_port),
        "-T", "-n",
    ]
    if settings.known_hosts_file:
        argv += ["-o", f"UserKnownHostsFile={settings.known_hosts_file}", "-o", "GlobalKnownHostsFile=/dev/null"]
    if host.ssh_key:
        argv += ["-i", host.ssh_key, "-o", "IdentitiesOnly=yes"]
    if host.ssh_user:
        argv += ["-l", host.ssh_user]
    argv += ["--", address, remote_command]
    return argv


#: characters every login shell ssh may hand the command to (sh, bash, dash, zsh, fish, csh, tcsh)
#: takes literally inside single quotes: printable ASCII but the backslash (fish: ``\'`` ends no
#: quote) and ``!`` (csh: history expansion, even quoted); and the quote itself, which is written
#: as ``'"'"'`` — a double-quoted quote between two single-quoted runs, the same to all of them
_LITERAL_QUOTED = frozenset(map(chr, range(0x20, 0x7F))) - {"\\", "!"}


def quote_argv(argv: Sequence[str]) -> str:
    """The command string ssh hands the remote user's login shell, which runs ``argv`` with
    every word taken literally whatever that shell is.

    Every word is single-quoted (so no shell expands ``=x``, ``%x`` or ``{a,b}``).  When a word
    holds a character some login shell reads specially even there (a backslash, ``!``, a
    control or non-ASCII character, see :data:`_LITERAL_QUOTED`), the POSIX form of the
    command (:func:`shlex.join`) is sent base64-encoded instead and decoded and run by
    ``sh`` on the host: ``sh -c 'eval "$(echo B64 | base64 -d)"'``, whose every character
    each of those shells takes as it is.  (``base64`` is GNU coreutils', as ``timeout``.)
    """
    if all(c in _LITERAL_QUOTED for word in argv for c in word):
        return " ".join("'" + word.replace("'", "'\"'\"'") + "'" for word in argv)
    encoded = base64.b64encode(shlex.join(argv).encode()).decode("ascii")
    return "sh -c 'eval \"$(echo " + encoded + " | base64 -d)\"'"


#: seconds the remote bound leaves after the local one (the local kill comes first)
REMOTE_GRACE_S = 2


def remote_bounded(command: str | Sequence[str], timeout_s: float) -> str:
    """The shell string the remote host runs: ``command`` (an argv, each word
    quoted, or a shell script run by ``sh -c``) under
    ``timeout -s KILL <n>``, n = ``timeout_s`` rounded up plus a grace."""
    limit = str(max(1, math.ceil(timeout_s)) + REMOTE_GRACE_S)
    words = ["sh", "-c", command] if isinstance(command, str) else list(command)
    return quote_argv(["timeout", "-s", "KILL", limit, *words])


async def run_remote(
    host: HostConfig,
    settings: HostSettings,
    remote_command: str | Sequence[str],
    *,
    timeout_s: float,
    max_stdout: int = DEFAULT_MAX_STDOUT,
    max_stderr: int = DEFAULT_MAX_STDERR,
    on_stdout: Callable[[bytes], None] | None = None,
) -> RunResult:
    """Run a shell string (or an argv, every word quoted) on ``host`` over
    ssh with bounded time and output, bounded on the remote side as well
    (:func:`remote_bounded`).

    Returns the RunResult of the remote command (its exit status is ssh's).
    Raises ToolError when ssh itself failed (exit 255: unreachable, refused,
    authentication or host key problems), with ssh's message.  A timeout is
    not raised here; callers look at ``timed_out``.  Cancellation kills the
    local ssh client (which closes the connection) and propagates.
    """
    argv = ssh_argv(host, settings, remote_bounded(remote_command, timeout_s))
    result = await run_bounded(argv, timeout_s=timeout_s, max_stdout=max_stdout,
                               max_stderr=max_stderr, on_stdout=on_stdout, env=scrubbed_env(SSH_ENV_KEYS))
    if result.exit_code == SSH_FAILURE:
        lines = [ln.strip() for ln in result.text("stderr").splitlines() if ln.strip()]
        msg = " / ".join(ln[:300] for ln in lines[-3:]) or "ssh exited with status 255"
        raise ToolError(f"ssh to host {host.name!r} ({host.address or host.name}:{host.ssh_port}) failed: {msg}")
    return result


async def run_remote_checked(host: HostConfig, settings: HostSettings, remote_command: str | Sequence[str], *,
                             timeout_s: float, what: str, max_stdout: int = DEFAULT_MAX_STDOUT) -> str:
    """Like :func:`run_remote` but the command must succeed: returns stdout as
    text; raises ToolError naming ``what`` on a timeout or a non-zero exit."""
    result = await run_remote(host, settings, remote_command, timeout_s=timeout_s, max_stdout=max_stdout)
    if result.timed_out:
        raise ToolError(f"{what} on host {host.name!r} did not finish within {timeout_s:g} s")
    if result.exit_code != 0:
        err = result.text("stderr").strip()[-500:]
        raise ToolError(f"{what} on host {host.name!r} failed (exit {result.exit_code}): {err or 'no message'}")
    return result.text("stdout")
