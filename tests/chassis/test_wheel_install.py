"""The installed distribution (a plain, non-editable ``pip install .``) finds
its built-in personas and first-party plugins from outside the checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path


from tests.conftest import need

BUILTIN = {"default", "incident-investigator", "specialist-compute", "specialist-disk", "specialist-network",
           "specialist-ops", "specialist-sre", "reviewer"}


def _installed_non_editable() -> bool:
    try:
        dist = metadata.distribution("ongridd")
    except metadata.PackageNotFoundError:
        return False
    direct = dist.read_text("direct_url.json")
    if direct and json.loads(direct).get("dir_info", {}).get("editable"):
        return False
    return any(str(f).startswith("ongridd/builtin_agents/") for f in (dist.files or ()))


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "ongrid"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    return subprocess.run([str(exe), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_installed_package_finds_agents_and_plugins(tmp_path):
    need(_installed_non_editable(), "ongridd is not installed non-editably in this environment "
                                    "(the README's test command installs it so)")
    res = _run(tmp_path, "agents", "list", "--json")
    assert res.returncode == 0, res.stderr
    agents = json.loads(res.stdout)
    assert BUILTIN <= {a["name"] for a in agents}
    site = Path(metadata.distribution("ongridd").locate_file("")).resolve()
    for a in agents:
        assert Path(a["source"]).resolve().is_relative_to(site), a["source"]
    res = _run(tmp_path, "plugins", "list", "--json")
    assert res.returncode == 0, res.stderr
    plugins = {p["name"]: p for p in json.loads(res.stdout)}
    for name in ("ongrid_host", "ongrid_prometheus", "ongrid_incidents", "ongrid_knowledge",
                 "ongrid_topology", "ongrid_loki", "ongrid_tempo",
                 "ongrid_slack", "ongrid_telegram", "ongrid_feishu"):
        assert plugins[name]["ok"], plugins[name]
        assert Path(plugins[name]["location"]).resolve().is_relative_to(site)


def test_installed_package_ships_the_web_console():
    need(_installed_non_editable(), "ongridd is not installed non-editably in this environment "
                                    "(the README's test command installs it so)")
    files = {str(f) for f in metadata.distribution("ongridd").files or ()}
    assert {"ongridd/server/static/index.html", "ongridd/server/static/app.js",
            "ongridd/server/static/app.css"} <= files
    from ongridd.server.webpage import ASSETS, console_asset

    for name in ASSETS:  # readable through the installed package, not the checkout
        body, _ = console_asset(name)
        assert body
