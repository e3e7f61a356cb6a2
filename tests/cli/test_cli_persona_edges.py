"""Persona edge cases seen from outside: an override of a built-in or a
plugin persona logs one line naming both files and the winner; the default
relative marketplace index, missing, falls back to the built-in index with
a warning (daemon log and CLI)."""

from __future__ import annotations

import json
import logging

import pytest
from cli_helpers import free_port, ongrid, serve_daemon

from ongridd.personas.registry import AgentRegistry, builtin_agents_dir

OVERRIDE = """---
name: specialist-disk
description: An operator's own disk specialist.
when_to_use: Disk questions.
tools: [host_du_summary]
permission_mode: read-only
max_turns: 3
---
You measure disks.
"""


def _persona(name: str) -> str:
    return OVERRIDE.replace("specialist-disk", name)


def test_each_override_logs_one_line_naming_both_files(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ongridd")
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "plug.md").write_text(_persona("plug-persona"))
    user = tmp_path / "user"
    user.mkdir()
    (user / "disk.md").write_text(OVERRIDE)
    (user / "plug.md").write_text(_persona("plug-persona"))
    (user / "mine.md").write_text(_persona("only-mine"))
    registry = AgentRegistry(builtin_agents_dir(), extra_paths=[plugin])
    registry.load([user])
    lines = [r.ongrid_fields for r in caplog.records if r.msg == "persona_overridden"]
    by_name = {f["name"]: f for f in lines}
    assert len(lines) == 2 and set(by_name) == {"specialist-disk", "plug-persona"}
    disk = by_name["specialist-disk"]
    assert disk["overridden"] == str(builtin_agents_dir() / "specialist-disk.md")
    assert disk["by"] == disk["winner"] == str(user / "disk.md")
    assert by_name["plug-persona"]["overridden"] == str(plugin / "plug.md")
    assert by_name["plug-persona"]["winner"] == str(user / "plug.md")
    assert registry.by_name("specialist-disk").source == str(user / "disk.md")


@pytest.mark.slow
def test_daemon_logs_the_override_once_and_the_index_fallback(tmp_path):
    agents = tmp_path / "ops-agents"
    agents.mkdir()
    (agents / "specialist-disk.md").write_text(OVERRIDE)
    cfg = tmp_path / "ongrid.yaml"
    cfg.write_text(f"agents:\n  user_dirs: [{agents}]\nmarketplace:\n  index: marketplace/index.yaml\n")
    with serve_daemon(tmp_path, "--config", str(cfg)) as (_url, proc):
        pass
    events = [json.loads(line) for line in proc.stderr_text.splitlines() if line.startswith("{")]
    overridden = [e for e in events if e["event"] == "persona_overridden"]
    assert len(overridden) == 1, overridden
    assert overridden[0]["name"] == "specialist-disk"
    assert overridden[0]["overridden"].endswith("agents/specialist-disk.md")
    assert overridden[0]["winner"] == str(agents / "specialist-disk.md")
    fallback = [e for e in events if e["event"] == "marketplace_index_fallback"]
    assert len(fallback) == 1 and fallback[0]["level"] == "warning"
    assert fallback[0]["configured"] == "marketplace/index.yaml" and fallback[0]["cwd"] == str(tmp_path)
    assert "using the built-in index" in fallback[0]["message"]


@pytest.mark.slow
def test_daemon_with_the_default_index_setting_does_not_warn(tmp_path):
    with serve_daemon(tmp_path) as (_url, proc):
        pass
    events = [json.loads(line) for line in proc.stderr_text.splitlines() if line.startswith("{")]
    assert any(e["event"] == "daemon_starting" for e in events)
    assert not [e for e in events if e["event"] == "marketplace_index_fallback"], events


@pytest.mark.slow
def test_cli_warns_when_it_falls_back_to_the_built_in_index(tmp_path):
    code, out, err, _ = ongrid("marketplace", "list", "--url", f"http://127.0.0.1:{free_port()}",
                               "--state-dir", str(tmp_path / "state"), cwd=tmp_path)
    assert code == 0, err
    assert "ongrid-example-diskreport" in out
    assert "warning" not in err  # marketplace.index not set: the built-in index, silently
    cfg = tmp_path / "ongrid.yaml"
    cfg.write_text("marketplace:\n  index: marketplace/index.yaml\n")
    code, out, err, _ = ongrid("marketplace", "list", "--config", str(cfg), "--url", f"http://127.0.0.1:{free_port()}",
                               "--state-dir", str(tmp_path / "state"), cwd=tmp_path)
    assert code == 0, err
    assert "ongrid-example-diskreport" in out
    assert (f"warning: marketplace.index 'marketplace/index.yaml' is relative and there is no such file in "
            f"{tmp_path}; using the built-in index") in err
