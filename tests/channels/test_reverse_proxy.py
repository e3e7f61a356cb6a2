"""The reverse-proxy example of docs/channels.md, run: nginx terminates TLS
(a trustme certificate), forwards Host and the client address, and exposes
only ``/api/channels/``; a signed Slack event through it starts a turn."""

from __future__ import annotations

import re
import shutil
import ssl
import subprocess
import time
from pathlib import Path

import httpx2
import pytest

from tests.channels.doubles import PlatformDouble
from tests.channels.helpers import start_fake_llm, start_serve, stop
from tests.channels.test_slack_bridge import SECRET, TOKEN, event, sign, slack_responder
from tests.conftest import need
from tests.e2e.e2e_helpers import free_port

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[2] / "docs" / "channels.md"


def doc_nginx_block() -> str:
    """The ``server { … }`` example of docs/channels.md."""
    m = re.search(r"<!-- tested: nginx -->\s*```nginx\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert m, "docs/channels.md lost its nginx example"
    return m.group(1)


def start_nginx(tmp: Path, name: str, port: int, upstream: str) -> subprocess.Popen:
    """nginx running the documented server block on ``port`` in front of ``upstream``."""
    server = (doc_nginx_block()
              .replace("listen 443 ssl;", f"listen 127.0.0.1:{port} ssl;")
              .replace("/etc/ssl/ongrid/fullchain.pem", str(tmp / "site.pem"))
              .replace("/etc/ssl/ongrid/privkey.pem", str(tmp / "site.pem"))
              .replace("http://127.0.0.1:8650", upstream))
    root = tmp / f"nginx-{name}"
    root.mkdir()
    conf = root / "nginx.conf"
    conf.write_text(f"""daemon off; pid {root}/nginx.pid; error_log {root}/error.log;
events {{ worker_connections 64; }}
http {{ access_log off; client_body_temp_path {root}/cb; proxy_temp_path {root}/px;
  fastcgi_temp_path {root}/fc; uwsgi_temp_path {root}/uw; scgi_temp_path {root}/sc;
{server}
}}
""")
    return subprocess.Popen(["nginx", "-p", str(root), "-c", str(conf)], stderr=subprocess.PIPE)


def test_the_documented_nginx_example_forwards_signed_events_and_nothing_else(tmp_path):
    need(shutil.which("nginx") is not None, "nginx is not installed")
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("ongrid.example.org", "127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "site.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))

    double = PlatformDouble(slack_responder()).start()
    llm, llm_url = start_fake_llm(tmp_path, {"default": [{"content": "All quiet."}]})
    settings = {"ongrid_slack": {"api_base_url": double.url + "/api", "default_user": "ops", "edit_interval_s": 0}}
    daemon, url = start_serve(tmp_path, llm_url, settings, SLACK_BOT_TOKEN=TOKEN, SLACK_SIGNING_SECRET=SECRET)
    port, probe_port = free_port(), free_port()
    proxy = start_nginx(tmp_path, "main", port, url)
    probe = start_nginx(tmp_path, "probe", probe_port, double.url)  # the same block in front of a recorder
    try:
        client = httpx2.Client(verify=ssl.create_default_context(cafile=str(tmp_path / "ca.pem")), timeout=10,
                               headers={"Host": "ongrid.example.org"})
        base = f"https://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while True:
            try:
                client.get(base + "/")
                break
            except httpx2.HTTPError:
                assert proxy.poll() is None, proxy.stderr.read()
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert client.get(base + "/api/sessions").status_code == 404  # only the channel routes are public
        assert client.get(base + "/").status_code == 404
        body = event("EvP1", "<@UBOT> status?")
        res = client.post(base + "/api/channels/slack/events", content=body, headers=sign(body))
        assert res.status_code == 200
        assert client.post(base + "/api/channels/slack/events", content=body,
                           headers=sign(body, secret="forged-forged-forged")).status_code == 401
        done = double.wait_for(lambda: [u for u in double.find("/chat.update") if u.payload["text"] == "All quiet."],
                               60, "the answer through the proxy")
        assert done[0].payload["channel"] == "C0CHAN"
        # what the proxy forwards: Host, the client address, the scheme
        client.post(f"https://127.0.0.1:{probe_port}/api/channels/slack/events", content=b"{}")
        [seen] = [c for c in double.calls if c.path == "/api/channels/slack/events"]
        assert seen.headers["host"] == "ongrid.example.org"
        assert seen.headers["x-forwarded-for"] == "127.0.0.1" and seen.headers["x-real-ip"] == "127.0.0.1"
        assert seen.headers["x-forwarded-proto"] == "https"
    finally:
        for p in (proxy, probe):
            p.terminate()
            p.wait(timeout=10)
        stop(daemon)
        stop(llm)
        double.stop()
