"""What a user does, end to end, with the real processes: ``ongrid demo``;
``ongrid ask`` against ``ongridd serve`` whose worker queries a real
Prometheus; ``ongrid chat``; systemd readiness and watchdog."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time

import pytest

from tests.conftest import need
from tests.e2e.e2e_helpers import assert_rows_closed, env, ongrid, ongridd, rows, start_daemon, start_fake_llm, stop


def test_ongrid_demo_names_the_real_largest_files():
    res = subprocess.run(ongrid("demo"), env=env(), capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    made = re.search(r"Made (\d+) real files", out)
    assert made and int(made.group(1)) >= 5
    head, answer = out.split("=== Answer ===")
    assert "Model: scripted model" in out.splitlines()[1]  # said before anything runs
    assert re.search(r"^  \S specialist-disk \[completed\] ", head, re.MULTILINE)  # one line per tile state
    assert '{"task_id"' not in out and "AgentTool: {" not in out  # no raw tool-result JSON
    largest = re.search(r"the largest file made was (\S+); it is named in the answer", out)
    assert largest, out[-2000:]
    assert largest.group(1) in answer.split("=== Session tree ===")[0]
    assert "**host_find_large_files** — host: local" in answer  # stdout is a pipe: the markdown as plain text
    assert re.search(r"^\| path \| allocated \| size \|", answer, re.MULTILINE)  # the files as a table
    tree = out.split("=== Session tree ===")[1]
    assert "specialist-disk [completed]" in tree and "closed" in tree
    audit = out.split("=== Audit (every tool call) ===")[1]
    for tool in ("host_du_summary", "host_find_large_files", "AgentTool"):
        assert re.search(rf"{tool}\s+ok", audit), audit
    removed = re.search(r"^\(removed (\S+): the demo's files and state; --keep keeps them\)$", out, re.MULTILINE)
    assert removed and not os.path.exists(removed.group(1)), out[-500:]


def test_ongrid_demo_serve_keeps_its_daemon_for_the_console_until_ctrl_c():
    """``--serve``: after the report the demo's daemon stays up on ``--listen`` — the console page and
    the demo's thread are there to look at — until Ctrl-C, which stops it and removes its files."""
    import signal
    import urllib.request

    from tests.e2e.e2e_helpers import free_port

    port = free_port()
    proc = subprocess.Popen(ongrid("demo", "--serve", "--listen", f"127.0.0.1:{port}"), env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = ""
        deadline = time.monotonic() + 240
        while "Serving until Ctrl-C" not in seen and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen += line
        assert f"the web console at http://127.0.0.1:{port}/#/t/demo" in seen, seen[-2000:]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/sessions", timeout=10) as resp:
            threads = json.loads(resp.read())
        assert [t["thread"] for t in threads] == ["demo"] and threads[0]["last_turn"] == "completed", threads
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as resp:
            assert resp.status == 200 and "text/html" in resp.headers["Content-Type"]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-2000:]
    removed = re.search(r"^\(removed (\S+): the demo's files and state", out, re.MULTILINE)
    assert removed and not os.path.exists(removed.group(1)), out[-500:]


