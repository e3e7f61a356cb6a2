"""The plugin API pieces the bridges stand on: ``auth="none"`` routes (raw
body, no loopback Host check), the services hook, event-id dedup and turn
origins in the database, default-named secrets, and the splitting helper."""

from __future__ import annotations

import os
import sys
import types

import pytest
import sqlalchemy as sa
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from ongridd.config import Config
from ongridd.plugins.bridgekit import FENCE_RE, _lines_with_fences
from ongridd.plugins.api import PluginRequest, PluginResponse, hookimpl, split_rendered, split_text
from ongridd.plugins.manager import PluginRoute, collect
from ongridd.server.app import AppServices, create_app
from ongridd.server.auth import Authenticator
from ongridd.store import open_store


def _module(name: str, **hooks) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__file__ = __file__
    for key, fn in hooks.items():
        setattr(mod, key, hookimpl(fn))
    return mod


def _collect(monkeypatch, mod):
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return collect(Config(), builtins=(mod.__name__,), entry_points=False, extra_paths=[])


async def _svc():
    await trio.sleep_forever()


def test_routes_with_auth_none_and_services_register_and_are_reported(monkeypatch):
    async def handler(req):
        return {}

    def routes(register, context):
        register("POST", "/api/channels/x/events", handler, auth="none")
        register("GET", "/api/x/status", handler)

    def services(register, context):
        register("poll", _svc)

    out = _collect(monkeypatch, _module("ongridtest_bridge", ongrid_register_routes=routes,
                                        ongrid_register_services=services))
    [report] = out.report
    assert report.ok, report.error
    assert report.registered["routes"] == ["POST /api/channels/x/events (auth=none)", "GET /api/x/status"]
    assert report.registered["services"] == ["poll"]
    assert {(r.path, r.auth) for r in out.routes} == {("/api/channels/x/events", "none"), ("/api/x/status", "token")}
    assert [(s.plugin, s.name) for s in out.services] == [("ongridtest_bridge", "poll")]


@pytest.mark.parametrize("bad", [
    lambda register, context: register("POST", "/x", _svc, auth="open"),
    lambda register, context: register("POST", "/x", _svc, auth=None),
])
def test_a_route_auth_outside_the_allowlist_fails_the_plugin(monkeypatch, bad):
    out = _collect(monkeypatch, _module("ongridtest_badauth", ongrid_register_routes=bad))
    assert not out.report[0].ok and "auth must be one of token, none" in out.report[0].error
    assert not out.routes


@pytest.mark.parametrize("path", ["/api/sessions", "/api/marketplace/install", "/API/Agents/default", "/healthz/",
                                  "/", "/ws", "/static/app.js", "/api/agents-skipped", "/api/plugins",
                                  "/api/sessions/x/audit"])
def test_a_route_at_a_path_the_daemon_serves_fails_the_plugin(monkeypatch, path):
    def routes(register, context):
        register("POST", path, _svc, auth="none")

    out = _collect(monkeypatch, _module("ongridtest_shadow", ongrid_register_routes=routes))
    assert not out.report[0].ok and "the daemon serves that path itself" in out.report[0].error
    assert not out.routes


@pytest.mark.parametrize("path", ["//healthz", "/api//sessions", "/api/plugins/../sessions", "/healthz\u200b",
                                  "/api/sessions\u0130", "/api/x/", "/api/%73essions", "/a?b", "/" + "a" * 200])
def test_a_route_path_that_could_pass_for_another_fails_the_plugin(monkeypatch, path):
    def routes(register, context):
        register("GET", path, _svc, auth="none")

    out = _collect(monkeypatch, _module("ongridtest_lookalike", ongrid_register_routes=routes))
    assert not out.report[0].ok and "route: path must be '/'-separated segments" in out.report[0].error, out.report
    assert not out.routes


