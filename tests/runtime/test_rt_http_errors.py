"""The framework's own refusals — a method a route does not take, a body over
the size limit — answer in the API's JSON error shape, as every other error
does, keeping the headers that matter (``Allow``; ``Connection: close`` after a
body left unread)."""

from __future__ import annotations

import httpx2
import pytest

from tests.runtime.rt_helpers import open_daemon


@pytest.mark.parametrize("method,path,allow", [
    ("TRACE", "/", "GET"), ("FOO", "/", "GET"), ("DELETE", "/healthz", "GET"), ("PATCH", "/api/changes", "POST"),
    ("POST", "/api/sessions", "GET"), ("PATCH", "/api/agents/default", "GET, PUT, DELETE"),
])
async def test_a_method_not_allowed_is_a_json_error_with_allow(tmp_path, method, path, allow):
    # the daemon's own routes and the plugin routes' catch-all alike: 405 naming the methods, not 404
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}) as d, httpx2.AsyncClient() as http:
        r = await http.request(method, d.base_url + path)
        assert r.status_code == 405 and r.headers["content-type"].startswith("application/json"), r.text
        assert r.json()["error"]["code"] == "method_not_allowed"
        assert set(allow.split(", ")) <= set(r.headers["allow"].split(", ")), r.headers["allow"]
        unknown = await http.get(d.base_url + "/api/no-such-route")
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"


async def test_a_body_over_the_limit_is_a_json_413_that_closes_the_connection(tmp_path):
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}) as d, httpx2.AsyncClient() as http:
        r = await http.post(d.base_url + "/api/changes", content=b"{" + b" " * (5 * 1024 * 1024) + b"}",
                            headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
        assert r.headers["connection"].lower() == "close"
        assert (await http.get(d.base_url + "/healthz")).status_code == 200


def test_a_request_without_a_valid_token_may_bring_only_a_small_body():
    # the framework buffers a body as it arrives, before any route runs: the limit is chosen from the
    # request head, so an anonymous client cannot make each of its connections hold megabytes
    import types

    from quart_trio.wrappers import TrioRequest
    from werkzeug.datastructures import Headers

    from ongridd.config import Config
    from ongridd.server import app as server_app
    from ongridd.server.auth import Authenticator

    webhook = types.SimpleNamespace(auth="none", handler=None)
    services = server_app.AppServices(config=Config(), auth=Authenticator({"tok-alice-0123456789": "alice"}),
                                      plugin_routes=lambda: {("POST", "/api/channels/x/events"): webhook})
    bounded = server_app._bounded_request_class(TrioRequest, services)

    def limits(path: str, token: str | None = None, client: str = "203.0.113.9") -> tuple[int, int]:
        headers = Headers({"Authorization": f"Bearer {token}"} if token else {})
        req = bounded("POST", "http", path, b"", headers, "", "1.1", max_content_length=None, body_timeout=None,
                      send_push_promise=None, scope={"client": (client, 40000)})
        return req.body._max_content_length, req.body_timeout

    anonymous = (server_app.ANONYMOUS_BODY_MAX, server_app.ANONYMOUS_BODY_TIMEOUT_S)
    assert limits("/api/changes") == anonymous
    assert limits("/api/changes", "wrong-token-0123456789") == anonymous
    assert limits("/api/changes", "tok-alice-0123456789") == (server_app.BODY_MAX, server_app.BODY_TIMEOUT_S)
    assert limits("/api/channels/x/events") == (server_app.PLUGIN_OPEN_BODY_MAX, server_app.ANONYMOUS_BODY_TIMEOUT_S)
    open_mode = server_app.AppServices(config=Config(), auth=Authenticator({}))
    loopback = server_app._bounded_request_class(TrioRequest, open_mode)
    req = loopback("POST", "http", "/api/changes", b"", Headers(), "", "1.1", max_content_length=None,
                   body_timeout=None, send_push_promise=None, scope={"client": ("127.0.0.1", 40000)})
    assert req.body._max_content_length == server_app.BODY_MAX  # loopback mode: every loopback client is "local"
    # an open route (a webhook) has its small limits whoever sends: a token or loopback changes nothing (behind
    # a reverse proxy every sender is a loopback client)
    small = (server_app.PLUGIN_OPEN_BODY_MAX, server_app.ANONYMOUS_BODY_TIMEOUT_S)
    assert limits("/api/channels/x/events", "tok-alice-0123456789") == small
    proxied = server_app._bounded_request_class(TrioRequest, server_app.AppServices(
        config=Config(), auth=Authenticator({}), plugin_routes=lambda: {("POST", "/api/channels/x/events"): webhook}))
    req = proxied("POST", "http", "/api/channels/x/events", b"", Headers(), "", "1.1", max_content_length=None,
                  body_timeout=None, send_push_promise=None, scope={"client": ("127.0.0.1", 40000)})
    assert (req.body._max_content_length, req.body_timeout) == small


async def test_an_anonymous_client_learns_no_route_from_a_404_or_405(tmp_path, monkeypatch):
    # with tokens configured, a route that does not exist and a method a route does not take answer
    # alike without a valid token (401), so probing tells an anonymous client nothing; with one they
    # answer 404 and 405 as usual
    monkeypatch.setenv("RT_HTTP_ERR_TOKENS", "alice:tok-alice-http-errors")
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]},
                           server={"tokens_env": "RT_HTTP_ERR_TOKENS"}) as d, httpx2.AsyncClient() as http:
        alice = {"Authorization": "Bearer tok-alice-http-errors"}
        for method, path in (("GET", "/api/no-such-route"), ("PATCH", "/api/changes"), ("POST", "/api/sessions"),
                             ("GET", "/api/channels/slack/events")):
            anonymous = await http.request(method, d.base_url + path)
            assert anonymous.status_code == 401, (method, path, anonymous.text)
            assert "allow" not in anonymous.headers
            known = await http.request(method, d.base_url + path, headers=alice)
            assert known.status_code in (404, 405), (method, path, known.text)
        assert (await http.get(d.base_url + "/healthz")).status_code == 200


