"""Persona names are compared in NFC everywhere: an NFD spelling of a loaded
name resolves to it in the registry, in AgentTool's ``subagent_type`` and in
``PUT/GET/DELETE /api/agents/{name}`` (real daemon, real HTTP and socket)."""

from __future__ import annotations

import json
import unicodedata
from urllib.parse import quote

import httpx2
from rt_helpers import agent_call, open_daemon

NFC = "spécialiste"  # é as one code point
NFD = unicodedata.normalize("NFD", NFC)  # e + combining acute
assert NFC != NFD

PERSONA = f"""---
name: {NFC}
description: A persona with a non-ASCII name.
when_to_use: NFC tests only.
tools: [rt_echo]
max_turns: 3
---
You echo.
"""


async def test_nfd_spelling_resolves_everywhere(tmp_path):
    (tmp_path / "agents").mkdir(parents=True)
    (tmp_path / "agents" / f"{NFC}.md").write_text(PERSONA, encoding="utf-8")
    script = {
        "default": [{"tool_calls": [agent_call(NFD, "say hello")]}, {"content_from_tool_results": True}],
        NFC: [{"content": "hello from the specialist"}],
    }
    async with open_daemon(tmp_path, script) as d:
        agents = d.handle.services.agents_api.agents
        assert agents.by_name(NFD) is agents.by_name(NFC) is not None

        async with d.ws("nfc") as c:
            final = await c.ask("dispatch the NFD spelling", timeout=30)
        assert final["type"] == "final", final
        body = json.loads(final["text"].split("AgentTool: ", 1)[1].splitlines()[0])
        assert body["status"] == "completed" and body["subagent_type"] == NFC
        assert "hello from the specialist" in body["result"]

        async with httpx2.AsyncClient(base_url=d.base_url, timeout=15) as http:
            got = await http.get(f"/api/agents/{quote(NFD)}")
            assert got.status_code == 200 and got.json()["name"] == NFC
            edited = PERSONA.replace("You echo.", "You echo twice.")
            put = await http.put(f"/api/agents/{quote(NFD)}", content=edited.encode())
            assert put.status_code == 200, put.text
            assert put.json()["name"] == NFC
            assert "twice" in (await http.get(f"/api/agents/{quote(NFC)}")).json()["body"]
            deleted = await http.delete(f"/api/agents/{quote(NFD)}")
            assert deleted.status_code == 200, deleted.text
            assert (await http.get(f"/api/agents/{quote(NFC)}")).status_code == 404