def test_every_route_of_the_daemon_is_a_path_plugins_may_not_take():
    from ongridd.plugins.staging import daemon_path

    app = create_app(AppServices(config=Config(), auth=Authenticator({})))
    rules = [r for r in app.url_map.iter_rules() if r.endpoint != "plugin_route"]
    assert rules
    for rule in rules:
        sample = rule.rule.replace("<path:", "<").split("<")[0] + ("x" if "<" in rule.rule else "")
        assert daemon_path(sample), rule.rule
    for free in ("/api/channels/slack/events", "/api/changes", "/api/alerts/alertmanager", "/api/agentsx",
                 "/hook", "/api/sessionsfoo", "/api/plugins/sample/status", "/healthz/extra"):
        assert not daemon_path(free), free


async def test_a_plugin_route_at_a_daemon_path_lends_it_no_exemption():
    # registered past the plugin manager's check (a table built by hand): the daemon's own route
    # answers, with the origin check and the small anonymous body limit as ever
    async def handler(req):
        return PluginResponse(status=200, body={"plugin": True})

    table = {(m, p): PluginRoute("p", m, p, handler, "none")
             for m, p in (("POST", "/api/marketplace/install"), ("GET", "/api/sessions"))}
    app = create_app(AppServices(config=Config(), auth=Authenticator({}), plugin_routes=lambda: table))
    client = app.test_client()
    evil = {"Host": "evil.example:8650", "Origin": "http://evil.example", "Content-Type": "text/plain"}
    resp = await client.post("/api/marketplace/install", data=b'{"name": "x"}', headers=evil)
    assert resp.status_code == 403, await resp.get_data()
    resp = await client.get("/api/sessions", headers=evil)
    assert resp.status_code == 403, await resp.get_data()


@pytest.mark.parametrize("bad", [
    lambda register, context: register("", _svc),
    lambda register, context: register("poll", "not callable"),
    lambda register, context: (register("poll", _svc), register("poll", _svc)),
])
def test_bad_services_fail_the_plugin_and_keep_nothing(monkeypatch, bad):
    out = _collect(monkeypatch, _module("ongridtest_badsvc", ongrid_register_services=bad))
    assert not out.report[0].ok and "service" in out.report[0].error
    assert not out.services


async def test_open_route_gets_raw_body_and_headers_and_skips_the_host_check():
    seen: list[PluginRequest] = []

    async def handler(req: PluginRequest):
        seen.append(req)
        return PluginResponse(status=202, body={"got": len(req.body)})

    table = {("POST", "/api/channels/x/events"): PluginRoute("p", "POST", "/api/channels/x/events", handler, "none"),
             ("POST", "/api/x/closed"): PluginRoute("p", "POST", "/api/x/closed", handler, "token")}
    app = create_app(AppServices(config=Config(), auth=Authenticator({}), plugin_routes=lambda: table))
    client = app.test_client()
    raw = b'{"a": 1,   "b": "\xc3\xa9"}'
    headers = {"Host": "ongrid.example.com", "X-Signature": "v0=abc", "Content-Type": "application/json"}
    resp = await client.post("/api/channels/x/events", data=raw, headers=headers)
    assert resp.status_code == 202 and (await resp.get_json()) == {"got": len(raw)}
    [req] = seen
    assert req.body == raw and req.json == {"a": 1, "b": "é"} and req.user == ""
    assert req.headers.get("x-signature") == "v0=abc"  # case-insensitive
    # the same Host on a token route is refused (no tokens: loopback names only)
    resp = await client.post("/api/x/closed", data=raw, headers=headers)
    assert resp.status_code == 403 and len(seen) == 1
    # an oversized body is refused unread
    resp = await client.post("/api/channels/x/events", data=b"x" * (1024 * 1024 + 1), headers=headers)
    assert resp.status_code == 413 and len(seen) == 1


async def test_open_route_with_tokens_configured_needs_no_bearer():
    async def handler(req):
        return {"user": req.user}

    table = {("POST", "/hook"): PluginRoute("p", "POST", "/hook", handler, "none"),
             ("POST", "/closed"): PluginRoute("p", "POST", "/closed", handler, "token")}
    app = create_app(AppServices(config=Config(), auth=Authenticator({"tok-0123456789abcdef": "alice"}),
                                 plugin_routes=lambda: table))
    client = app.test_client()
    assert (await client.post("/hook", data=b"{}")).status_code == 200
    assert (await client.post("/closed", data=b"{}")).status_code == 401


