"""The framework's own refusals — a method a route does not take, a body over
the size limit — answer in the API's JSON error shape, as every other error
does, keeping the headers that matter (``Allow``; ``Connection: close`` after a
body left unread)."""

from __future__ import annotations

import httpx2
import pytest

from tests.runtime.rt_helpers import open_daemon


@pytest.mark.parametrize("method,path", [("TRACE", "/"), ("FOO", "/"), ("DELETE", "/healthz"),
                                         ("PATCH", "/api/changes")])
async def test_a_method_not_allowed_is_a_json_error_with_allow(tmp_path, method, path):
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}) as d, httpx2.AsyncClient() as http:
        r = await http.request(method, d.base_url + path)
        if r.status_code == 404:  # a route that takes no method at all: not found, in the same shape
            assert r.json()["error"]["code"] == "not_found"
            return
        assert r.status_code == 405 and r.headers["content-type"].startswith("application/json")
        assert r.json()["error"]["code"] == "method_not_allowed" and r.headers["allow"]


async def test_a_body_over_the_limit_is_a_json_413_that_closes_the_connection(tmp_path):
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}) as d, httpx2.AsyncClient() as http:
        r = await http.post(d.base_url + "/api/changes", content=b"{" + b" " * (5 * 1024 * 1024) + b"}",
                            headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
        assert r.headers["connection"].lower() == "close"
        assert (await http.get(d.base_url + "/healthz")).status_code == 200
