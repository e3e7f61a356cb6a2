"""PlatformHTTP: 429 waits Retry-After (capped), 5xx and transport errors are
retried a bounded number of times, then PlatformError; logs carry no URL."""

from __future__ import annotations

import httpx2
import pytest
import trio

from ongridd.plugins.api import PlatformError, PlatformHTTP


def client(answers: list) -> tuple[httpx2.AsyncClient, list[float]]:
    seen: list[float] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(trio.current_time())
        kind = answers.pop(0)
        if kind == "boom":
            raise httpx2.ConnectError("refused", request=request)
        status, headers = kind
        return httpx2.Response(status, headers=headers, json={"ok": status == 200})

    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler)), seen


async def test_retry_after_is_honoured_and_capped(autojump_clock):
    http, seen = client([(429, {"Retry-After": "7"}), (429, {"Retry-After": "3600"}), (200, {})])
    ph = PlatformHTTP(http, "x", max_retry_after_s=30)
    resp = await ph.call("POST", "http://x.invalid/secret-token/m", what="m")
    assert resp.status_code == 200
    assert [round(b - a) for a, b in zip(seen, seen[1:])] == [7, 30]


async def test_server_errors_and_outages_are_retried_a_bounded_number_of_times(autojump_clock, caplog):
    http, seen = client([(500, {}), "boom", (502, {}), (503, {})])
    ph = PlatformHTTP(http, "x", attempts=4, backoff_s=0.5)
    with pytest.raises(PlatformError, match="HTTP 503 after 4 attempt"):
        await ph.call("POST", "http://x.invalid/bot123:SECRET/sendMessage", what="sendMessage")
    assert len(seen) == 4
    assert [round(b - a, 1) for a, b in zip(seen, seen[1:])] == [0.5, 1.0, 2.0]
    assert "SECRET" not in caplog.text


async def test_a_client_error_is_returned_not_retried(autojump_clock):
    http, seen = client([(400, {})])
    resp = await PlatformHTTP(http, "x").call("POST", "http://x.invalid/m", what="m")
    assert resp.status_code == 400 and len(seen) == 1