async def test_event_ids_are_claimed_once_for_ten_minutes_and_across_a_restart(tmp_path):
    url = f"sqlite:///{tmp_path / 'ongrid.db'}"
    async with open_store(url) as store:
        ch = store.channel_store
        assert await ch.claim_event("slack", "Ev1") is True
        assert await ch.claim_event("slack", "Ev1") is False
        assert await ch.claim_event("telegram", "Ev1") is True  # per platform
        with pytest.raises(ValueError):
            await ch.claim_event("slack", "x" * 201)
    async with open_store(url) as store:  # a restart: still seen
        ch = store.channel_store
        assert await ch.claim_event("slack", "Ev1") is False
        from ongridd.store.schema import channel_events

        def age(minutes: int):
            def run(engine):
                with engine.begin() as conn:
                    conn.execute(sa.update(channel_events).values(
                        seen_at=sa.func.strftime("%Y-%m-%d %H:%M:%f", "now", f"-{minutes} minutes")))
            return run

        await trio.to_thread.run_sync(age(9), store._db.engine)
        assert await ch.claim_event("slack", "Ev1") is False  # 9 minutes: still a retry
        await trio.to_thread.run_sync(age(11), store._db.engine)
        assert await ch.claim_event("slack", "Ev2") is True  # the sweep runs on a claim
        assert await ch.claim_event("slack", "Ev1") is True  # 11 minutes: forgotten


async def test_turn_origins_record_the_seq_of_the_next_user_message(tmp_path):
    async with open_store(f"sqlite:///{tmp_path / 'ongrid.db'}") as store:
        row, _ = await store.get_or_create_coordinator("alice", "slack:C1/1.2")
        await store.append_message(row["id"], role="user", content="earlier")
        origin = await store.channel_store.record_origin(session_id=row["id"], platform="slack", im_user="U1",
                                                         conversation="C1/1.2", predict_seq=True)
        assert origin["message_seq"] == 2
        other = await store.channel_store.record_origin(session_id=row["id"], platform="slack", im_user="U1",
                                                        conversation="C1/1.2", predict_seq=False)
        assert other["message_seq"] is None
        listed = await store.channel_store.list_origins(row["id"])
        assert [o["id"] for o in listed] == [origin["id"], other["id"]]


async def test_services_start_in_the_nursery_a_failure_is_logged_and_they_are_cancelled(caplog):
    from ongridd.daemon import start_plugin_services
    from ongridd.plugins.manager import PluginService

    events: list[str] = []

    async def forever():
        events.append("started")
        try:
            await trio.sleep_forever()
        finally:
            events.append("cancelled")

    async def broken():
        raise RuntimeError("boom")

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            start_plugin_services(nursery, [PluginService("p", "ok", forever), PluginService("p", "bad", broken)])
            await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
    assert events == ["started", "cancelled"]


def test_a_secret_read_by_its_default_name_leaves_the_environment_and_is_redacted(monkeypatch):
    from ongridd.plugins.api import PluginContext, redact

    value = "xoxb-default-named-secret-0123456789"
    monkeypatch.setenv("ONGRIDTEST_DEFAULT_TOKEN", value)
    ctx = PluginContext(config=Config(), plugin_name="p", settings={})
    assert ctx.secret("bot_token_env", "ONGRIDTEST_DEFAULT_TOKEN") == value
    assert "ONGRIDTEST_DEFAULT_TOKEN" not in os.environ
    assert ctx.secret("bot_token_env", "ONGRIDTEST_DEFAULT_TOKEN") == value  # remembered
    assert value not in redact(f"token={value}")
    assert ctx.secret("bot_token_env") is None  # no setting, no default


FENCE = "```"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(alphabet="ab <&*_`\n", max_size=120), st.just(FENCE), st.just(FENCE + "py"),
                          st.text(alphabet="x", min_size=100, max_size=400)), max_size=30),
       st.integers(min_value=40, max_value=300))
