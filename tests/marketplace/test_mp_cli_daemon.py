"""`ongrid marketplace ...` and the HTTP API against a live daemon."""

from __future__ import annotations

import json
import secrets
import socket
from pathlib import Path

import httpx2
import pytest
import trio
from mp_helpers import CLI, clean_plugins, make_config, python_env

from ongridd.daemon import run_daemon

DISK = "ongrid-example-diskreport"
TOKEN = "marketplace-test-" + secrets.token_hex(8)


@pytest.fixture
async def daemon(tmp_path: Path, example_state_dir: Path, monkeypatch):
    tokens_env = "ONGRID_TEST_TOKENS_" + secrets.token_hex(4).upper()
    monkeypatch.setenv(tokens_env, f"alice:{TOKEN}")
    monkeypatch.delenv("ONGRID_TOKEN", raising=False)
    monkeypatch.delenv("ONGRID_URL", raising=False)
    clean_plugins(example_state_dir / "plugins")
    config = make_config(tmp_path, example_state_dir,
                         server={"listen": "127.0.0.1:0", "tokens_env": tokens_env})
    async with trio.open_nursery() as nursery:
        handle = await nursery.start(lambda task_status: run_daemon(config, handle_signals=False,
                                                                    task_status=task_status))
        try:
            yield handle
        finally:
            handle.shutdown.set()
    clean_plugins(example_state_dir / "plugins")


async def ongrid(*argv: str, cwd: Path) -> tuple[int, str, str]:
    proc = await trio.run_process([*CLI, *argv], capture_stdout=True, capture_stderr=True, check=False,
                                  env=python_env(), cwd=str(cwd))
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


async def _agents(handle) -> set[str]:
    async with httpx2.AsyncClient(timeout=30) as client:
        resp = await client.get(handle.base_url + "/api/agents", headers={"Authorization": f"Bearer {TOKEN}"})
    assert resp.status_code == 200
    return {a["name"] for a in resp.json()}


async def test_cli_list_install_uninstall_on_a_live_daemon(daemon, tmp_path):
    url = daemon.base_url
    code, out, err = await ongrid("marketplace", "list", "--json", "--url", url, "--token", TOKEN, cwd=tmp_path)
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["name"], r["installed"]) for r in rows] == [(DISK, False), ("ongrid-example-postmortem", False)]
    assert set(rows[0]) == {"name", "version", "description", "installed", "installed_version"}
    assert rows[0]["installed_version"] is None

    code, out, err = await ongrid("marketplace", "install", DISK, "--url", url, cwd=tmp_path)
    assert code == 2 and "HTTP 401" in err  # no token
    assert "disk-leak-hunter" not in await _agents(daemon)

    code, out, err = await ongrid("marketplace", "install", DISK, "--url", url, "--token", TOKEN, cwd=tmp_path)
    assert code == 0, err
    assert f"installed {DISK} 0.1.0 (plugin ongrid_example_diskreport)" in out
    assert "tools: find_deleted_open_files" in out
    # live without a restart: the persona is listed and the next turn's registries have the tool
    assert "disk-leak-hunter" in await _agents(daemon)
    assert "find_deleted_open_files" in daemon.services.marketplace.holder.current.tools

    code, out, err = await ongrid("marketplace", "list", "--json", "--url", url, "--token", TOKEN, cwd=tmp_path)
    assert code == 0 and [(r["installed"], r["installed_version"]) for r in json.loads(out)] == [(True, "0.1.0"),
                                                                                                (False, None)]
    code, out, err = await ongrid("marketplace", "list", "--url", url, "--token", TOKEN, cwd=tmp_path)
    assert code == 0 and f"{DISK}  0.1.0  [installed]" in out

    code, out, err = await ongrid("marketplace", "install", DISK, "--url", url, "--token", TOKEN, cwd=tmp_path)
    assert code == 1 and "already installed" in err
    code, out, err = await ongrid("marketplace", "install", "nope", "--url", url, "--token", TOKEN, cwd=tmp_path)
    assert code == 1 and "HTTP 404: no package 'nope' in the marketplace index" in err

    code, out, err = await ongrid("marketplace", "uninstall", DISK, "--url", url, "--token", TOKEN, cwd=tmp_path)
    assert code == 0, err
    assert f"uninstalled {DISK} 0.1.0" in out
    assert "disk-leak-hunter" not in await _agents(daemon)
    code, out, err = await ongrid("marketplace", "uninstall", DISK, "--url", url, "--token", TOKEN, cwd=tmp_path)
    assert code == 1 and "not installed" in err

    events = await daemon.services.store.plugin_store.list_change_events(kind="plugin")
    assert sorted((e["detail"]["action"], e["actor"]) for e in events) == [("install", "alice"),
                                                                          ("uninstall", "alice")]


