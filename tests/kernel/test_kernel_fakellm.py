"""Kernel runs against the scripted model server over real HTTP, through the
OpenAI provider (bad arguments, unknown tools, streamed tool-call assembly,
parallel calls, truncation, empty content; provider errors, retries,
timeouts, cancellation; every fault step of docs/architecture.md §16)."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import pytest
import trio
from kernel_helpers import AGENT_TOOL_PARAMS, Persona, Recorder, context, make_tool

from ongridd.config import LimitsConfig
from ongridd.errors import ToolError
from ongridd.fakellm import open_fake_llm
from ongridd.kernel import events as ev
from ongridd.kernel import run_agent
from ongridd.llm.openai_provider import OpenAIProvider
from ongridd.tools.bag import ToolBag
from ongridd.tools.spec import RedirectStub

USER = "why are 502s up on web?"


@asynccontextmanager
async def scripted(script, *, timeout_s=10.0, max_retries=0):
    async with open_fake_llm(script) as fake:
        async with OpenAIProvider(fake.base_url, None, "scripted", timeout_s=timeout_s, max_retries=max_retries,
                                  backoff_base_s=0.01, backoff_max_s=0.02) as provider:
            yield fake, provider


async def run(provider, bag, persona=None, *, sink=None, session_id="s-1", **kw):
    persona = persona or Persona(name=bag.agent)
    kw.setdefault("user_message", USER)
    return await run_agent(model=provider, persona=persona, system_prompt=f"You are {persona.name}.", bag=bag,
                           context=context(persona.name, session_id), sink=sink, **kw)


def wire_tools(fake, i):
    return [m for m in fake.requests[i].body["messages"] if m["role"] == "tool"]


def error_in(msg):
    body = json.loads(msg["content"])
    assert body["status"] in ("error", "timeout"), body
    return body["error"]


def agent_tool(handler):
    return make_tool("AgentTool", handler, properties=dict(AGENT_TOOL_PARAMS),
                     required=("description", "subagent_type", "prompt"), tool_class="control")


def send_message(sent):
    async def handler(args, ctx):
        sent.append(args["text"])
        return {"status": "sent"}

    return make_tool("SendMessage", handler, properties={"text": {"type": "string"}}, required=("text",),
                     tool_class="control")


def bag_of(agent, *tools, stubs=()):
    return ToolBag(agent=agent, tools={t.name: t for t in tools}, stubs={s.tool: s for s in stubs})


async def test_c7_malformed_arguments_over_http():
    spawned, sent = [], []

    async def spawn(args, ctx):
        spawned.append(args)
        return {"status": "completed"}

    script = {"default": [
        {"tool_calls": [
            {"name": "AgentTool", "raw_arguments": '{"subagent_type": "specialist-sre", "description": "502s", "prompt": "Check nginx 502 rate on web-1'},
            {"name": "AgentTool", "raw_arguments": '["specialist-sre", "check web-2"]'},
            {"name": "AgentTool", "raw_arguments": '{"subagent_type": "specialist-sre"}'},
            {"name": "AgentTool", "raw_arguments": '{"subagent_type":"specialist-sre","description":"5xx","prompt":"Check 5xx on web-3",}'},
            {"name": "SendMessage", "arguments": {"text": "Looking into the 502s now."}},
        ]},
        {"content_from_tool_results": True},
    ]}
    async with scripted(script) as (fake, provider):
        result = await run(provider, bag_of("default", agent_tool(spawn), send_message(sent)))
    assert result.status == "ok"
    assert spawned == [] and sent == ["Looking into the 502s now."]
    tools = wire_tools(fake, 1)
    assert [m["tool_call_id"] for m in tools] == [f"call_0_{i}" for i in range(5)]
    assert error_in(tools[0]).startswith("invalid JSON arguments for AgentTool: Unterminated string")
    assert "arguments must be a JSON object, got array" in error_in(tools[1])
    assert error_in(tools[2]).endswith("missing required field(s): description, prompt")
    assert error_in(tools[3]).startswith("invalid JSON arguments for AgentTool")
    assert json.loads(tools[4]["content"]) == {"status": "sent"}
    # the model really received the results
    assert 'SendMessage: {"status": "sent"}' in result.text


async def test_c8_unknown_tool_and_unknown_persona_then_a_good_dispatch():
    dispatched = []

    async def spawn(args, ctx):
        valid = ["specialist-disk", "specialist-sre"]
        if args["subagent_type"] not in valid:
            raise ToolError(f"unknown subagent_type {args['subagent_type']!r}; valid subagent_type values: {', '.join(valid)}")
        dispatched.append(args["subagent_type"])
        return {"status": "completed", "result": "pods are fine"}

    script = {"default": [
        {"tool_calls": [
            {"name": "list_pods", "arguments": {"resource": "pods", "namespace": "payments"}},
            {"name": "AgentTool", "arguments": {"subagent_type": "k8s-wizard", "description": "pods", "prompt": "List failing pods in payments"}},
        ]},
        {"tool_calls": [{"name": "AgentTool", "arguments": {"subagent_type": "specialist-sre", "description": "pods", "prompt": "List failing pods in payments"}}]},
        {"content": "No failing pods."},
    ]}
    async with scripted(script) as (fake, provider):
        result = await run(provider, bag_of("default", agent_tool(spawn), make_tool("query_devices")))
    assert result.status == "ok" and result.text == "No failing pods."
    first = wire_tools(fake, 1)
    assert "list_pods is not available to default" in error_in(first[0])
    assert "AgentTool, query_devices" in error_in(first[0])
    assert "valid subagent_type values: specialist-disk, specialist-sre" in error_in(first[1])
    assert dispatched == ["specialist-sre"]
    # earlier turns are still in the third request
    assert [m["tool_call_id"] for m in wire_tools(fake, 2)] == ["call_0_0", "call_0_1", "call_1_0"]


async def test_c8_worker_calling_a_tool_outside_its_bag_runs_nothing():
    restarted = []

    async def restart(args, ctx):
        restarted.append(args)

    # host_restart_service exists (registered) but is not in specialist-sre's bag
    make_tool("host_restart_service", restart, tool_class="write")
    script = {"specialist-sre": [
        {"tool_calls": [{"name": "host_restart_service", "arguments": {"service": "nginx", "reason": "502s"}}]},
        {"content_from_tool_results": True},
    ]}
    async with scripted(script) as (fake, provider):
        result = await run(provider, bag_of("specialist-sre", make_tool("host_du_summary")),
                           Persona(name="specialist-sre"), session_id="w-1")
    assert restarted == []
    assert "host_restart_service is not available to specialist-sre" in result.text
    assert fake.requests[0].agent == "specialist-sre" and fake.requests[0].session == "w-1"


async def test_redirect_stub_over_http():
    script = {"default": [
        {"tool_calls": [{"name": "host_bash", "arguments": {"cmd": "df -h"}}]},
        {"content_from_tool_results": True},
    ]}
    stub = RedirectStub(tool="host_bash", persona="specialist-ops", reason="shell runs through ops")
    sink = Recorder()
    async with scripted(script) as (fake, provider):
        await run(provider, bag_of("default", make_tool("query_devices"), stubs=[stub]), sink=sink)
    [msg] = wire_tools(fake, 1)
    body = json.loads(msg["content"])
    assert body["status"] == "redirect" and 'subagent_type="specialist-ops"' in body["suggested_call"]
    assert [e.result.status for e in sink.of(ev.ToolEndEvent)] == ["redirect"]
    offered = [t["function"]["name"] for t in fake.requests[0].body["tools"]]
    assert offered == ["query_devices", "host_bash"]


async def test_c11_split_and_interleaved_deltas_and_empty_arguments():
    dispatched, sent, health = [], [], []

    async def spawn(args, ctx):
        dispatched.append(args)
        return {"status": "completed"}

    async def cluster_health(args, ctx):
        health.append(args)
        return "green"

    script = {
        "default": [
            {"content": "On it.", "tool_calls": [
                {"name": "AgentTool", "arguments": {"subagent_type": "specialist-sre", "description": "5xx", "prompt": "Check 5xx on web-1"}},
                {"name": "SendMessage", "arguments": {"text": "checking"}},
            ]},
            {"content": "done"},
        ],
        "specialist-sre": [
            {"tool_calls": [{"name": "cluster_health", "raw_arguments": ""}]},
            {"content_from_tool_results": True},
        ],
    }
    sink = Recorder()
    async with scripted(script) as (fake, provider):
        result = await run(provider, bag_of("default", agent_tool(spawn), send_message(sent)), sink=sink)
        worker = await run(provider, bag_of("specialist-sre", make_tool("cluster_health", cluster_health)),
                           Persona(name="specialist-sre"), session_id="w-1")
    assert result.status == "ok"
    assert dispatched == [{"subagent_type": "specialist-sre", "description": "5xx", "prompt": "Check 5xx on web-1"}]
    assert sent == ["checking"]
    [assistant] = sink.of(ev.AssistantMessageEvent)[:1]
    assert assistant.message.content == "On it."
    assert [(c.id, c.name) for c in assistant.message.tool_calls] == [("call_0_0", "AgentTool"), ("call_0_1", "SendMessage")]
    assert "".join(e.text for e in sink.of(ev.TokenEvent)).startswith("On it.")
    # B: "" ran as {} and is replayed as "{}"
    assert health == [{}]
    assert worker.text == "cluster_health: green"
    replay = [m for m in fake.requests[-1].body["messages"] if m["role"] == "assistant"][0]
    assert replay["tool_calls"][0]["function"]["arguments"] == "{}"
    assert wire_tools(fake, len(fake.requests) - 1)[0]["tool_call_id"] == replay["tool_calls"][0]["id"]


async def test_c12_three_calls_one_crashes_all_answered_in_order():
    async def spawn(args, ctx):
        if args["description"] == "web-1":
            raise KeyError("host")
        return {"status": "completed", "result": "db-2 at 91%"}

    async def task_stop(args, ctx):
        raise ToolError(f"no such task {args['task_id']}")

    script = {"default": [
        {"tool_calls": [
            {"name": "AgentTool", "arguments": {"subagent_type": "specialist-sre", "description": "web-1", "prompt": "Check 5xx on web-1"}},
            {"name": "AgentTool", "arguments": {"subagent_type": "specialist-disk", "description": "db-2", "prompt": "Check disk usage on db-2"}},
            {"name": "TaskStop", "arguments": {"task_id": "w-unknown"}},
        ]},
        {"content": "db-2 disk at 91%."},
    ]}
    stop = make_tool("TaskStop", task_stop, properties={"task_id": {"type": "string"}}, required=("task_id",),
                     tool_class="control")
    async with scripted(script) as (fake, provider):
        result = await run(provider, bag_of("default", agent_tool(spawn), stop))
    assert result.status == "ok"
    messages = fake.requests[1].body["messages"]
    i = next(k for k, m in enumerate(messages) if m.get("tool_calls"))
    after = messages[i + 1:]
    assert [(m["role"], m.get("tool_call_id")) for m in after] == [
        ("tool", "call_0_0"), ("tool", "call_0_1"), ("tool", "call_0_2")]
    assert "KeyError" in error_in(after[0])
    assert json.loads(after[1]["content"])["result"] == "db-2 at 91%"
    assert error_in(after[2]) == "no such task w-unknown"


async def test_c21_big_result_is_capped_before_the_next_request():
    line = "10.0.0.7 - - [10/Oct/2025:10:40:00 +0000] \"GET /ünïcödé/日本 HTTP/1.1\" 502 0\n"
    big = line * (6_291_456 // len(line) + 1)

    async def du(args, ctx):
        return big

    script = {"specialist-disk": [
        {"tool_calls": [{"name": "host_du_summary", "arguments": {"paths": ["/var/log"]}}]},
        {"content": "nginx logs fill /var/log"},
    ]}
    async with scripted(script) as (fake, provider):
        result = await run(provider, bag_of("specialist-disk", make_tool("host_du_summary", du)),
                           Persona(name="specialist-disk"), limits=LimitsConfig(tool_result_max_chars=20_000))
    assert result.status == "ok"
    [msg] = wire_tools(fake, 1)
    assert len(msg["content"]) <= 20_000
    assert f"[truncated: {len(big):,} chars → " in msg["content"]
    head = msg["content"].split("\n[truncated:")[0]
    assert big.startswith(head)


@pytest.mark.parametrize("content", ["The 502s began at 10:40 UTC. I'll have specialist-sre look at web-1.", "", None])
async def test_c24_content_with_tool_calls_kept_and_replayed(content):
    ran = []

    async def spawn(args, ctx):
        ran.append(args)
        return {"status": "completed", "result": "upstream timeouts"}

    step = {"tool_calls": [{"name": "AgentTool", "arguments": {
        "subagent_type": "specialist-sre", "description": "web-1 502s",
        "prompt": "Check nginx upstream errors on web-1 since 10:40 UTC"}}]}
    if content is not None:
        step["content"] = content
    script = {"default": [step, {"content": "Upstream timeouts on web-1."}]}
    sink = Recorder()
    async with scripted(script) as (fake, provider):
        result = await run(provider, bag_of("default", agent_tool(spawn)), sink=sink)
    assert result.status == "ok" and len(ran) == 1
    replay = [m for m in fake.requests[1].body["messages"] if m["role"] == "assistant"][0]
    assert replay["tool_calls"][0]["function"]["name"] == "AgentTool"
    stored = sink.of(ev.AssistantMessageEvent)[0].message
    if content:
        assert replay["content"] == content and stored.content == content
    else:
        assert replay["content"] is None and stored.content is None


async def test_length_cut_tool_call_over_http():
    ran = []

    async def incidents(args, ctx):
        ran.append(args)
        return []

    script = {"default": [
        {"finish_reason": "length", "tool_calls": [{"name": "get_active_incidents", "raw_arguments": '{"lim'}]},
        {"content_from_tool_results": True},
    ]}
    async with scripted(script) as (fake, provider):
        result = await run(provider, bag_of("default", make_tool("get_active_incidents", incidents,
                                                                 properties={"limit": {"type": "integer"}})))
    assert ran == []
    assert result.status == "ok" and "finish_reason=length" in result.text
    [msg] = wire_tools(fake, 1)
    assert msg["tool_call_id"] == "call_0_0"


async def test_text_tool_call_over_http():
    script = {"default": [
        {"content": '<tool_call>{"name": "get_host_load"}</tool_call>'},
        {"content": "Load is normal."},
    ]}
    async with scripted(script) as (fake, provider):
        result = await run(provider, bag_of("default", make_tool("query_devices")))
    assert result.status == "ok" and result.text == "Load is normal."
    note = fake.requests[1].body["messages"][-1]
    assert note["role"] == "user" and "tools API" in note["content"] and "get_host_load" in note["content"]


async def test_max_turns_forced_answer_over_http():
    step = {"tool_calls": [{"name": "query_incidents", "arguments": {}}]}
    script = {"default": [step, step, {"content": "Best effort: one incident."}]}
    sink = Recorder()
    async with scripted(script) as (fake, provider):
        result = await run(provider, bag_of("default", make_tool("query_incidents")), Persona(max_turns=2), sink=sink)
    assert result.status == "max_turns" and result.text == "Best effort: one incident."
    assert "tools" not in fake.requests[2].body
    statuses = [e.result.status for e in sink.of(ev.ToolEndEvent)]
    assert statuses == ["ok", "cached"]


@pytest.mark.parametrize("finish, detail", [("stop", ""), ("content_filter", "content filter"),
                                            ("length", "cut at the model's output limit")])
async def test_the_final_answers_finish_reason_is_carried_in_the_result(finish, detail):
    """What the provider said about the answer's end reaches the result (the
    review gate approves only after ``stop``), also for text it sent."""
    script = {"reviewer": [{"content": "Decision: approve\n- all pass", "finish_reason": finish}]}
    async with scripted(script) as (fake, provider):
        result = await run(provider, bag_of("reviewer", make_tool("query_incidents")))
    assert (result.status, result.text, result.finish_reason) == ("ok", "Decision: approve\n- all pass", finish)
    assert detail in result.detail if detail else result.detail == ""


async def test_a_forced_answer_carries_its_finish_reason_and_no_answer_none():
    step = {"tool_calls": [{"name": "query_incidents", "arguments": {}}]}
    script = {"default": [step, {"content": "Decision: approve", "finish_reason": "stop"}],
              "other": [{"http_status": 500}]}
    async with scripted(script) as (fake, provider):
        limited = await run(provider, bag_of("default", make_tool("query_incidents")), Persona(max_turns=1))
        failed = await run(provider, bag_of("other", make_tool("query_incidents")), Persona(name="other"))
    assert (limited.status, limited.finish_reason) == ("max_turns", "stop")
    assert (failed.status, failed.finish_reason) == ("provider_error", None)


async def test_http_500_exhausting_retries_is_a_provider_error():
    script = {"default": [{"http_status": 500}] * 3}
    sink = Recorder()
    async with scripted(script, max_retries=2) as (fake, provider):
        result = await run(provider, bag_of("default"), sink=sink)
    assert result.status == "provider_error"
    assert "500" in result.detail
    assert len(fake.requests) == 3  # first attempt + 2 retries, each took a step
    assert isinstance(sink.events[-1], ev.ErrorEvent) and sink.events[-1].code == "provider_error"


async def test_http_500_then_success_is_retried():
    script = {"default": [{"http_status": 503}, {"content": "recovered"}]}
    async with scripted(script, max_retries=2) as (fake, provider):
        result = await run(provider, bag_of("default"))
    assert result.status == "ok" and result.text == "recovered" and result.turns == 1


async def test_http_400_is_not_retried():
    script = {"default": [{"content": "only one step"}]}
    async with scripted(script, max_retries=3) as (fake, provider):
        first = await run(provider, bag_of("default"))
        second = await run(provider, bag_of("default"))  # the script is used up: HTTP 400
    assert first.status == "ok"
    assert second.status == "provider_error" and "400" in second.detail
    assert len(fake.requests) == 2


async def test_provider_timeouts_with_retries_reach_the_kernel_as_provider_error():
    script = {"default": [{"delay_s": 30, "content": "late"}, {"delay_s": 30, "content": "late"}]}
    with trio.fail_after(20):
        async with scripted(script, timeout_s=0.3, max_retries=1) as (fake, provider):
            result = await run(provider, bag_of("default"))
    assert result.status == "provider_error"
    assert "tim" in result.detail.lower()
    assert len(fake.requests) == 2


async def test_cancel_mid_stream_ends_promptly():
    script = {"default": [{"delay_s": 60, "content": "never seen"}]}
    sink = Recorder()
    async with scripted(script) as (fake, provider):
        with trio.fail_after(10):
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(lambda: run(provider, bag_of("default"), sink=sink))
                    await fake.wait_requests(1)
                    scope.cancel()
    assert scope.cancelled_caught
    assert sink.of(ev.FinalEvent) == [] and sink.of(ev.ErrorEvent) == []


async def test_cancel_mid_tool_over_http():
    in_tool = trio.Event()

    async def slow(args, ctx):
        in_tool.set()
        await trio.sleep_forever()

    script = {"specialist-disk": [{"tool_calls": [{"name": "host_du_summary", "arguments": {}}]}]}
    sink = Recorder()
    async with scripted(script) as (fake, provider):
        with trio.fail_after(10):
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(lambda: run(provider, bag_of("specialist-disk", make_tool("host_du_summary", slow)),
                                                   Persona(name="specialist-disk"), sink=sink))
                    await in_tool.wait()
                    scope.cancel()
    [end] = sink.of(ev.ToolEndEvent)
    assert end.result.status == "cancelled"
    [answer] = sink.of(ev.ToolResultMessageEvent)
    assert answer.message.tool_call_id == "call_0_0"


async def test_tool_timeout_over_http():
    async def slow(args, ctx):
        await trio.sleep(30)

    script = {"specialist-disk": [
        {"tool_calls": [{"name": "host_du_summary", "arguments": {}}]},
        {"content_from_tool_results": True},
    ]}
    with trio.fail_after(10):
        async with scripted(script) as (fake, provider):
            result = await run(provider, bag_of("specialist-disk", make_tool("host_du_summary", slow, timeout_s=0.2)),
                               Persona(name="specialist-disk"))
    assert result.status == "ok"
    assert "timed out after 0.2 s" in result.text