def test_split_text_keeps_every_chunk_in_limit_and_code_blocks_whole(parts, limit):
    text = "\n".join(parts)
    chunks = split_text(text, limit)
    assert all(len(c) <= limit for c in chunks)
    # the text survives whole apart from fence lines (a block cut in two is closed and reopened
    # with its opening line, info string included)
    def without_fences(t: str) -> str:
        return "".join("".join(line for line, _fence in _lines_with_fences(t)
                               if not FENCE_RE.match(line.rstrip("\n"))).split())

    assert "".join(without_fences(c) for c in chunks) == without_fences(text)  # each chunk is its own message
    if len(chunks) > 1:  # a text that was cut: no chunk leaves a code block open
        for chunk in chunks:
            states = [fence for _line, fence in _lines_with_fences(chunk)]
            assert states[-1] is None, chunks


def test_split_rendered_fits_after_escaping():
    text = "&<>" * 3000
    chunks = split_rendered(text, 500, lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))
    assert all(len(c) <= 500 for c in chunks)
    assert "".join(chunks) == "&amp;&lt;&gt;" * 3000


@pytest.mark.postgres
async def test_event_claims_and_origins_on_postgres_one_winner_under_a_race():
    from tests.store.conftest import fresh_pg_schema

    with fresh_pg_schema("ongrid_channels") as url:
        async with open_store(url) as store:
            ch = store.channel_store
            results: list[bool] = []

            async def claim():
                results.append(await ch.claim_event("feishu", "ev-race"))

            async with trio.open_nursery() as nursery:
                for _ in range(8):
                    nursery.start_soon(claim)
            assert sorted(results) == [False] * 7 + [True]
            row, _ = await store.get_or_create_coordinator("erin", "feishu:oc/om")
            origin = await ch.record_origin(session_id=row["id"], platform="feishu", im_user="ou_1",
                                            conversation="oc/om", predict_seq=True)
            assert origin["message_seq"] == 1
            assert [o["id"] for o in await ch.list_origins(row["id"])] == [origin["id"]]


