"""``host_probe_http``: one HTTP(S) request with per-phase timings and the
TLS certificate.

Built on Trio sockets + ``ssl`` + ``h11`` rather than an HTTP client
library: a client pools connections and hides the phases, while a probe
must time DNS, TCP connect, TLS handshake and first byte separately, and
must still show the certificate when verification fails (a second,
unverified handshake fetches it).  Redirects are reported, not followed.
"""

from __future__ import annotations

import importlib
import ssl
import sys
import time
from typing import Any
from urllib.parse import urljoin, urlsplit

import h11
import trio

from ongrid_host.egress import ProbeTargets
from ongrid_host.probes import check_target_host, resolve
from ongridd.plugins.api import ToolError
from ongridd.plugins.api import Outcome

MAX_BODY_BYTES = 1024 * 1024
_SHOWN_HEADERS = ("content-type", "content-length", "server", "location", "date", "cache-control")


class _Failed(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def cert_details(der: bytes) -> dict[str, Any]:
    """Subject, issuer, validity and names of a DER certificate."""
    from cryptography import x509  # ~50 ms to import; not at plugin load (probe_http loads it off the loop)

    cert = x509.load_der_x509_certificate(der)
    not_after = cert.not_valid_after_utc
    names: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(v) for v in san.get_values_for_type(x509.DNSName)]
        names += [str(v) for v in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        pass
    days_left = (not_after.timestamp() - time.time()) / 86400
    return {
        "subject": cert.subject.rfc4514_string(),
        "issuer": cert.issuer.rfc4514_string(),
        "not_before": cert.not_valid_before_utc.isoformat(),
        "not_after": not_after.isoformat(),
        "days_left": round(days_left, 1),
        "expired": days_left < 0,
        "san": names[:20],
        "serial": format(cert.serial_number, "x"),
    }


def _contexts(ca_file: str | None) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    verified = ssl.create_default_context()
    if ca_file:
        try:
            verified.load_verify_locations(cafile=ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ToolError(f"ca_file {ca_file!r} (plugins.settings.ongrid_host) cannot be loaded: {exc}") from None
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    for ctx in (verified, unverified):
        ctx.set_alpn_protocols(["http/1.1"])
    return verified, unverified


async def _connect(family: int, sockaddr: tuple) -> trio.SocketStream:
    sock = trio.socket.socket(family, trio.socket.SOCK_STREAM)
    try:
        await sock.connect(sockaddr)
    except OSError as exc:
        sock.close()
        raise _Failed(f"connect to {sockaddr[0]} port {sockaddr[1]} failed: {exc.strerror or exc}") from None
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


async def _handshake(tcp: trio.SocketStream, ctx: ssl.SSLContext, server_hostname: str) -> trio.SSLStream:
    """TLS handshake; raises ssl.SSLCertVerificationError for a certificate
    that fails verification, _Failed for any other handshake failure."""
    stream = trio.SSLStream(tcp, ctx, server_hostname=server_hostname, https_compatible=True)
    try:
        await stream.do_handshake()
    except trio.BrokenResourceError as exc:  # trio wraps the ssl error
        cause = exc.__cause__
        if isinstance(cause, ssl.SSLCertVerificationError):
            raise cause from None
        raise _Failed(f"TLS handshake failed: {cause or exc or 'connection closed'}") from None
    return stream


async def _exchange(stream: trio.abc.Stream, method: str, target: str, host_header: str,
                    timings: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    conn = h11.Connection(h11.CLIENT)
    request = h11.Request(method=method, target=target, headers=[
        ("Host", host_header), ("User-Agent", "ongrid-probe/1"), ("Accept", "*/*"), ("Connection", "close")])
    state["phase"] = "sending the request"
    await stream.send_all(conn.send(request) + conn.send(h11.EndOfMessage()))
    sent = time.monotonic()
    state["phase"] = "waiting for the first byte"
    out: dict[str, Any] = {"body_bytes": 0, "body_truncated": False}
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise _Failed(f"not a valid HTTP/1.1 response while {state['phase']}: {exc}") from None
        if event is h11.NEED_DATA:
            try:
                chunk = await stream.receive_some(65536)
            except (trio.BrokenResourceError, ssl.SSLError) as exc:
                raise _Failed(f"connection broken while {state['phase']}: {exc}") from None
            if "ttfb" not in timings and chunk:
                timings["ttfb"] = round((time.monotonic() - sent) * 1000, 2)
                state["phase"] = "reading the response"
            conn.receive_data(bytes(chunk))
            continue
        if isinstance(event, h11.Response):
            out["status"] = event.status_code
            out["reason"] = event.reason.decode("latin-1")
            out["http_version"] = event.http_version.decode()
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
            out["headers"] = {k: headers[k] for k in _SHOWN_HEADERS if k in headers}
            if method == "HEAD":
                break
        elif isinstance(event, h11.Data):
            out["body_bytes"] += len(event.data)
            if out["body_bytes"] > MAX_BODY_BYTES:
                out["body_truncated"] = True
                break
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            break
    return out


async def probe_http(url: str, *, targets: ProbeTargets, method: str = "GET", timeout_s: float = 10.0,
                     insecure: bool = False, ca_file: str | None = None) -> dict[str, Any] | Outcome:
    """``host_probe_http``: one request to ``url`` (http or https).

    Returns a dict with ``status``, ``timings_ms`` (``dns``, ``connect``,
    ``tls``, ``ttfb`` = request sent → first byte, ``total``; each phase on
    its own, ``total`` from the start), ``redirect_location`` (absolute; not
    followed), ``tls`` (version, cipher, ``verified``, ``verify_error``,
    ``cert``: subject, issuer, not_before/not_after, days_left, san).
    A certificate that fails verification is reported as an error result
    (``Outcome`` status ``error``) carrying the reason and the certificate;
    with ``insecure`` the request is made anyway.  Connection failures and
    the time limit also give an error result with the timings so far.
    Raises ToolError for a bad URL, or a host that is not among ``targets``
    (checked before its name is resolved; a name resolving to a link-local
    address is refused too).  Reads at most 1 MiB of body.
    """
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ToolError(f"url: {url!r} is not an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise ToolError("url: credentials in the URL are not supported (they would end up in the audit log)")
    if method not in ("GET", "HEAD"):
        raise ToolError(f"method: {method!r} is not GET or HEAD")
    host = check_target_host(parts.hostname, field="url")
    targets.check_host(host, "url")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ToolError(f"url: bad port in {url!r}") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    default_port = port == (443 if parts.scheme == "https" else 80)
    host_header = (f"[{host}]" if ":" in host else host) + ("" if default_port else f":{port}")
    verified_ctx, unverified_ctx = _contexts(ca_file) if parts.scheme == "https" else (None, None)
    if parts.scheme == "https" and "cryptography.x509" not in sys.modules:
        # the first https probe imports cert_details' parser in a worker thread, not on the Trio thread
        await trio.to_thread.run_sync(importlib.import_module, "cryptography.x509")

    start = time.monotonic()
    timings: dict[str, Any] = {}
    state: dict[str, Any] = {"phase": "resolving the name"}
    result: dict[str, Any] = {"host": "local", "url": url, "method": method}
    streams: list[trio.abc.AsyncResource] = []

    def lap(key: str, since: float) -> None:
        timings[key] = round((time.monotonic() - since) * 1000, 2)

    try:
        with trio.move_on_after(timeout_s) as scope:
            addresses, timings["dns"] = await resolve(host, port, timeout_s=timeout_s)
            family, sockaddr = addresses[0]
            targets.check_resolved(host, sockaddr[0], "url")
            result["address"] = sockaddr[0]
            state["phase"] = "connecting"
            t = time.monotonic()
            tcp = await _connect(family, sockaddr)
            streams.append(tcp)
            lap("connect", t)
            stream: trio.abc.Stream = tcp
            if parts.scheme == "https":
                assert verified_ctx is not None and unverified_ctx is not None  # made for https above
                state["phase"] = "TLS handshake"
                tls_info: dict[str, Any] = {"verified": True, "verify_error": None}
                result["tls"] = tls_info
                t = time.monotonic()
                try:
                    stream = await _handshake(tcp, verified_ctx, host)
                except ssl.SSLCertVerificationError as exc:
                    tls_info["verified"] = False
                    tls_info["verify_error"] = exc.verify_message or str(exc)
                    await tcp.aclose()
                    state["phase"] = "TLS handshake (unverified, to read the certificate)"
                    tcp = await _connect(family, sockaddr)
                    streams.append(tcp)
                    t = time.monotonic()
                    stream = await _handshake(tcp, unverified_ctx, host)
                lap("tls", t)
                streams.append(stream)
                tls_info["version"] = stream.version()
                tls_info["cipher"] = (stream.cipher() or (None,))[0]
                der = stream.getpeercert(binary_form=True)
                tls_info["cert"] = cert_details(der) if der else None
                if not tls_info["verified"] and not insecure:
                    raise _Failed(f"certificate verification failed: {tls_info['verify_error']} "
                                  "(set insecure: true to make the request anyway)")
            result.update(await _exchange(stream, method, target, host_header, timings, state))
        if scope.cancelled_caught:
            raise _Failed(f"timed out after {timeout_s:g} s while {state['phase']}")
    except _Failed as failure:
        lap("total", start)
        result["timings_ms"] = timings
        result["error"] = failure.message
        return Outcome(result, status="error")
    except ToolError as exc:  # name resolution
        lap("total", start)
        result["timings_ms"] = timings
        result["error"] = str(exc)
        return Outcome(result, status="error")
    finally:
        with trio.move_on_after(1, shield=True):
            for s in reversed(streams):
                await trio.aclose_forcefully(s)
    lap("total", start)
    result["timings_ms"] = timings
    location = result.get("headers", {}).get("location")
    result["redirect_location"] = urljoin(url, location) if location and 300 <= result["status"] < 400 else None
    return result
