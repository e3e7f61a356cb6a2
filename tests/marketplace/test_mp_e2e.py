"""End to end on the real daemon and the scripted model: a turn in flight
during an install finishes on its old snapshot; the next turn dispatches
the new persona, whose worker calls the new tool on this host; after the
uninstall the persona is gone again — all without a restart."""

from __future__ import annotations

import json
import os
import sys
from functools import partial
from pathlib import Path

import httpx2
import trio
from mp_helpers import clean_plugins, make_config
from trio_websocket import open_websocket_url

from ongridd.daemon import run_daemon
from ongridd.fakellm import open_fake_llm

DISK = "ongrid-example-diskreport"
WAITER = "mp_e2e_waiter"

WAITER_CODE = '''
"""Test plugin: a tool that blocks until the test releases it."""
import trio
from ongridd.plugins.api import Tool, hookimpl

ENTERED = trio.Event()
RELEASE = trio.Event()

async def _wait(args, ctx):
    ENTERED.set()
    await RELEASE.wait()
    return "released"

@hookimpl
def ongrid_register_tools(register, context):
    register(Tool(name="mp_gate_wait", description="Blocks until the test releases it.", handler=_wait,
                  timeout_s=120))
'''

WAITER_PERSONA = """---
name: mp-waiter
description: Waits at a gate (marketplace test).
tools: [mp_gate_wait]
max_turns: 3
---
You wait.
"""


def agent_call(persona: str, prompt: str) -> dict:
    return {"name": "AgentTool", "arguments": {"description": f"ask {persona}", "subagent_type": persona,
                                               "prompt": prompt}}


SCRIPT = {
    "default": [
        # turn 1: started before the install, finished after it
        {"tool_calls": [agent_call("mp-waiter", "wait at the gate")]},
        {"tool_calls": [agent_call("disk-leak-hunter", "turn one: find deleted files still held open")]},
        {"content_from_tool_results": True},
        # turn 2: after the install
        {"tool_calls": [agent_call("disk-leak-hunter", "turn two: find deleted files still held open")]},
        {"content_from_tool_results": True},
        # turn 3: after the uninstall
        {"tool_calls": [agent_call("disk-leak-hunter", "turn three: find deleted files still held open")]},
        {"content_from_tool_results": True},
    ],
    "mp-waiter": [
        {"tool_calls": [{"name": "mp_gate_wait", "arguments": {}}]},
        {"content": "the gate opened"},
    ],
    "disk-leak-hunter": [
        {"tool_calls": [{"name": "find_deleted_open_files", "arguments": {"min_size_mb": 0, "top_n": 200}}]},
        {"content_from_tool_results": True},
    ],
}


def install_waiter(state_dir: Path) -> None:
    folder = state_dir / "plugins" / "mp-e2e-waiter"
    folder.mkdir(parents=True)
    (folder / f"{WAITER}.py").write_text(WAITER_CODE, encoding="utf-8")
    info = folder / f"{WAITER}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mp-e2e-waiter\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[ongrid]\n{WAITER} = {WAITER}\n")


class Chat:
    def __init__(self, conn):
        self.conn = conn

    async def ask(self, text: str) -> dict:
        await self.conn.send_message(json.dumps({"type": "user_message", "text": text}))
        with trio.fail_after(120):
            while True:
                frame = json.loads(await self.conn.get_message())
                if frame.get("type") in ("final", "error"):
                    return frame


def agent_result(text: str) -> dict:
    """The AgentTool result in a ``content_from_tool_results`` answer."""
    for line in text.splitlines():
        if line.startswith("AgentTool: "):
            return json.loads(line[len("AgentTool: "):])
    raise AssertionError(f"no AgentTool result in {text!r}")


def coordinator_requests(fake) -> list:
    return [r for r in fake.requests if r.agent == "default"]


def tool_names(request) -> set[str]:
    return {t["function"]["name"] for t in request.body.get("tools") or ()}


