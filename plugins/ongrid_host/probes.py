"""Network probes from this host: TCP connect and DNS queries.

Probes run from the Ongrid host only (``host: local``): that is where the
daemon can measure timings itself.  To look from another host, use
``host_bash`` there (``ss``, ``ip route get``).
"""

from __future__ import annotations

import errno
import ipaddress
import re
import time
from typing import Any

import dns.asyncbackend
import dns.asyncquery
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.resolver
import dns.reversename
import trio

from ongrid_host.egress import ProbeTargets
from ongridd.plugins.api import ascii_digits, ToolError

MAX_TCP_ADDRESSES = 4
MAX_DNS_RECORDS = 50
DNS_TYPES = ("A", "AAAA", "CNAME", "MX", "TXT", "NS", "SOA", "PTR")
_HOST_RE = re.compile(r"^[A-Za-z0-9_.:\-\[\]%]{1,253}\Z")

_FILTERED = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EACCES, errno.EPERM}


def _ms(start: float) -> float:
    return round((time.monotonic() - start) * 1000, 2)


def check_target_host(host: str, field: str = "host") -> str:
    if not isinstance(host, str) or not _HOST_RE.match(host):
        raise ToolError(f"{field}: {host!r} is not a host name or IP address")
    return host.strip("[]")


async def resolve(host: str, port: int, *, timeout_s: float) -> tuple[list[tuple], float]:
    """getaddrinfo with a time limit → (addresses, dns_ms).  Raises ToolError."""
    start = time.monotonic()
    with trio.move_on_after(timeout_s):
        try:
            infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
        except trio.socket.gaierror as exc:
            raise ToolError(f"cannot resolve {host!r}: {exc.strerror or exc}") from None
        seen, out = set(), []
        for family, _type, _proto, _canon, sockaddr in infos:
            if sockaddr[:2] not in seen:
                seen.add(sockaddr[:2])
                out.append((family, sockaddr))
        return out, _ms(start)
    raise ToolError(f"resolving {host!r} took longer than {timeout_s:g} s")


async def _connect_one(family: int, sockaddr: tuple, timeout_s: float) -> dict[str, Any]:
    start = time.monotonic()
    sock = trio.socket.socket(family, trio.socket.SOCK_STREAM)
    try:
        with trio.move_on_after(timeout_s):
            try:
                await sock.connect(sockaddr)
            except OSError as exc:
                if exc.errno == errno.ECONNREFUSED:
                    state = "closed"
                elif exc.errno in _FILTERED:
                    state = "filtered"
                else:
                    state = "error"
                return {"address": sockaddr[0], "state": state, "connect_ms": _ms(start),
                        "error": exc.strerror or str(exc)}
            return {"address": sockaddr[0], "state": "open", "connect_ms": _ms(start)}
        return {"address": sockaddr[0], "state": "timeout", "connect_ms": _ms(start),
                "error": f"no answer within {timeout_s:g} s (a firewall dropping packets, or the host is down)"}
    finally:
        sock.close()


async def probe_tcp(host: str, port: int, *, timeout_s: float, targets: ProbeTargets) -> dict[str, Any]:
    """``host_probe_tcp``: connect to ``host:port``.

    ``state``: ``open`` (connected), ``closed`` (refused: reachable, nothing
    listening), ``filtered`` (an ICMP unreachable/prohibited answer),
    ``timeout`` (no answer at all), ``error`` (anything else).  Tries up to
    ``MAX_TCP_ADDRESSES`` resolved addresses in order, stopping at the first
    open or closed one.  Raises ToolError when the name cannot be resolved,
    or when the host is not among ``targets`` (checked before the name is
    resolved; a name resolving to a link-local address is refused too).
    """
    host = check_target_host(host)
    targets.check_host(host, "target")
    deadline = time.monotonic() + timeout_s
    addresses, dns_ms = await resolve(host, port, timeout_s=timeout_s)
    for _family, sockaddr in addresses[:MAX_TCP_ADDRESSES]:
        targets.check_resolved(host, sockaddr[0], "target")
    attempts = []
    for family, sockaddr in addresses[:MAX_TCP_ADDRESSES]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        attempt = await _connect_one(family, sockaddr, remaining)
        attempts.append(attempt)
        if attempt["state"] in ("open", "closed"):
            break
    final = attempts[-1] if attempts else {"state": "timeout", "address": None, "connect_ms": None}
    return {"host": "local", "target": host, "port": port, "state": final["state"],
            "address": final["address"], "connect_ms": final["connect_ms"], "dns_ms": dns_ms,
            "error": final.get("error"), "attempts": attempts}