def test_ongrid_demo_that_cannot_listen_says_why_in_a_line():
    """A --listen the daemon refuses (all interfaces with no tokens) or a port in use: one line
    saying why, exit 2, no traceback, the demo's files removed."""
    from tests.e2e.e2e_helpers import free_port

    e = {k: v for k, v in env().items() if k != "ONGRID_TOKENS"}
    res = subprocess.run(ongrid("demo", "--listen", f"0.0.0.0:{free_port()}"), env=e, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "ongrid demo: the daemon did not start: refusing to listen on 0.0.0.0" in res.stderr
    assert "Traceback" not in res.stderr and "(removed " in res.stdout
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = subprocess.run(ongrid("demo", "--listen", f"127.0.0.1:{port}"), env=e, capture_output=True,
                             text=True, timeout=120)
    assert res.returncode == 2 and "Address already in use" in res.stderr and "Traceback" not in res.stderr


def test_ongrid_demo_json_prints_the_frames_alone_on_stdout():
    res = subprocess.run(ongrid("demo", "--json"), env=env(), capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    frames = [json.loads(line) for line in res.stdout.splitlines()]  # every line a frame, as ask --json
    assert frames[0]["type"] == "session" and frames[-1]["type"] == "final"
    assert {"token", "tool", "agent_tile", "agent_result"} <= {f["type"] for f in frames}
    assert "=== Answer ===" in res.stderr and "the largest file made was" in res.stderr  # the report


def test_ongrid_demo_with_an_unreachable_model_says_there_is_no_answer():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = subprocess.run(ongrid("demo", "--llm-base-url", f"http://127.0.0.1:{port}/v1", "--model", "x"),
                         env=env(), capture_output=True, text=True, timeout=240)
    assert res.returncode == 1, res.stderr[-3000:]
    assert "[error] provider_error" in res.stderr and "No answer: the turn ended with the error above" in res.stderr
    for section in ("=== Answer ===", "=== Session tree ===", "=== Audit", "Answered by"):  # nothing to show
        assert section not in res.stdout, res.stdout
    # the demo's own lines only: the daemon's retries and errors are not interleaved as log lines
    assert "model_call_retry" not in res.stderr and "model_call_failed" not in res.stderr, res.stderr[-3000:]


def _prometheus_binaries() -> bool:
    return all(shutil.which(b) for b in ("prometheus", "prometheus-node-exporter"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prometheus(tmp_path):
    """A real Prometheus scraping a real node exporter, on loopback ports."""
    need(_prometheus_binaries(), "prometheus and prometheus-node-exporter are not installed")
    import httpx2

    ne_port, prom_port = _free_port(), _free_port()
    ne = subprocess.Popen(["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{ne_port}"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: node\n"
                   f"    static_configs: [{{targets: ['127.0.0.1:{ne_port}']}}]\n")
    prom = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{prom_port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                r = httpx2.get(url + "/api/v1/query", params={"query": 'up{job="node"}'}, timeout=2)
                if r.status_code == 200 and r.json()["data"]["result"]:
                    break
            except httpx2.HTTPError:
                pass
            time.sleep(0.25)
        else:
            raise AssertionError("prometheus did not scrape the node exporter in time")
        yield url
    finally:
        for p in (prom, ne):
            p.terminate()
            p.wait(timeout=10)


def test_ask_against_serve_whose_worker_queries_real_prometheus(tmp_path, prometheus):
    script = {
        "default": [
            {"tool_calls": [{"name": "AgentTool", "arguments": {
                "description": "Is the node exporter up?", "subagent_type": "incident-investigator",
                "prompt": "Check with PromQL whether the node exporter target is up (job node)."}}]},
            {"content_from_tool_results": True},
        ],
        "incident-investigator": [
            {"tool_calls": [{"name": "query_promql", "arguments": {"query": 'up{job="node"}'}}]},
            {"content_from_tool_results": True},
        ],
    }
    llm, llm_url = start_fake_llm(tmp_path, script)
    daemon, url = start_daemon(tmp_path, llm_url, ONGRID_PROMETHEUS_URL=prometheus)
    try:
        res = subprocess.run(ongrid("ask", "--url", url, "Is the node exporter up?"), env=env(),
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        answer = res.stdout
        # the answer carries the real PromQL result: the live target's labels and up == 1
        name, _, body = answer.strip().partition(": ")
        dispatch = json.loads(body)
        assert name == "AgentTool" and dispatch["status"] == "completed"
        tool, _, result = dispatch["result"].partition(": ")
        series = json.loads(result)["series"]
        assert tool == "query_promql" and len(series) == 1
        assert series[0]["metric"]["job"] == "node" and series[0]["metric"]["instance"].startswith("127.0.0.1:")
        assert float(series[0]["value"]) == 1.0
        session = re.search(r"session ([0-9a-f-]{36})", res.stderr).group(1)
        audit = json.loads(subprocess.run(ongrid("sessions", "audit", session, "--json", "--url", url),
                                          env=env(), capture_output=True, text=True, timeout=60).stdout)
        assert [(a["agent_id"], a["tool_name"], a["status"]) for a in audit] == [
            ("incident-investigator", "query_promql", "ok"), ("default", "AgentTool", "ok")]
        assert stop(daemon) == 0
    finally:
        stop(daemon)
        stop(llm)
    assert_rows_closed(tmp_path / "state" / "ongrid.db")


def test_chat_streams_a_turn_and_quits_on_eof(tmp_path):
    script = {"default": [{"content": "Hello from the coordinator: nothing is on fire."}]}
    llm, llm_url = start_fake_llm(tmp_path, script)
    daemon, url = start_daemon(tmp_path, llm_url)
    try:
        chat = subprocess.Popen(ongrid("chat", "--url", url, "--thread", "ops"), env=env(),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        chat.stdin.write("anything on fire?\n")
        chat.stdin.flush()
        deadline = time.monotonic() + 60
        seen = ""
        while "nothing is on fire" not in seen and time.monotonic() < deadline:
            seen += chat.stdout.readline()
        assert "nothing is on fire" in seen
        assert "[new thread ops" in seen
        chat.stdin.close()  # EOF quits
        assert chat.wait(timeout=20) == 0
        again = subprocess.Popen(ongrid("chat", "--url", url, "--thread", "ops"), env=env(),
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = again.stdout.readline()
        again.stdin.close()
        assert again.wait(timeout=20) == 0
        assert "[re-attached to thread ops" in first
        msgs = rows(tmp_path / "state" / "ongrid.db", "select role, content from chat_messages order by seq")
        assert [m["role"] for m in msgs] == ["user", "assistant"]
    finally:
        stop(daemon)
        stop(llm)


def test_sd_notify_ready_and_watchdog(tmp_path):
    sock_path = tmp_path / "notify.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(str(sock_path))
    server.settimeout(60)
    port = _free_port()
    proc = subprocess.Popen(ongridd("serve", "--state-dir", str(tmp_path / "s"), "--listen", f"127.0.0.1:{port}"),
                            env=env(NOTIFY_SOCKET=str(sock_path), WATCHDOG_USEC="1000000"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        got = []
        while not any("WATCHDOG=1" in g for g in got) or not any("READY=1" in g for g in got):
            got.append(server.recv(4096).decode())
        ready = next(i for i, g in enumerate(got) if "READY=1" in g)
        import httpx2

        assert httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200  # serving when READY
        assert ready >= 0
        proc.send_signal(15)
        assert proc.wait(timeout=10) == 0
        server.settimeout(2)
        try:
            while True:
                got.append(server.recv(4096).decode())
        except TimeoutError:
            pass
        assert any("STOPPING=1" in g for g in got)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.close()


def test_piped_chat_sends_the_next_line_again_after_a_restart(tmp_path):
    # a script piped into ongrid chat while the daemon restarts (SIGTERM, then started again): the line
    # whose turn was stopped is not sent twice; the next line, refused busy by the stopping daemon or not
    # sent at all, is sent again once the chat has re-attached, and is answered
    script = {"default": [{"delay_s": 60, "content": "never"}, {"content": "second line answered"}]}
    llm, llm_url = start_fake_llm(tmp_path, script)
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    listen = f"127.0.0.1:{port.getsockname()[1]}"
    port.close()
    url = f"http://{listen}"

    def serve() -> subprocess.Popen:
        proc = subprocess.Popen(ongridd("serve", "--state-dir", str(tmp_path / "state"), "--listen", listen),
                                cwd=tmp_path, env=env(ONGRID_LLM_BASE_URL=llm_url, ONGRID_LLM_MODEL="scripted"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", int(listen.rsplit(":", 1)[1])), timeout=1):
                    return proc
            except OSError:
                time.sleep(0.1)
        raise AssertionError("the daemon did not start")

    daemon = serve()
    chat = None
    try:
        chat = subprocess.Popen(ongrid("chat", "--url", url, "--thread", "script"), env=env(),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        chat.stdin.write("first line\nsecond line\n")
        chat.stdin.close()
        seen = ""
        while "you> first line" not in seen:
            seen += chat.stdout.readline()
        time.sleep(1.0)  # the first line's model call is under way
        daemon.terminate()
        assert daemon.wait(timeout=30) == 0
        daemon = serve()
        chat.stdin = None  # closed above: the input ended
        out, _ = chat.communicate(timeout=120)
        seen += out
        assert "stopped by a daemon shutdown" in seen
        assert "second line answered" in seen, seen
        assert chat.returncode == 1, seen  # the first line got no answer
        users = rows(tmp_path / "state" / "ongrid.db", "select content from chat_messages where role = 'user'")
        assert [u["content"] for u in users] == ["first line", "second line"]
    finally:
        if chat is not None and chat.poll() is None:
            chat.kill()
        stop(daemon)
        stop(llm)
