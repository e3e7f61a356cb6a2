"""Where a command runs: this host, or a remote one over ssh."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from ongrid_host.runner import DEFAULT_MAX_STDERR, DEFAULT_MAX_STDOUT, RunResult, run_bounded, run_reduced
from ongrid_host.settings import HostSettings
from ongrid_host.ssh import run_remote
from ongridd.plugins.api import HostConfig

LOCAL = "local"


@attrs.frozen(kw_only=True)
class Target:
    """A resolved host: ``local`` runs argv directly, others through ssh."""

    host: HostConfig
    settings: HostSettings

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def is_local(self) -> bool:
        return self.host.name == LOCAL

    async def run(self, argv: Sequence[str], *, timeout_s: float, max_stdout: int = DEFAULT_MAX_STDOUT,
                  max_stderr: int = DEFAULT_MAX_STDERR,
                  on_stdout: Callable[[bytes], None] | None = None, cwd: str | None = None,
                  reads_for_us: bool = False, pass_fds: Sequence[int] = ()) -> RunResult:
        """Run ``argv`` without a shell here, or with every word quoted over
        ssh (bounded there by ``timeout -s KILL``).  See :func:`ongrid_host.runner.run_bounded` for the result and
        :func:`ongrid_host.ssh.run_remote` for ssh failures (ToolError).
        ``cwd``: the folder a local command runs in (ignored over ssh: the
        remote command starts in the ssh user's home).  ``reads_for_us``: a
        program that reads on the daemon's behalf (a read-only command, a
        log scan) runs here without the daemon's file-read capability and
        with a private temporary folder (:func:`ongrid_host.runner.run_reduced`).  ``pass_fds``:
        open files a local command inherits."""
        if self.is_local:
            run = run_reduced if reads_for_us else run_bounded
            return await run(argv, timeout_s=timeout_s, max_stdout=max_stdout,
                             max_stderr=max_stderr, on_stdout=on_stdout, cwd=cwd, pass_fds=pass_fds)
        return await run_remote(self.host, self.settings, tuple(argv), timeout_s=timeout_s,
                                max_stdout=max_stdout, max_stderr=max_stderr, on_stdout=on_stdout)