# ---- DNS ----------------------------------------------------------------------


def parse_server(server: str) -> tuple[str, int]:
    """``"1.2.3.4"``, ``"1.2.3.4:5353"``, ``"::1"``, ``"[::1]:5353"`` → (ip, port).
    Raises ToolError: the server must be an IP address."""
    s = server.strip()
    port = 53
    m = re.match(r"^\[(.+)\]:(\d+)$", s)
    if m:
        s, port = m.group(1), int(m.group(2))
    elif s.count(":") == 1:
        s, p = s.split(":")
        if not ascii_digits(p):
            raise ToolError(f"server: bad port in {server!r}")
        port = int(p)
    try:
        ipaddress.ip_address(s)
    except ValueError:
        raise ToolError(f"server: {server!r} is not an IP address (optionally with :port)") from None
    if not 1 <= port <= 65535:
        raise ToolError(f"server: port {port} out of range 1..65535")
    return s, port


def _system_nameserver() -> str:
    try:
        servers = dns.resolver.Resolver().nameservers
    except dns.resolver.NoResolverConfiguration:
        servers = []
    for s in servers:
        if isinstance(s, str):
            return s
    raise ToolError("no nameserver configured in /etc/resolv.conf; give server explicitly")


def _rrsets(section: list, limit: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for rrset in section:
        for rdata in rrset:
            if len(out) >= limit:
                return out
            out.append({"name": rrset.name.to_text(), "ttl": rrset.ttl,
                        "type": dns.rdatatype.to_text(rrset.rdtype), "value": rdata.to_text()})
    return out


async def probe_dns(name: str, rtype: str, *, server: str | None, timeout_s: float,
                    targets: ProbeTargets) -> dict[str, Any]:
    """``host_probe_dns``: one query (recursion desired) to ``server`` or the
    first nameserver in /etc/resolv.conf; UDP, retried over TCP when the
    answer is truncated (dnspython, Trio backend).

    An NXDOMAIN or an empty answer is a result (``rcode``), not an error.
    Raises ToolError for a bad name/type/server, a name (for PTR: an
    address) or a server that is not among ``targets`` (the query would
    carry the name out), no answer within ``timeout_s``, or a network error
    (e.g. ICMP port unreachable).
    """

    if rtype not in DNS_TYPES:
        raise ToolError(f"type: {rtype!r} is not one of {', '.join(DNS_TYPES)}")
    query_name = name
    if rtype == "PTR":
        try:
            query_name = dns.reversename.from_address(name).to_text()
        except (ValueError, dns.exception.SyntaxError):
            pass  # already a reverse name such as 4.3.2.1.in-addr.arpa
    try:
        qname = dns.name.from_text(query_name)
    except dns.exception.DNSException as exc:
        raise ToolError(f"name: {name!r} is not a valid DNS name: {exc}") from None
    address = None  # a reverse name is checked as the address it names
    if qname.is_subdomain(dns.reversename.ipv4_reverse_domain) or qname.is_subdomain(
            dns.reversename.ipv6_reverse_domain):
        try:
            address = dns.reversename.to_address(qname)
        except (ValueError, dns.exception.SyntaxError):
            pass  # a partial one (10.in-addr.arpa): a name like any other
    targets.check_host(address or qname.to_text(omit_final_dot=True), "name")
    ip, port = parse_server(server) if server else (_system_nameserver(), 53)
    if server:
        targets.check_host(ip, "server")
    query = dns.message.make_query(qname, dns.rdatatype.from_text(rtype))
    start = time.monotonic()
    try:
        response, used_tcp = await dns.asyncquery.udp_with_fallback(
            query, ip, timeout=timeout_s, port=port, backend=dns.asyncbackend.get_backend("trio"))
    except dns.exception.Timeout:
        raise ToolError(f"no answer from DNS server {ip}:{port} within {timeout_s:g} s") from None
    except OSError as exc:
        raise ToolError(f"DNS server {ip}:{port} unreachable: {exc.strerror or exc}") from None
    except dns.exception.DNSException as exc:
        raise ToolError(f"bad answer from DNS server {ip}:{port}: {exc}") from None
    duration_ms = _ms(start)
    return {
        "host": "local",
        "name": qname.to_text(),
        "type": rtype,
        "server": f"{ip}:{port}",
        "rcode": dns.rcode.to_text(response.rcode()),
        "flags": dns.flags.to_text(response.flags).split(),
        "answers": _rrsets(response.answer, MAX_DNS_RECORDS),
        "authority": _rrsets(response.authority, 5),
        "used_tcp": used_tcp,
        "duration_ms": duration_ms,
    }
