"""The scripted model ships in the package for ``ongrid fake-llm`` but stays out
of the daemon's import graph: importing the daemon, or running ``ongridd
serve`` until it is ready and stopped, never imports ``ongridd.fakellm``."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.chassis.test_serve import env_for, free_port, wait_healthy


def test_importing_the_daemon_does_not_import_fakellm(tmp_path: Path) -> None:
    code = "import sys, ongridd.daemon, ongridd.cli; print(sorted(m for m in sys.modules if 'fakellm' in m))"
    out = subprocess.run([sys.executable, "-c", code], env=env_for(tmp_path), capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"
    # the check itself can see the module when something does import it
    code = "import sys, ongridd.cli.fakellm, ongridd.fakellm; print('ongridd.fakellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=env_for(tmp_path), capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "True"


def test_running_serve_does_not_import_fakellm(tmp_path: Path) -> None:
    port = free_port()
    report = tmp_path / "modules.txt"
    code = textwrap.dedent(f"""
        import atexit, sys
        atexit.register(lambda: open({str(report)!r}, "w").write(
            repr(sorted(m for m in sys.modules if "fakellm" in m))))
        from ongridd.cli import ongridd_main
        ongridd_main(["serve", "--state-dir", {str(tmp_path / "state")!r}, "--listen", "127.0.0.1:{port}"])
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env_for(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}", path="/readyz")
        import httpx2

        assert httpx2.get(f"http://127.0.0.1:{port}/api/agents", timeout=5).status_code == 200
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 5
    while not report.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert report.read_text() == "[]"
