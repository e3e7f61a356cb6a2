"""``ongridd serve`` raises its soft open-files limit to the hard one at start
(a thousand chat sessions hold more descriptors than the usual 1,024)."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest


def test_the_soft_open_files_limit_is_raised_to_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard open-files limit here is only {hard}")

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    code = ("import resource\nfrom ongridd.daemon import raise_open_files_limit\n"
            "print(raise_open_files_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         preexec_fn=lower, check=True)
    returned, now = (int(v) for v in out.stdout.split())
    expected = hard if hard != resource.RLIM_INFINITY else 1 << 20
    assert returned == now == expected, out.stdout
