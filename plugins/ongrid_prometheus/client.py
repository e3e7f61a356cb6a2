"""A small Prometheus HTTP API client that turns every failure into a clear ToolError.

It uses the daemon's shared ``httpx2.AsyncClient`` when the plugin context has
one; otherwise (tests, the CLI) it opens a client for the call and closes it
when the call ends — a plugin has no shutdown hook, so a long-lived private
client could never be closed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx2

from ongridd.plugins.api import ToolError, ToolTimeout

#: at most this many characters of a non-JSON error body are quoted
_BODY_PREVIEW_CHARS = 300


@attrs.frozen(kw_only=True)
class ApiResult:
    """The ``data`` member of a successful API answer, plus Prometheus's warnings."""

    data: Any
    warnings: tuple[str, ...] = ()


@asynccontextmanager
async def open_http(shared: Any) -> AsyncIterator[Any]:
    """Yield ``shared`` when it is an open client, else a private client closed on exit."""
    if shared is not None and not getattr(shared, "is_closed", False):
        yield shared
        return
    async with httpx2.AsyncClient() as client:
        yield client


@attrs.frozen(kw_only=True)
class PrometheusClient:
    """Calls ``<base_url>/api/v1/...``.

    ``base_url``: the server (``prometheus.url``), may carry a path prefix;
    ``None`` makes every call raise ToolError saying how to configure it.
    ``http``: a shared ``httpx2.AsyncClient`` or ``None``.  ``timeout_s``: the
    whole-request limit in seconds.
    """

    base_url: str | None
    http: Any = None
    timeout_s: float = 10.0

    def require_url(self) -> str:
        """The base URL without a trailing slash; ToolError when none is configured."""
        if not self.base_url:
            raise ToolError(
                "no Prometheus server configured: set prometheus.url in the Ongrid config "
                "(or the ONGRID_PROMETHEUS_URL environment variable)"
            )
        return self.base_url.rstrip("/")

    async def call(self, path: str, params: Mapping[str, Any], *, method: str = "GET") -> ApiResult:
        """Call ``/api/v1/<path>`` and return its ``data``.

        Raises ToolTimeout when Prometheus does not answer within
        ``timeout_s`` or reports an evaluation timeout; ToolError for an
        unreachable server, an invalid URL, a rejected query (with
        Prometheus's own error text) or an answer that is not the API's JSON.
        Cancellation aborts the request and closes a private client.
        """
        base = self.require_url()
        url = f"{base}/api/v1/{path.lstrip('/')}"
        try:
            async with open_http(self.http) as http:
                if method == "POST":
                    response = await http.post(url, data=dict(params), timeout=self.timeout_s)
                else:
                    response = await http.get(url, params=dict(params), timeout=self.timeout_s)
        except httpx2.TimeoutException:
            raise ToolTimeout(f"Prometheus at {base} did not answer within {self.timeout_s:g} s") from None
        except (httpx2.InvalidURL, httpx2.UnsupportedProtocol) as exc:
            raise ToolError(f"prometheus.url {base!r} is not a usable http(s) URL: {exc}") from None
        except httpx2.ConnectError as exc:
            raise ToolError(f"cannot reach Prometheus at {base}: {str(exc) or 'connection failed'}") from None
        except httpx2.HTTPError as exc:
            raise ToolError(f"request to Prometheus at {base} failed: {type(exc).__name__}: {exc}") from None
        return _read_answer(response, base)


def _read_answer(response: Any, base: str) -> ApiResult:
    try:
        body = response.json()
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        preview = response.text[:_BODY_PREVIEW_CHARS].strip()
        raise ToolError(
            f"Prometheus at {base} answered HTTP {response.status_code} with a body that is not its API's JSON"
            f" (is prometheus.url the server's base URL?): {preview!r}"
        ) from None
    if not isinstance(body, dict) or "status" not in body:
        raise ToolError(f"Prometheus at {base} answered HTTP {response.status_code} with unexpected JSON")
    warnings = tuple(str(w) for w in body.get("warnings") or ())
    if body.get("status") != "success":
        kind = body.get("errorType") or "error"
        text = body.get("error") or "no error text"
        if kind == "timeout":
            raise ToolTimeout(f"Prometheus gave up evaluating the query (timeout): {text}")
        raise ToolError(f"Prometheus rejected the request (HTTP {response.status_code}, {kind}): {text}")
    return ApiResult(data=body.get("data"), warnings=warnings)
