"""One HTTP GET to a signal backend (Loki, Tempo, …) for a plugin tool,
with every transport failure turned into a clear tool error.

Part of the public plugin API (re-exported by :mod:`ongridd.plugins.api`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx2

from ongridd.errors import ToolError, ToolTimeout

#: an answer body larger than this is refused (bytes)
MAX_BODY_BYTES = 16 * 1024 * 1024
#: at most this many characters of an error body are quoted
ERROR_PREVIEW_CHARS = 600


@attrs.frozen(kw_only=True)
class HttpAnswer:
    """``status``: the HTTP status; ``json``: the parsed body or None when it
    is not JSON; ``text``: the body as text (at most :data:`ERROR_PREVIEW_CHARS`
    characters kept when it is not JSON)."""

    status: int
    json: Any
    text: str

    def error_text(self) -> str:
        """The server's own error message: a JSON ``error``/``message`` member, else the body text."""
        if isinstance(self.json, dict):
            for key in ("error", "message"):
                if isinstance(self.json.get(key), str) and self.json[key].strip():
                    return self.json[key].strip()[:ERROR_PREVIEW_CHARS]
        return self.text.strip()[:ERROR_PREVIEW_CHARS] or f"HTTP {self.status} with an empty body"


@asynccontextmanager
async def _client(shared: Any) -> AsyncIterator[Any]:
    if shared is not None and not getattr(shared, "is_closed", False):
        yield shared
        return
    async with httpx2.AsyncClient() as client:
        yield client


async def get_json(http: Any, url: str, params: Mapping[str, Any] | None, *, timeout_s: float,
                   what: str) -> HttpAnswer:
    """GET ``url`` with ``params`` through the shared client ``http`` (or a
    private one closed afterwards).

    ``what`` names the server in messages (``"Loki at http://…"``).  Raises
    ToolTimeout when no answer comes within ``timeout_s`` seconds; ToolError
    for an unusable URL, an unreachable server, another transport failure
    or a body over :data:`MAX_BODY_BYTES`.  Any HTTP status is returned
    (callers judge it).  Cancellation aborts the request.
    """
    try:
        async with _client(http) as client:
            async with client.stream("GET", url, params=dict(params or {}), timeout=timeout_s) as response:
                chunks = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > MAX_BODY_BYTES:
                        raise ToolError(f"{what} answered more than {MAX_BODY_BYTES // (1024 * 1024)} MiB; "
                                        "narrow the query (time range, limit)")
                    chunks.append(chunk)
                status = response.status_code
    except httpx2.TimeoutException:
        raise ToolTimeout(f"{what} did not answer within {timeout_s:g} s") from None
    except (httpx2.InvalidURL, httpx2.UnsupportedProtocol) as exc:
        raise ToolError(f"{what}: not a usable http(s) URL: {exc}") from None
    except httpx2.ConnectError as exc:
        raise ToolError(f"cannot reach {what}: {str(exc) or 'connection failed'}") from None
    except httpx2.HTTPError as exc:
        raise ToolError(f"request to {what} failed: {type(exc).__name__}: {exc}") from None
    body = b"".join(chunks)
    try:
        parsed = json.loads(body) if body else None
    except (ValueError, RecursionError):
        parsed = None
    text = body[:ERROR_PREVIEW_CHARS * 4].decode("utf-8", "replace") if parsed is None else ""
    return HttpAnswer(status=status, json=parsed, text=text)
