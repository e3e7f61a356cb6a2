"""The scripted model server over real HTTP (docs/architecture.md §16): chunking,
interleaving, ids, cursors, substitution, tool results, faults."""

from __future__ import annotations

import functools
import json

import httpx2
import pytest
import trio

from ongridd.fakellm import open_fake_llm, serve_fake_llm
from ongridd.fakellm.replies import NO_TOOL_RESULTS
from ongridd.fakellm.server import MODEL_ID

USER = [{"role": "user", "content": "what is filling the disk?"}]


def http_client(**kw) -> httpx2.AsyncClient:
    """A client for plain HTTP on loopback (no TLS: skipping the CA bundle
    load keeps each client cheap)."""
    return httpx2.AsyncClient(verify=False, trust_env=False, **kw)


async def post(base_url: str, body: dict, *, agent: str | None = "default", session: str | None = "s1", stream=False):
    headers = {}
    if agent is not None:
        headers["X-Ongrid-Agent"] = agent
    if session is not None:
        headers["X-Ongrid-Session"] = session
    body = {"model": "m", "messages": USER, **body}
    if stream:
        body["stream"] = True
    async with http_client(timeout=10) as client:
        return await client.post(base_url + "/chat/completions", json=body, headers=headers)


def sse_chunks(response) -> list[dict]:
    """The data objects of an SSE body; asserts it ends with [DONE]."""
    assert response.headers["content-type"].startswith("text/event-stream")
    lines = [line[len("data: "):] for line in response.text.split("\n\n") if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


def deltas(chunks: list[dict]) -> list[dict]:
    return [c["choices"][0]["delta"] for c in chunks if c["choices"]]


async def test_content_streams_in_16_character_chunks_with_role_first():
    text = "0123456789abcdef" "0123456789ABCDEF" "xyz"
    async with open_fake_llm({"default": [{"content": text}]}) as fake:
        r = await post(fake.base_url, {}, stream=True)
    assert r.status_code == 200
    chunks = sse_chunks(r)
    ds = deltas(chunks)
    assert [d.get("content") for d in ds[:-1]] == ["0123456789abcdef", "0123456789ABCDEF", "xyz"]
    assert ds[0]["role"] == "assistant" and all("role" not in d for d in ds[1:])
    assert ds[-1] == {} and chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


async def test_tool_call_arguments_in_8_char_chunks_interleaved_by_index():
    script = {
        "default": [
            {"content": "first step"},
            {
                "content": "checking",
                "tool_calls": [
                    {"name": "AgentTool", "raw_arguments": "A" * 8 + "B" * 8 + "C" * 4},  # 3 chunks
                    {"name": "SendMessage", "raw_arguments": "a" * 8 + "b" * 2},  # 2 chunks
                    {"name": "cluster_health", "raw_arguments": ""},  # 1 chunk, ""
                ],
            },
        ]
    }
    async with open_fake_llm(script) as fake:
        await post(fake.base_url, {})
        r = await post(fake.base_url, {}, stream=True)
    chunks = sse_chunks(r)
    ds = deltas(chunks)
    assert ds[0] == {"role": "assistant", "content": "checking"}
    calls = [d["tool_calls"] for d in ds if "tool_calls" in d]
    assert all(len(c) == 1 for c in calls)  # one call piece per chunk
    order = [(c[0]["index"], c[0]["function"]["arguments"]) for c in calls]
    assert order == [
        (0, "AAAAAAAA"), (1, "aaaaaaaa"), (2, ""),
        (0, "BBBBBBBB"), (1, "bb"),
        (0, "CCCC"),
    ]
    firsts = {}
    for (entry,) in calls:
        if entry["index"] not in firsts:
            firsts[entry["index"]] = entry
            assert entry["type"] == "function" and "name" in entry["function"] and "id" in entry
        else:
            assert set(entry) == {"index", "function"} and set(entry["function"]) == {"arguments"}
    # ids call_<step>_<index>: this is step 1 of the persona's list
    assert [(firsts[i]["id"], firsts[i]["function"]["name"]) for i in range(3)] == [
        ("call_1_0", "AgentTool"), ("call_1_1", "SendMessage"), ("call_1_2", "cluster_health"),
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_usage_chunk_only_when_asked():
    async with open_fake_llm({"default": [{"content": "a"}, {"content": "b"}]}) as fake:
        plain = sse_chunks(await post(fake.base_url, {}, stream=True))
        with_usage = sse_chunks(await post(fake.base_url, {"stream_options": {"include_usage": True}}, stream=True))
    assert all("usage" not in c for c in plain)
    assert with_usage[-1]["choices"] == [] and with_usage[-1]["usage"]["completion_tokens"] >= 1


async def test_non_streaming_body_and_model_echo():
    script = {"default": [{"content": "both", "tool_calls": [{"name": "get_active_incidents", "arguments": {}}]}]}
    async with open_fake_llm(script) as fake:
        r = await post(fake.base_url, {})
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == "m"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "both"
    assert choice["message"]["tool_calls"] == [
        {"id": "call_0_0", "type": "function", "function": {"name": "get_active_incidents", "arguments": "{}"}}
    ]
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]


async def test_fault_steps_come_out_as_written():
    script = {
        "default": [
            {"tool_calls": [{"name": "AgentTool", "raw_arguments": '{"subagent_type": "specialist-disk",'}]},
            {"tool_calls": [{"name": "no_such_tool_anywhere", "arguments": {"x": 1}}]},
            {"finish_reason": "length", "tool_calls": [{"name": "get_active_incidents", "raw_arguments": '{"lim'}]},
            {"content": '<tool_call>{"name": "get_host_load"}</tool_call>'},
            {"content": ""},
        ]
    }
    async with open_fake_llm(script) as fake:
        got = [(await post(fake.base_url, {})).json()["choices"][0] for _ in range(5)]
    assert got[0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"subagent_type": "specialist-disk",'
    assert got[1]["message"]["tool_calls"][0]["function"]["name"] == "no_such_tool_anywhere"
    assert got[2]["finish_reason"] == "length"
    assert got[2]["message"]["tool_calls"][0]["function"]["arguments"] == '{"lim'
    assert got[3]["message"] == {"role": "assistant", "content": '<tool_call>{"name": "get_host_load"}</tool_call>'}
    assert got[3]["finish_reason"] == "stop"
    assert got[4]["message"]["content"] == ""


@pytest.mark.parametrize("stream", [False, True])
async def test_content_filter_step_sends_its_content_and_that_finish_reason(stream):
    """A content filter that ends an answer which already has text (the review
    gate must not take that text as a finished answer)."""
    script = {"reviewer": [{"content": "Decision: approve\nall gates pass", "finish_reason": "content_filter"}]}
    async with open_fake_llm(script) as fake:
        r = await post(fake.base_url, {}, agent="reviewer", stream=stream)
    assert r.status_code == 200
    if stream:
        chunks = sse_chunks(r)
        assert "".join(d.get("content") or "" for d in deltas(chunks)) == "Decision: approve\nall gates pass"
        assert chunks[-1]["choices"][0]["finish_reason"] == "content_filter"
        assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    else:
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "content_filter"
        assert choice["message"] == {"role": "assistant", "content": "Decision: approve\nall gates pass"}


async def test_http_status_step_is_used_up():
    async with open_fake_llm({"default": [{"http_status": 503}, {"content": "after"}]}) as fake:
        first = await post(fake.base_url, {})
        second = await post(fake.base_url, {})
    assert first.status_code == 503
    assert "persona 'default' step 0" in first.json()["error"]["message"]
    assert second.json()["choices"][0]["message"]["content"] == "after"
    assert [(r.step, r.status) for r in fake.requests] == [(0, 503), (1, 200)]


async def test_delay_step_answers_after_waiting():
    async with open_fake_llm({"default": [{"delay_s": 0.05, "content": "late"}]}) as fake:
        r = await post(fake.base_url, {}, stream=True)
    assert "".join(d.get("content", "") for d in deltas(sse_chunks(r))) == "late"


async def test_per_session_cursors():
    script = {
        "default": [{"content": "c0"}, {"content": "c1"}, {"content": "c2"}],
        "specialist-disk": [{"content": "w0"}, {"content": "w1"}],
    }

    def text(r):
        return r.json()["choices"][0]["message"]["content"]

    async with open_fake_llm(script) as fake:
        url = fake.base_url
        # Parallel workers of one persona walk the list alike.
        w1 = [text(await post(url, {}, agent="specialist-disk", session="w-1")) for _ in range(2)]
        w2 = [text(await post(url, {}, agent="specialist-disk", session="w-2")) for _ in range(2)]
        # The coordinator session keeps its place across turns, regardless of workers in between.
        c = [text(await post(url, {}, agent="default", session="coord"))]
        await post(url, {}, agent="specialist-disk", session="w-3")
        c.append(text(await post(url, {}, agent="default", session="coord")))
        used_up = await post(url, {}, agent="specialist-disk", session="w-1")
        missing = await post(url, {}, agent="specialist-net", session="w-9")
        assert fake.cursor("specialist-disk", "w-1") == 2 and fake.cursor("default", "coord") == 2
    assert w1 == w2 == ["w0", "w1"]
    assert c == ["c0", "c1"]
    assert used_up.status_code == 400 and "'specialist-disk'" in used_up.json()["error"]["message"]
    assert "used up" in used_up.json()["error"]["message"]
    assert missing.status_code == 400 and "'specialist-net'" in missing.json()["error"]["message"]


async def test_missing_headers_mean_persona_default_and_empty_session():
    async with open_fake_llm({"default": [{"content": "x"}]}) as fake:
        r = await post(fake.base_url, {}, agent=None, session=None)
    assert r.status_code == 200
    rec = fake.requests[0]
    assert (rec.agent, rec.session, rec.step) == (None, None, 0)
    assert fake.cursor("default", "") == 1


async def test_variable_substitution_everywhere(monkeypatch):
    monkeypatch.setenv("DEMO_DIR", '/tmp/d "quoted"')
    monkeypatch.setenv("TOOL", "host_du_summary")
    script = {
        "default": [
            {
                "content": "look at ${DEMO_DIR}",
                "tool_calls": [
                    {"name": "${TOOL}", "arguments": {"paths": ["${DEMO_DIR}"], "${TOOL}_depth": 1}},
                    {"name": "x", "raw_arguments": '{"p": "${TOOL}"'},
                ],
            }
        ]
    }
    async with open_fake_llm(script) as fake:
        msg = (await post(fake.base_url, {})).json()["choices"][0]["message"]
    assert msg["content"] == 'look at /tmp/d "quoted"'
    first, second = msg["tool_calls"]
    assert first["function"]["name"] == "host_du_summary"
    assert json.loads(first["function"]["arguments"]) == {"paths": ['/tmp/d "quoted"'], "host_du_summary_depth": 1}
    assert second["function"]["arguments"] == '{"p": "host_du_summary"'


async def test_variable_from_explicit_env_and_missing_variable_is_a_clear_400():
    script = {"default": [{"content": "${ONGRID_TEST_SURELY_UNSET_VAR}"}, {"content": "${ONGRID_TEST_SURELY_UNSET_VAR}"}]}
    async with open_fake_llm(script, env={"ONGRID_TEST_SURELY_UNSET_VAR": "from-env"}) as fake:
        assert (await post(fake.base_url, {})).json()["choices"][0]["message"]["content"] == "from-env"
    async with open_fake_llm(script) as fake:
        r = await post(fake.base_url, {})
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert "ONGRID_TEST_SURELY_UNSET_VAR" in message and "persona 'default' step 0" in message


async def test_content_from_tool_results_uses_results_since_previous_step():
    script = {"default": [{"content_from_tool_results": True}, {"content_from_tool_results": True}]}
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "old_1", "type": "function", "function": {"name": "old_tool", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "old_1", "content": "stale result"},
        {"role": "assistant", "content": "checking", "tool_calls": [
            {"id": "call_1_0", "type": "function", "function": {"name": "host_du_summary", "arguments": "{}"}},
            {"id": "call_1_1", "type": "function", "function": {"name": "AgentTool", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "call_1_0", "content": "/var/log 4.0 MB\n/var/tmp 1.0 MB"},
        {"role": "tool", "tool_call_id": "call_1_1", "content": [{"type": "text", "text": '{"status": "completed"}'}]},
        {"role": "tool", "tool_call_id": "nobody", "content": "orphan"},
        {"role": "user", "content": "<system-reminder>catalog</system-reminder>"},
    ]
    async with open_fake_llm(script) as fake:
        r = await post(fake.base_url, {"messages": messages}, stream=True)
        answer = "".join(d.get("content", "") for d in deltas(sse_chunks(r)))
        none = (await post(fake.base_url, {"messages": USER})).json()["choices"][0]["message"]["content"]
    assert answer == (
        "host_du_summary: /var/log 4.0 MB\n/var/tmp 1.0 MB\n"
        'AgentTool: {"status": "completed"}\n'
        "?: orphan"
    )
    assert none == NO_TOOL_RESULTS


async def test_malformed_body_takes_no_step_and_is_recorded():
    async with open_fake_llm({"default": [{"content": "x"}]}) as fake:
        async with http_client() as client:
            bad = await client.post(fake.base_url + "/chat/completions", content=b"not json",
                                    headers={"X-Ongrid-Agent": "default", "Authorization": "Bearer sk-secret"})
        good = await post(fake.base_url, {})
    assert bad.status_code == 400 and "messages" in bad.json()["error"]["message"]
    assert good.status_code == 200
    assert [r.step for r in fake.requests] == [None, 0]
    assert fake.requests[0].body is None
    assert fake.requests[0].headers["authorization"] == "***"


async def test_models_endpoint():
    async with open_fake_llm({"default": []}) as fake, http_client() as client:
        r = await client.get(fake.base_url + "/models")
    assert [m["id"] for m in r.json()["data"]] == [MODEL_ID]
    assert fake.requests == []


async def test_serve_fake_llm_reports_the_real_port(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("default:\n  - content: from file\n", encoding="utf-8")
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(functools.partial(serve_fake_llm, str(path)))
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        assert int(base_url.rsplit(":", 1)[1].split("/")[0]) > 0
        r = await post(base_url, {})
        assert r.json()["choices"][0]["message"]["content"] == "from file"
        nursery.cancel_scope.cancel()


async def test_wait_requests_wakes_on_arrival():
    script = {"default": [{"delay_s": 30, "content": "never"}]}
    async with open_fake_llm(script) as fake, trio.open_nursery() as nursery:
        nursery.start_soon(post, fake.base_url, {})
        with trio.fail_after(10):
            await fake.wait_requests(1)
        assert fake.requests[0].status == 0 and fake.requests[0].step == 0  # still delaying
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("stream", [False, True])
async def test_official_client_parses_both_forms(stream):
    import openai

    script = {"default": [{"content": "hello there, operator", "tool_calls": [{"name": "a", "arguments": {"k": "v" * 20}}]}]}
    async with (
        open_fake_llm(script) as fake,
        openai.AsyncOpenAI(base_url=fake.base_url, api_key="x", max_retries=0) as client,
    ):
        if stream:
            chunks = []
            s = await client.chat.completions.create(model="m", messages=USER, stream=True)
            async for chunk in s:
                chunks.append(chunk)
            assert sum(1 for c in chunks if c.choices and c.choices[0].delta.tool_calls) == 4
        else:
            r = await client.chat.completions.create(model="m", messages=USER)
            assert r.choices[0].message.tool_calls[0].function.arguments == json.dumps({"k": "v" * 20})


async def test_busy_address_raises_oserror():
    busy = trio.socket.socket()
    await busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        with pytest.raises(OSError):
            async with open_fake_llm({"default": []}, port=busy.getsockname()[1]):
                pass  # pragma: no cover - never listens
    finally:
        busy.close()


async def test_explicit_usage_steps_and_the_deterministic_estimate():
    script = {"default": [
        {"content": "a", "usage": {"prompt_tokens": 1200, "completion_tokens": 80, "cached_tokens": 1024}},
        {"content": "b", "usage": {"completion_tokens": 7}},
        {"content": "twelve chars"},
    ]}
    async with open_fake_llm(script) as fake:
        streamed = sse_chunks(await post(fake.base_url, {"stream_options": {"include_usage": True}}, stream=True))
        partial = (await post(fake.base_url, {})).json()["usage"]
        estimated = (await post(fake.base_url, {})).json()["usage"]
    assert streamed[-1]["usage"] == {"prompt_tokens": 1200, "completion_tokens": 80, "total_tokens": 1280,
                                     "prompt_tokens_details": {"cached_tokens": 1024}}
    prompt = -(-len(USER[0]["content"]) // 4)  # characters / 4, rounded up
    assert partial == {"prompt_tokens": prompt, "completion_tokens": 7, "total_tokens": prompt + 7,
                       "prompt_tokens_details": {"cached_tokens": 0}}
    assert estimated == {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3,
                         "prompt_tokens_details": {"cached_tokens": 0}}


@pytest.mark.parametrize("usage, message", [
    ({"prompt": 3}, "unknown key"), ({"prompt_tokens": -1}, "integer >= 0"), ({"cached_tokens": True}, "integer"),
    ([], "must be a mapping"),
])
def test_bad_usage_steps_are_refused(usage, message):
    from ongridd.fakellm.script import ScriptError, script_from_data

    with pytest.raises(ScriptError, match=message):
        script_from_data({"default": [{"content": "x", "usage": usage}]})
    with pytest.raises(ScriptError, match="http_status answers with an error only"):
        script_from_data({"default": [{"http_status": 500, "usage": {"prompt_tokens": 1}}]})