async def test_a_busy_bridge_turn_stores_nothing_not_even_its_thread(tmp_path):
    """With every slot taken and no queue, ``start_turn`` raises Busy and a
    new conversation leaves no thread row, no origin and no queue place."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
    from rt_helpers import open_daemon

    from ongridd.errors import Busy
    from ongridd.plugins.chat import ChatAPI

    script = {"default": [{"delay_s": 3, "content": "slow answer"}]}
    limits = {"max_concurrent_turns": 1, "max_turns_per_user": 1, "max_queued_turns": 0}
    async with open_daemon(tmp_path, script, limits=limits) as d, d.ws("busy-main") as c:
        await c.send({"type": "user_message", "text": "first"})
        with trio.fail_after(10):
            while not d.fake.requests:
                await trio.sleep(0.02)
        chat = ChatAPI(store=d.store)
        chat.bind(d.runtime, d.runtime.nursery)
        for i in range(3):
            with pytest.raises(Busy):
                await chat.start_turn(user="bob", thread=f"slack-{i}", text="hi",
                                      origin={"platform": "slack", "im_user": "U1", "conversation": f"C{i}"})
        assert d.runtime.admission.queued == 0
        assert d.rows("SELECT id FROM chat_sessions WHERE user_id = 'bob'") == []
        assert d.rows("SELECT * FROM turn_origins") == []
        await c.until_type("final", "error", timeout=30)


async def test_the_answer_is_sent_only_once_a_progress_edit_in_flight_came_back():
    # a request already sent cannot be called back: the platform applies it whenever it arrives, and a
    # late progress edit would replace the answer in the placeholder for good
    from ongridd.plugins.bridgekit import relay_turn

    order: list[str] = []

    class SlowPlatform:
        async def progress(self, markdown: str) -> None:
            order.append("progress sent")
            await trio.sleep(0.3)  # the platform's latency
            order.append("progress applied")

        async def final(self, markdown: str) -> None:
            order.append(f"final {markdown}")

        async def failed(self, code: str, message: str) -> None:
            order.append(f"failed {code}")

    async def frames():
        yield {"type": "agent_tile", "task_id": "w1", "subagent_type": "specialist-disk", "description": "disk",
               "status": "completed", "started_at": "2026-12-05T00:00:00Z"}
        await trio.sleep(0.05)  # the edit is on its way when the answer comes
        yield {"type": "final", "text": "the answer"}

    assert await relay_turn(frames(), SlowPlatform(), min_interval_s=0.01) == "final"
    assert order == ["progress sent", "progress applied", "final the answer"]


async def test_the_answer_reaches_the_platform_without_control_or_bidi_characters():
    # the progress edits dropped them, the final answer kept them: a right-to-left override reorders
    # what a reader sees, and ESC, BEL and C1 controls mean nothing on a chat platform
    from ongridd.plugins.bridgekit import relay_turn

    sent: list[str] = []

    class Platform:
        async def progress(self, markdown: str) -> None:
            pass

        async def final(self, markdown: str) -> None:
            sent.append(markdown)

        async def failed(self, code: str, message: str) -> None:
            sent.append(f"failed {code}")

    async def frames():
        yield {"type": "final", "text": "ok \u202eevorppa\u202c \x1b[31mred\x07 \x9b2J\nline 2\tcell 👩\u200d💻"}

    assert await relay_turn(frames(), Platform(), min_interval_s=0.01) == "final"
    assert sent == ["ok evorppa [31mred 2J\nline 2\tcell 👩\u200d💻"]  # the emoji's joiner kept


async def test_bot_identity_is_asked_once_and_after_a_failure_at_most_once_a_minute(autojump_clock):
    from ongridd.plugins.api import BotIdentity, PlatformError

    answers = [PlatformError("HTTP 500"), None, "ou_bot"]
    calls = []

    async def fetch():
        calls.append(trio.current_time())
        await trio.sleep(1)  # in flight: concurrent callers wait for it
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    bot = BotIdentity(fetch=fetch, what="test bot")
    async with trio.open_nursery() as nursery:  # a burst of messages: one call
        for _ in range(5):
            nursery.start_soon(bot.get)
    assert len(calls) == 1 and await bot.get() is None  # failed: not asked again within the minute
    await trio.sleep(61)
    assert await bot.get() is None and len(calls) == 2  # the answer did not say
    await trio.sleep(61)
    assert await bot.get() == "ou_bot" and len(calls) == 3
    await trio.sleep(3600)
    assert await bot.get() == "ou_bot" and len(calls) == 3  # kept


async def test_a_sessions_origins_are_read_over_http_and_shown_with_its_messages(tmp_path):
    """``GET /api/sessions/{id}/origins`` lists where its bridged turns came from (another user's
    session: 404), and ``ongrid sessions messages`` marks the user message a bridge brought."""
    import sys
    from pathlib import Path

    import httpx2

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
    from rt_helpers import open_daemon

    from ongridd.cli.sessions import format_messages
    from ongridd.plugins.chat import ChatAPI

    script = {"default": [{"content": "all fine"}, {"content": "bob's answer"}]}
    async with open_daemon(tmp_path, script) as d:
        chat = ChatAPI(store=d.store)
        chat.bind(d.runtime, d.runtime.nursery)
        origin = {"platform": "telegram", "im_user": "111", "conversation": "-1001/7"}
        ids = {}
        for user in ("local", "bob"):
            async with await chat.start_turn(user=user, thread="telegram:-1001/7", text="how is web-1?",
                                             origin=origin) as turn:
                ids[user] = turn.session_id
                async for frame in turn:
                    if frame.get("type") in ("final", "error"):
                        break
        async with httpx2.AsyncClient(base_url=d.base_url) as http:
            origins = (await http.get(f"/api/sessions/{ids['local']}/origins")).json()
            assert [(o["platform"], o["im_user"], o["conversation"], o["message_seq"]) for o in origins] == [
                ("telegram", "111", "-1001/7", 1)]
            assert (await http.get(f"/api/sessions/{ids['bob']}/origins")).status_code == 404
            messages = (await http.get(f"/api/sessions/{ids['local']}/messages")).json()
        assert format_messages(messages, origins)[:2] == ["#1 user (via telegram, IM user 111): how is web-1?",
                                                          "#2 assistant: all fine"]
        joined = [{**origins[0], "message_seq": None}]
        assert format_messages(messages, joined)[-1] == (
            "(1 message(s) via telegram, IM user 111 went into a turn already running)")