def in_catalog(request, persona: str) -> bool:
    """Whether the agent catalog the coordinator was shown lists ``persona``."""
    text = "\n".join(str(m.get("content") or "") for m in request.body["messages"])
    return f"- **{persona}** —" in text


async def test_turns_see_installs_and_uninstalls_from_their_next_turn(tmp_path, example_state_dir):
    clean_plugins(example_state_dir / "plugins")
    install_waiter(example_state_dir)
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "mp-waiter.md").write_text(WAITER_PERSONA, encoding="utf-8")
    held = tmp_path / "held-open.log"
    try:
        async with open_fake_llm(SCRIPT) as fake:
            config = make_config(tmp_path, example_state_dir, server={"listen": "127.0.0.1:0"},
                                 llm={"base_url": fake.base_url, "model": "scripted", "max_retries": 0})
            async with trio.open_nursery() as nursery:
                handle = await nursery.start(partial(run_daemon, config, handle_signals=False))
                try:
                    await _scenario(handle, fake, held)
                finally:
                    handle.shutdown.set()
    finally:
        clean_plugins(example_state_dir / "plugins")


async def _scenario(handle, fake, held: Path) -> None:
    waiter = sys.modules[WAITER]
    ws_url = handle.base_url.replace("http://", "ws://") + "/ws"
    async with httpx2.AsyncClient(timeout=300) as http, open_websocket_url(ws_url) as conn:
        await conn.send_message(json.dumps({"type": "hello", "thread": "marketplace-e2e"}))
        assert json.loads(await conn.get_message())["type"] == "session"
        chat = Chat(conn)

        # turn 1 is running (its worker waits at the gate) while the package installs
        async with trio.open_nursery() as nursery:
            first: dict = {}

            async def turn_one() -> None:
                first.update(await chat.ask("turn one"))

            nursery.start_soon(turn_one)
            with trio.fail_after(60):
                await waiter.ENTERED.wait()
            resp = await http.post(handle.base_url + "/api/marketplace/install", json={"name": DISK})
            assert resp.status_code == 200, resp.text
            assert "find_deleted_open_files" in handle.services.marketplace.holder.current.tools
            waiter.RELEASE.set()
        assert first["type"] == "final", first
        assert len([r for r in fake.requests if r.agent == "mp-waiter"]) == 2  # the worker finished
        assert "subagent_type 'disk-leak-hunter'" in first["text"]  # its snapshot predates the install
        turn1 = coordinator_requests(fake)
        assert turn1 and not any(in_catalog(r, "disk-leak-hunter") for r in turn1)
        assert all(in_catalog(r, "mp-waiter") for r in turn1)

        # turn 2: the new persona is in the catalog and dispatchable; its worker runs the new tool here
        async with await trio.open_file(held, "wb") as fh:
            await fh.write(os.urandom(2 * 1024 * 1024))
            await fh.flush()
            held.unlink()
            second = await chat.ask("turn two")
        assert second["type"] == "final", second
        dispatch = agent_result(second["text"])
        assert dispatch["subagent_type"] == "disk-leak-hunter" and dispatch["status"] == "completed"
        assert str(held) in dispatch["result"]  # read from this host's /proc by the installed tool
        turn2 = coordinator_requests(fake)[len(turn1):]
        assert in_catalog(turn2[0], "disk-leak-hunter")
        assert "find_deleted_open_files" in tool_names(turn2[0])  # the redirect stub
        worker = [r for r in fake.requests if r.agent == "disk-leak-hunter"]
        assert worker and "find_deleted_open_files" in tool_names(worker[0])

        # turn 3: after the uninstall the persona and the stub are gone
        resp = await http.post(handle.base_url + "/api/marketplace/uninstall", json={"name": DISK})
        assert resp.status_code == 200, resp.text
        third = await chat.ask("turn three")
        assert third["type"] == "final", third
        assert "subagent_type 'disk-leak-hunter'" in third["text"]
        turn3 = coordinator_requests(fake)[len(turn1) + len(turn2):]
        assert "find_deleted_open_files" not in tool_names(turn3[0])
        assert not in_catalog(turn3[0], "disk-leak-hunter")
