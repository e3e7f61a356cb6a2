"""``ongrid ask`` and ``ongrid sessions tree|audit`` as real subprocesses
against the daemon (docs/architecture.md §15.1) — including the full turn: two
specialists in parallel, one calls a destructive tool the reviewer rejects."""

from __future__ import annotations

import json
import socket

import trio
from rt_helpers import agent_call, ongrid_cmd, open_daemon, subprocess_env


async def run_cli(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    with trio.fail_after(timeout):
        proc = await trio.run_process(ongrid_cmd(*args), capture_stdout=True, capture_stderr=True, check=False,
                                      env=subprocess_env(ONGRID_TOKEN="", ONGRID_URL=""))
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


DONE_SCRIPT = {
    "default": [
        {"content": "Dispatching the disk and ops specialists.",
         "tool_calls": [agent_call("specialist-disk", "What fills ${DISK_DIR} on host local?", "disk usage"),
                        agent_call("specialist-ops", "Restart nginx on host local: users see 502s.", "restart nginx")]},
        {"content_from_tool_results": True},
    ],
    "specialist-disk": [
        {"tool_calls": [{"name": "host_du_summary", "arguments": {"paths": ["${DISK_DIR}"], "depth": 1}}]},
        {"content_from_tool_results": True},
    ],
    "specialist-ops": [
        {"tool_calls": [{"name": "host_restart_service",
                         "arguments": {"service": "nginx", "reason": "users see 502s on web"}}]},
        {"content_from_tool_results": True},
    ],
    "reviewer": [{"content": "Decision: reject\n- runbook: fail — no runbook covers restarting nginx here"}],
}


def walk(node: dict, depth: int = 0):
    yield depth, node
    for child in node["children"]:
        yield from walk(child, depth + 1)


async def test_done_turn_with_ask_and_sessions(tmp_path):
    disk = tmp_path / "disk" / "logs"
    disk.mkdir(parents=True)
    (disk / "big.log").write_bytes(b"x" * 300_000)
    async with open_daemon(tmp_path, DONE_SCRIPT) as d:
        d.env["DISK_DIR"] = str(tmp_path / "disk")
        code, out, err = await run_cli("ask", "--url", d.base_url, "--json", "--thread", "done",
                                       "What fills the disk, and restart nginx please")
        assert code == 0, err
        frames = [json.loads(line) for line in out.splitlines()]  # every frame, one JSON line each
        assert frames[0]["type"] == "session" and frames[-1]["type"] == "final"
        kinds = {f["type"] for f in frames}
        assert {"session", "token", "tool", "agent_tile", "agent_result", "final"} <= kinds
        sid = frames[0]["session_id"]
        final = frames[-1]["text"]
        results = {}
        for line in final.splitlines():  # "AgentTool: {...}" per result the coordinator received
            name, _, rest = line.partition(": ")
            if name == "AgentTool":
                body = json.loads(rest)
                results[body["subagent_type"]] = body
        assert results["specialist-disk"]["status"] == "completed"
        assert "logs" in results["specialist-disk"]["result"]  # the real measurement reached the answer
        ops = results["specialist-ops"]["result"]
        assert ops.startswith("host_restart_service: ")
        rejected = json.loads(ops.split(": ", 1)[1])
        assert rejected["status"] == "rejected" and "no runbook covers restarting nginx" in rejected["reason"]

        code, out, err = await run_cli("sessions", "tree", sid, "--url", d.base_url, "--json")
        assert code == 0, err
        tree = json.loads(out)
        nodes = [(depth, n["agent_id"], n["status"]) for depth, n in walk(tree)]
        assert nodes[0] == (0, "default", "open")
        assert sorted(nodes[1:]) == [(1, "specialist-disk", "completed"), (1, "specialist-ops", "completed"),
                                     (2, "reviewer", "completed")]
        ops = next(n for n in tree["children"] if n["agent_id"] == "specialist-ops")
        assert ops["children"][0]["agent_id"] == "reviewer"
        assert all(n["closed_at"] for _, n in walk(tree) if n["agent_id"] != "default")
        assert {"id", "agent_id", "status", "description", "closed_at", "children"} <= set(tree)

        code, out, err = await run_cli("sessions", "tree", sid, "--url", d.base_url)
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0].startswith("default [open] " + sid)
        assert any(line.startswith("    reviewer [completed → reject]") for line in lines)  # and the decision

        code, out, err = await run_cli("sessions", "audit", sid, "--url", d.base_url, "--json")
        assert code == 0, err
        audit = sorted((a["agent_id"], a["tool_name"], a["status"]) for a in json.loads(out))
        assert audit == [("default", "AgentTool", "ok"), ("default", "AgentTool", "ok"),
                         ("specialist-disk", "host_du_summary", "ok"),
                         ("specialist-ops", "host_restart_service", "rejected")]
        code, out, err = await run_cli("sessions", "audit", sid, "--url", d.base_url)
        header, *rows = out.splitlines()
        assert code == 0 and header.split() == ["ENDED", "AGENT", "TOOL", "STATUS", "DURATION", "ARGUMENTS"]
        assert sum(not line.startswith(" ") for line in rows) == 4 and "host_restart_service" in out \
            and "rejected" in out

        code, out, err = await run_cli("sessions", "tree", "no-such-session", "--url", d.base_url)
        assert code == 1 and "HTTP 404" in err
        # the thread's name, or the start of its id, names the session too (said on stderr)
        for given in ("done", sid[:8]):
            code, out, err = await run_cli("sessions", "tree", given, "--url", d.base_url, "--json")
            assert code == 0 and json.loads(out)["id"] == sid and f"session {sid}" in err, (given, err)
        code, out, err = await run_cli("sessions", "tree", sid[:7], "--url", d.base_url)  # too short to be a prefix
        assert code == 1 and "shorter than 8 characters: give at least 8" in err and "sessions list" in err


async def test_ask_exit_codes_and_plain_output(tmp_path):
    script = {"default": [{"content": "plain answer"}]}
    async with open_daemon(tmp_path, script) as d:
        code, out, err = await run_cli("ask", "--url", d.base_url.replace("http://", "ws://") + "/ws", "hello")
        assert (code, out) == (0, "plain answer\n")
        d.use_script({"default": [{"http_status": 500}]})
        code, out, err = await run_cli("ask", "--url", d.base_url, "hello")
        assert code == 1 and out == "" and "provider_error" in err
        code, out, err = await run_cli("ask", "--url", d.base_url, "--json", "hello")
        assert code == 1
        last = json.loads(out.splitlines()[-1])
        assert last["type"] == "error" and last["code"] == "provider_error"
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, out, err = await run_cli("ask", "--url", f"http://127.0.0.1:{port}", "hello")
    assert code == 2 and "cannot reach the daemon" in err and "connection refused" in err
    code, out, err = await run_cli("ask", "--url", "ftp://nowhere", "hello")
    assert code == 2 and "--url" in err