@pytest.mark.parametrize("value", ["abc", "1.5", "%C2%B2", "%D9%A3", "9999999999999", "--5", "5-"])
async def test_a_query_integer_that_is_not_ascii_digits_is_a_400(tmp_path, value):
    # "²" passes str.isdigit and fails int(); "٣" passes both: neither is a decimal integer here
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}) as d, httpx2.AsyncClient() as http:
        r = await http.get(d.base_url + "/api/sessions?limit=" + value)
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request", r.text
        assert "limit: expected an integer" in r.json()["error"]["message"]


@pytest.mark.parametrize("number, named", [("NaN", "NaN is not a JSON value"), ("-Infinity", "-Infinity is not"),
                                           ("1e999", "the number 1e999 is beyond")])
async def test_a_number_json_has_not_is_a_400_naming_it_and_nothing_is_stored(tmp_path, number, named):
    """Python reads NaN, Infinity and 1e999; a browser, ``JSON.parse`` and PostgreSQL's json type do
    not.  Such a body is refused with the reason, so every answer stays JSON that any reader parses."""
    import json

    def strict(text: str):
        return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in an answer: {text[:200]}"))

    body = '{"kind": "deploy", "subject": "web", "actor": "ci", "detail": {"n": %s}}' % number
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}) as d, httpx2.AsyncClient() as http:
        r = await http.post(d.base_url + "/api/changes", content=body.encode(),
                            headers={"content-type": "application/json"})
        assert r.status_code == 400 and named in r.json()["error"]["message"], r.text
        listed = await http.get(d.base_url + "/api/changes")
        assert listed.status_code == 200 and strict(listed.text)["changes"] == [], listed.text
        r = await http.post(d.base_url + "/api/marketplace/install", content=b'{"name": "x", "v": %s}' % number.encode())
        assert r.status_code == 400 and named in r.json()["error"]["message"], r.text
        async with d.ws("nan-frame") as c:
            await c.send('{"type": "user_message", "text": "hi", "n": %s}' % number)
            frame = await c.until_type("error")
            assert frame["code"] == "bad_frame" and named in frame["message"], frame
