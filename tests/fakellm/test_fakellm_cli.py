"""``ongrid fake-llm``: starts, prints its base URL, serves, says it is a
scripted test double, exits 0 on SIGTERM/SIGINT; exit 2 on a bad script."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
import trio

REPO = Path(__file__).resolve().parents[2]
ENTRY = "from ongridd.cli import ongrid_main; ongrid_main()"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), str(REPO / "plugins"), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


async def _read_line(stream) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        piece = await stream.receive_some(1)
        if not piece:
            break
        buf += piece
    return buf


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_cli_serves_the_script_and_stops_cleanly(tmp_path, sig):
    script = tmp_path / "script.yaml"
    script.write_text("default:\n  - content: 'disk at ${FAKE_CLI_DIR}'\n", encoding="utf-8")
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-c", ENTRY, "fake-llm", "--script", str(script), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(FAKE_CLI_DIR="/srv/demo"),
    )
    try:
        with trio.fail_after(30):
            base_url = (await _read_line(proc.stdout)).decode().strip()
            assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
            async with httpx2.AsyncClient(verify=False, trust_env=False) as client:
                r = await client.post(
                    base_url + "/chat/completions",
                    json={"model": "x", "messages": [{"role": "user", "content": "hi"}]},
                    headers={"X-Ongrid-Agent": "default", "X-Ongrid-Session": "cli"},
                )
            assert r.json()["choices"][0]["message"]["content"] == "disk at /srv/demo"
            proc.send_signal(sig)
            code = await proc.wait()
            stderr = b""
            while piece := await proc.stderr.receive_some(65536):
                stderr += piece
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert code == 0
    text = stderr.decode()
    assert "not a real model" in text and "scripted model" in text
    assert f"stopping on {signal.Signals(sig).name}" in text


async def test_cli_rejects_a_bad_script(tmp_path):
    script = tmp_path / "bad.yaml"
    script.write_text("default:\n  - contnet: typo\n", encoding="utf-8")
    with trio.fail_after(30):
        result = await trio.run_process(
            [sys.executable, "-c", ENTRY, "fake-llm", "--script", str(script)],
            capture_stdout=True, capture_stderr=True, check=False, env=_env(),
        )
    assert result.returncode == 2
    assert result.stdout == b""
    err = result.stderr.decode()
    assert "bad.yaml:2" in err and "persona 'default' step 0" in err and "'contnet'" in err


async def test_cli_rejects_a_bad_listen_address(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text("default:\n  - content: x\n", encoding="utf-8")
    with trio.fail_after(30):
        result = await trio.run_process(
            [sys.executable, "-c", ENTRY, "fake-llm", "--script", str(script), "--listen", "nonsense"],
            capture_stdout=True, capture_stderr=True, check=False, env=_env(),
        )
    assert result.returncode == 2 and b"HOST:PORT" in result.stderr


async def test_cli_reports_an_address_in_use(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text("default:\n  - content: x\n", encoding="utf-8")
    busy = trio.socket.socket()
    await busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        with trio.fail_after(30):
            result = await trio.run_process(
                [sys.executable, "-c", ENTRY, "fake-llm", "--script", str(script), "--listen", f"127.0.0.1:{port}"],
                capture_stdout=True, capture_stderr=True, check=False, env=_env(),
            )
    finally:
        busy.close()
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}".encode() in result.stderr
