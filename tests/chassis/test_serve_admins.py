"""``server.admins``: only the users it names may change personas and plugins (a real ``ongridd serve``)."""

from __future__ import annotations

import json
import signal

from tests.chassis.test_serve import serving, start

PERSONA = """---
name: night-shift
description: Answers night pages.
when_to_use: Pages at night.
tools: [query_knowledge]
---
You answer night pages briefly.
"""


def test_only_admins_change_personas_and_plugins(tmp_path):
    import httpx2

    cfg = tmp_path / "ongrid.yaml"
    cfg.write_text(json.dumps({"server": {"admins": ["alice"]}}))  # JSON is YAML 1.2
    tokens = {"alice": "tok-alice-0123456789abcdef", "bob": "tok-bob-0123456789abcdef0"}
    with serving(tmp_path, tmp_path / "s", "--config", str(cfg),
                 ONGRID_TOKENS=",".join(f"{u}:{t}" for u, t in tokens.items())) as d:
        def call(user, method, path, body=None, content="text/markdown"):
            headers = {"Authorization": f"Bearer {tokens[user]}", "Content-Type": content}
            return httpx2.request(method, d.url + path, headers=headers, content=body, timeout=10)

        refused = call("bob", "PUT", "/api/agents/night-shift", PERSONA)
        assert refused.status_code == 403
        assert refused.json()["error"] == {
            "code": "forbidden", "message": "changing a persona is for admins; user 'bob' is not one of server.admins"}
        assert call("bob", "GET", "/api/agents/night-shift").status_code == 404  # nothing was written
        assert call("alice", "PUT", "/api/agents/night-shift", PERSONA).status_code == 200
        assert call("bob", "GET", "/api/agents/night-shift").status_code == 200  # everyone still reads
        assert call("bob", "DELETE", "/api/agents/night-shift").status_code == 403
        market = call("bob", "POST", "/api/marketplace/install", json.dumps({"name": "anything"}), "application/json")
        assert market.status_code == 403 and "installing a plugin is for admins" in market.json()["error"]["message"]
        assert call("alice", "DELETE", "/api/agents/night-shift").status_code == 200
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=10) == 0


def test_an_admin_without_a_token_refuses_to_start(tmp_path):
    cfg = tmp_path / "ongrid.yaml"
    cfg.write_text(json.dumps({"server": {"admins": ["alcie"]}}))
    proc = start(tmp_path, "--state-dir", str(tmp_path / "s"), "--listen", "127.0.0.1:0", "--config", str(cfg),
                 ONGRID_TOKENS="alice:tok-alice-0123456789abcdef")
    assert proc.wait(timeout=30) == 2
    assert "server.admins: 'alcie' has no token (users with tokens: alice)" in proc.stderr.read()
