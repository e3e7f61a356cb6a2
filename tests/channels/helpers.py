"""Start ``ongridd serve`` with a config file (bridge settings) and ``ongrid fake-llm``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.e2e.e2e_helpers import env, free_port, ongridd, start_fake_llm, stop, wait_healthy

__all__ = ["start_serve", "start_fake_llm", "stop", "disk_script"]


def start_serve(tmp: Path, llm_url: str, settings: dict[str, Any], *, more_config: dict[str, Any] | None = None,
                **extra_env: str) -> tuple[subprocess.Popen, str]:
    """The daemon with ``plugins.settings`` = ``settings`` (and the top-level
    keys of ``more_config``, e.g. ``limits``); stderr to ``tmp/daemon.log``."""
    port = free_port()
    config = tmp / "ongrid.yaml"
    config.write_text(json.dumps({"plugins": {"settings": settings}, **(more_config or {})}))  # JSON is YAML 1.2
    log = open(tmp / "daemon.log", "a")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(ongridd("serve", "--config", str(config), "--state-dir", str(tmp / "state"),
                                    "--listen", f"127.0.0.1:{port}"),
                            cwd=tmp, env=env(ONGRID_LLM_BASE_URL=llm_url, ONGRID_LLM_MODEL="scripted", **extra_env),
                            stdout=subprocess.DEVNULL, stderr=log, text=True)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(proc, url)
    return proc, url


def disk_script(folder: Path, answer: str) -> dict[str, Any]:
    """The coordinator says something (SendMessage), dispatches the disk
    specialist on ``folder`` (a real ``host_du_summary``), then answers ``answer``."""
    return {
        "default": [
            {"tool_calls": [
                {"name": "SendMessage", "arguments": {"text": "Looking at the disk usage now."}},
                {"name": "AgentTool", "arguments": {
                    "description": f"Disk usage of {folder}", "subagent_type": "specialist-disk",
                    "prompt": f"Summarise what fills {folder} on host local."}}]},
            {"content": answer},
        ],
        "specialist-disk": [
            {"delay_s": 1.5, "tool_calls": [{"name": "host_du_summary", "arguments": {"paths": [str(folder)], "depth": 1}}]},
            {"content_from_tool_results": True},
        ],
    }
