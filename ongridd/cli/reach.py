"""Is there an Ongrid daemon at the URL?  One readable sentence when not.

:func:`check_daemon` is called by the socket commands (``ask``, ``chat``)
before they open the websocket, so a wrong URL fails in seconds with a
reason instead of hanging or dumping a handshake tuple:

- ``https://`` against a plain-HTTP daemon: the TLS handshake fails (or the
  server waits for a request line that never comes); a plain ``http://``
  request to the same host and port is tried and, when it gets an HTTP
  answer, the message says to use ``http://``;
- nothing listening, DNS failure, timeouts: said so, with the host:port;
- a server that answers but is not an Ongrid daemon (``GET /api/me`` is not
  JSON with ``auth_required``): said so, with the status and content type.

:func:`describe_http_error` turns an ``httpx2`` exception into the same kind
of sentence for the HTTP commands.  Every probe is bounded by
``timeout_s`` (seconds, per request; at most two requests), reads at most
:data:`PROBE_BODY_MAX` bytes of a body and raises only
:class:`~ongridd.cli.common.ClientError` (exit code 2).  Synchronous: call
it before ``trio.run`` or through ``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import json
import ssl
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ongridd.cli.common import ClientError

#: seconds each probe request may take (connect, TLS, read)
PROBE_TIMEOUT_S = 5.0
#: bytes of a probe answer read at most
PROBE_BODY_MAX = 64 * 1024


def _netloc(url: str) -> str:
    return urlsplit(url).netloc


def _causes(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(out) < 10:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _is_tls_problem(exc: BaseException) -> bool:
    for e in _causes(exc):
        if isinstance(e, ssl.SSLError):
            return True
        text = str(e)
        if "SSL" in text or "TLS" in text or "record layer" in text:
            return True
    return False


def _answers_plain_http(base: str, timeout_s: float) -> bool:
    """True when ``http://`` on the same host and port gets any HTTP answer."""
    import httpx2

    parts = urlsplit(base)
    plain = urlunsplit(("http", parts.netloc, parts.path.rstrip("/") + "/healthz", "", ""))
    try:
        with httpx2.Client(timeout=timeout_s) as client:
            client.get(plain)
        return True
    except httpx2.HTTPError:
        return False


def describe_http_error(url: str, exc: BaseException, *, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """One sentence for an ``httpx2`` error reaching ``url`` (no exception dump)."""
    import httpx2

    where = _netloc(url)
    https = urlsplit(url).scheme == "https"
    if https and (_is_tls_problem(exc) or isinstance(exc, httpx2.TimeoutException)):
        if _answers_plain_http(url, timeout_s):
            plain = urlunsplit(("http",) + tuple(urlsplit(url))[1:])
            return (f"the daemon at {where} answered plain HTTP, not TLS; use http:// "
                    f"(e.g. --url {plain.split('/api/')[0].rstrip('/')})")
        if _is_tls_problem(exc):
            return f"the TLS handshake with {where} failed ({_short(exc)}); check the URL and the certificate"
    if isinstance(exc, httpx2.ConnectTimeout):
        return f"no answer from {where} within {timeout_s:g} s (is the host reachable and the port right?)"
    if isinstance(exc, httpx2.TimeoutException):
        return f"{where} accepted the connection but did not answer within {timeout_s:g} s; is it an Ongrid daemon?"
    if isinstance(exc, httpx2.ConnectError):
        reason = _short(exc)
        if "refused" in reason.lower():
            return (f"cannot reach the daemon at {where}: nothing is listening there (connection refused); "
                    "is ongridd running, and is --url right?")
        return f"cannot reach the daemon at {where}: {reason}"
    if isinstance(exc, httpx2.RemoteProtocolError):
        hint = " (is it a TLS port? then use https://)" if not https else ""
        return f"{where} did not answer HTTP{hint}: {_short(exc)}"
    return f"cannot reach the daemon at {where}: {_short(exc)}"


def _short(exc: BaseException) -> str:
    for e in _causes(exc):
        text = str(e).strip()
        if text:
            return text.splitlines()[0][:200]
    return type(exc).__name__


def check_daemon(base: str, headers: dict[str, str] | None = None, *, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise ClientError(one sentence) unless ``base`` (``http[s]://HOST:PORT``)
    is an Ongrid daemon: ``GET /api/me`` answers JSON with ``auth_required``
    (an HTTP 401/403 with a JSON ``error`` counts too: the daemon is there,
    the token is the problem, and the command reports that itself)."""
    import httpx2

    url = base.rstrip("/") + "/api/me"
    try:
        with httpx2.Client(timeout=timeout_s) as client:
            with client.stream("GET", url, headers=headers or {}) as resp:
                body = b""
                for chunk in resp.iter_bytes():
                    body += chunk
                    if len(body) >= PROBE_BODY_MAX:
                        break
                status = resp.status_code
                ctype = resp.headers.get("content-type", "")
    except httpx2.HTTPError as exc:
        raise ClientError(describe_http_error(url, exc, timeout_s=timeout_s)) from None
    if not looks_like_daemon(status, ctype, body[:PROBE_BODY_MAX]):
        kind = (ctype.split(";")[0].strip() or "no content type")
        raise ClientError(f"{_netloc(base)} is not an Ongrid daemon: GET /api/me answered HTTP {status} "
                          f"({kind}); point --url or ONGRID_URL at the daemon's address")


def looks_like_daemon(status: int, content_type: str, body: bytes) -> bool:
    """True for the daemon's ``/api/me`` answer (or its JSON 401/403 error)."""
    if "json" not in content_type.lower():
        return False
    try:
        data: Any = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    if not isinstance(data, dict):
        return False
    if status == 200:
        return "auth_required" in data
    if status in (401, 403):
        err = data.get("error")
        return isinstance(err, dict) and "code" in err
    return False