def test_the_listing_says_when_the_index_offers_another_version_than_the_installed_one(capsys):
    from ongridd.cli.marketplace_cmd import _print_rows

    _print_rows([{"name": "hello", "version": "0.3.0", "description": "d", "installed": True,
                  "installed_version": "0.2.0"},
                 {"name": "same", "version": "1.0", "description": "d", "installed": True, "installed_version": "1.0"},
                 {"name": "new", "version": "2.0", "description": "d", "installed": False, "installed_version": None}],
                False, "")
    out = capsys.readouterr().out
    assert "hello  0.3.0  [installed: 0.2.0; uninstall, then install, to take 0.3.0]" in out
    assert "same  1.0  [installed]" in out and "new  2.0  [not installed]" in out


async def test_http_marketplace_errors(daemon):
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(timeout=60) as client:
        resp = await client.post(daemon.base_url + "/api/marketplace/install", headers=headers, json={"x": 1})
        assert resp.status_code == 400
        resp = await client.post(daemon.base_url + "/api/marketplace/install", headers=headers,
                                 json={"name": "../../etc"})
        assert resp.status_code == 400 and "invalid package name" in resp.json()["error"]["message"]
        resp = await client.post(daemon.base_url + "/api/marketplace/uninstall", headers=headers,
                                 json={"name": DISK})
        assert resp.status_code == 404 and "not installed" in resp.json()["error"]["message"]
        resp = await client.get(daemon.base_url + "/api/marketplace", headers=headers)
        assert resp.status_code == 200 and {e["name"] for e in resp.json()} >= {DISK}


async def test_http_agent_edits_show_in_the_listing(daemon):
    headers = {"Authorization": f"Bearer {TOKEN}"}
    text = ("---\nname: db-helper\ndescription: Helps with databases.\ntools: [get_host_load]\n---\n"
            "You help with databases.\n")
    async with httpx2.AsyncClient(timeout=30) as client:
        resp = await client.put(daemon.base_url + "/api/agents/db-helper", headers=headers, content=text)
        assert resp.status_code == 200, resp.text
        assert "db-helper" in await _agents(daemon)
        resp = await client.get(daemon.base_url + "/api/agents/db-helper", headers=headers)
        assert resp.json()["description"] == "Helps with databases."
        resp = await client.delete(daemon.base_url + "/api/agents/specialist-disk", headers=headers)
        assert resp.status_code == 400 and "cannot be deleted" in resp.json()["error"]["message"]
        resp = await client.delete(daemon.base_url + "/api/agents/db-helper", headers=headers)
        assert resp.status_code == 200 and resp.json()["deleted"] is True
        assert "db-helper" not in await _agents(daemon)


async def test_cli_without_a_daemon(tmp_path):
    with socket.socket() as held:  # bound, never listening: connections are refused while we hold it
        held.bind(("127.0.0.1", 0))
        await _without_a_daemon(tmp_path, f"http://127.0.0.1:{held.getsockname()[1]}")


async def _without_a_daemon(tmp_path: Path, free: str) -> None:
    code, out, err = await ongrid("marketplace", "install", DISK, "--url", free, cwd=tmp_path)
    assert code == 2 and "cannot reach the daemon" in err
    state = tmp_path / "state"
    (state / "plugins" / DISK).mkdir(parents=True)
    code, out, err = await ongrid("marketplace", "list", "--json", "--url", free, "--state-dir", str(state),
                                  cwd=tmp_path)
    assert code == 0, err
    assert "and what is installed in" in err
    assert [r["installed"] for r in json.loads(out)] == [True, False]
    code, out, err = await ongrid("marketplace", "list", "--index", str(tmp_path / "none.yaml"), "--url", free,
                                  cwd=tmp_path)
    assert code == 2 and "marketplace index not found" in err
    code, out, err = await ongrid("marketplace", "install", DISK, "--url", "ftp://x", cwd=tmp_path)
    assert code == 2 and "--url must look like" in err
