"""The ReAct loop against an in-memory model (bad arguments, unknown tools,
streamed tool calls, parallel calls, truncation, empty content, and the
limits, cache, errors and cancellation of docs/architecture.md §8)."""

from __future__ import annotations

import json

import pytest
import trio
from kernel_helpers import (
    AGENT_TOOL_PARAMS,
    Persona,
    Recorder,
    ScriptedModel,
    call,
    calls,
    context,
    error_of,
    make_tool,
    say,
    tool_messages,
)

from ongridd.errors import ProviderError, ToolError
from ongridd.kernel import events as ev
from ongridd.kernel import run_agent
from ongridd.llm.types import Message, ToolCall
from ongridd.tools.bag import ToolBag
from ongridd.tools.runner import ToolRunner
from ongridd.tools.spec import RedirectStub


def coordinator_bag(*tools, stubs=()):
    return ToolBag(agent="default", tools={t.name: t for t in tools}, stubs={s.tool: s for s in stubs})


async def run(model, bag, *, persona=None, sink=None, **kw):
    persona = persona or Persona(name=bag.agent)
    kw.setdefault("user_message", "why are 502s up on web?")
    return await run_agent(model=model, persona=persona, system_prompt="You are the coordinator.", bag=bag,
                           context=context(persona.name), sink=sink, **kw)


async def test_final_answer_request_shape_and_events():
    model = ScriptedModel([say("All quiet on web-1; the 502s stopped at 10:41.")])
    sink = Recorder()
    tool = make_tool("query_devices")
    history = [Message(role="user", content="hello"), Message(role="assistant", content="hi")]
    result = await run(model, coordinator_bag(tool), sink=sink, history=history,
                       reminder="<system-reminder>\ncatalog\n</system-reminder>")
    assert result.status == "ok"
    assert result.text == "All quiet on web-1; the 502s stopped at 10:41."
    assert result.turns == 1 and result.tool_calls == 0
    assert result.usage.prompt_tokens == 10
    [request] = model.requests
    roles = [m.role for m in request.messages]
    assert roles == ["system", "user", "assistant", "user", "user"]
    assert request.messages[0].content == "You are the coordinator."
    assert request.messages[-1].content == "<system-reminder>\ncatalog\n</system-reminder>"
    assert request.messages[-2].content == "why are 502s up on web?"
    assert [t["function"]["name"] for t in request.tools] == ["query_devices"]
    assert request.agent == "default" and request.session_id == "s-1"
    # the reminder is never stored
    assert [m.role for m in result.messages_added] == ["user", "assistant"]
    assert all("system-reminder" not in (m.content or "") for m in sink.messages)
    assert "".join(e.text for e in sink.of(ev.TokenEvent)) == result.text
    assert sink.of(ev.FinalEvent) == [ev.FinalEvent("ok", result.text, "")]
    assert sink.events[-1] == ev.FinalEvent("ok", result.text, "")


async def test_reminder_without_tags_is_wrapped_and_sent_every_call():
    tool = make_tool("query_devices")
    model = ScriptedModel([calls(call("query_devices", {})), say("done")])
    await run(model, coordinator_bag(tool), reminder="specialists: specialist-disk")
    for request in model.requests:
        assert request.messages[-1].role == "user"
        assert request.messages[-1].content == "<system-reminder>\nspecialists: specialist-disk\n</system-reminder>"


async def test_c7_malformed_arguments_each_answered_and_valid_call_runs():
    spawned = []
    sent = []

    async def agent_tool(args, ctx):
        spawned.append(args)
        return {"status": "completed"}

    async def send_message(args, ctx):
        sent.append(args["text"])
        return {"status": "sent"}

    bag = coordinator_bag(
        make_tool("AgentTool", agent_tool, properties=dict(AGENT_TOOL_PARAMS),
                  required=("description", "subagent_type", "prompt"), tool_class="control"),
        make_tool("SendMessage", send_message, properties={"text": {"type": "string"}}, required=("text",),
                  tool_class="control"),
    )
    first = calls(
        call("AgentTool", '{"subagent_type": "specialist-sre", "description": "502s", "prompt": "Check nginx 502 rate on web-1', id="call_a"),
        call("AgentTool", '["specialist-sre", "check web-2"]', id="call_b"),
        call("AgentTool", '{"subagent_type": "specialist-sre"}', id="call_c"),
        call("AgentTool", '{"subagent_type":"specialist-sre","description":"5xx","prompt":"Check 5xx on web-3",}', id="call_d"),
        call("SendMessage", '{"text": "Looking into the 502s now."}', id="call_e"),
    )
    model = ScriptedModel([first, say("I could not dispatch; here is what I know.")])
    sink = Recorder()
    result = await run(model, bag, sink=sink)
    assert result.status == "ok"
    assert spawned == []  # nothing executed with partial or {} arguments
    assert sent == ["Looking into the 502s now."]
    msgs = tool_messages(model.requests[1])
    assert [m.tool_call_id for m in msgs] == ["call_a", "call_b", "call_c", "call_d", "call_e"]
    assert error_of(msgs[0]).startswith("invalid JSON arguments for AgentTool: Unterminated string")
    assert "arguments must be a JSON object, got array" in error_of(msgs[1])
    assert "AgentTool" in error_of(msgs[1])
    assert error_of(msgs[2]) == "invalid arguments for AgentTool: missing required field(s): description, prompt"
    assert error_of(msgs[3]).startswith("invalid JSON arguments for AgentTool:")
    assert json.loads(msgs[4].content) == {"status": "sent"}
    statuses = {e.call_id: e.result.status for e in sink.of(ev.ToolEndEvent)}
    assert statuses == {"call_a": "error", "call_b": "error", "call_c": "error", "call_d": "error", "call_e": "ok"}
    # the raw arguments appear only as a bounded preview
    long_raw = '{"prompt": "' + "x" * 5000
    model = ScriptedModel([calls(call("AgentTool", long_raw, id="call_long")), say("ok")])
    await run(model, bag)
    [msg] = tool_messages(model.requests[1])
    assert len(msg.content) < 600 and "5,012 chars" in msg.content


async def test_c8_unknown_tool_lists_the_bag_and_run_continues():
    dispatched = []

    async def agent_tool(args, ctx):
        if args["subagent_type"] != "specialist-sre":
            raise ToolError(f"unknown subagent_type {args['subagent_type']!r}; valid subagent_type values: specialist-disk, specialist-sre")
        dispatched.append(args)
        return {"status": "completed", "result": "web-1 is fine"}

    bag = coordinator_bag(
        make_tool("AgentTool", agent_tool, properties=dict(AGENT_TOOL_PARAMS),
                  required=("description", "subagent_type", "prompt"), tool_class="control"),
        make_tool("query_devices"),
    )
    model = ScriptedModel([
        calls(call("list_pods", {"resource": "pods", "namespace": "payments"}, id="call_1"),
              call("AgentTool", {"subagent_type": "k8s-wizard", "description": "pods", "prompt": "List failing pods"}, id="call_2")),
        calls(call("AgentTool", {"subagent_type": "specialist-sre", "description": "pods", "prompt": "List failing pods"}, id="call_3")),
        say("web-1 is fine"),
    ])
    result = await run(model, bag)
    assert result.status == "ok" and result.text == "web-1 is fine"
    first = tool_messages(model.requests[1])
    assert [m.tool_call_id for m in first] == ["call_1", "call_2"]
    err = error_of(first[0])
    assert "list_pods is not available to default" in err
    assert "AgentTool, query_devices" in err
    assert "valid subagent_type values: specialist-disk, specialist-sre" in error_of(first[1])
    assert len(dispatched) == 1
    # earlier turns are still in history
    third = model.requests[2]
    assert [m.tool_call_id for m in tool_messages(third)] == ["call_1", "call_2", "call_3"]


async def test_c8_worker_cannot_call_a_registered_tool_outside_its_bag():
    restarted = []

    async def restart(args, ctx):
        restarted.append(args)
        return "restarted"

    registered_elsewhere = make_tool("host_restart_service", restart, tool_class="write")
    assert registered_elsewhere.may_mutate
    bag = ToolBag(agent="specialist-sre", tools={"host_du_summary": make_tool("host_du_summary")})
    model = ScriptedModel([
        calls(call("host_restart_service", {"service": "nginx", "reason": "502s"})),
        say("I cannot restart services."),
    ])
    sink = Recorder()
    result = await run(model, bag, persona=Persona(name="specialist-sre"), sink=sink)
    assert result.status == "ok"
    assert restarted == []
    [msg] = tool_messages(model.requests[1])
    assert "host_restart_service is not available to specialist-sre" in error_of(msg)
    assert [e.result.status for e in sink.of(ev.ToolEndEvent)] == ["error"]
    # the model was never even offered it
    assert [t["function"]["name"] for t in model.requests[0].tools] == ["host_du_summary"]


async def test_redirect_stub_answers_with_routing_json():
    bag = coordinator_bag(make_tool("query_devices"),
                          stubs=[RedirectStub(tool="host_du_summary", persona="specialist-disk", reason="disk")])
    model = ScriptedModel([calls(call("host_du_summary", {"paths": ["/var"]})), say("dispatching")])
    sink = Recorder()
    await run(model, bag, sink=sink)
    [msg] = tool_messages(model.requests[1])
    body = json.loads(msg.content)
    assert body["status"] == "redirect"
    assert set(body) == {"status", "hint", "reason", "suggested_call", "why_stub_exists"}
    assert 'subagent_type="specialist-disk"' in body["suggested_call"]
    assert "background" not in body["suggested_call"]
    assert [e.result.status for e in sink.of(ev.ToolEndEvent)] == ["redirect"]
    schema = {t["function"]["name"]: t for t in model.requests[0].tools}["host_du_summary"]
    assert schema["function"]["parameters"]["type"] == "object"
    assert "specialist-disk" in schema["function"]["description"]


async def test_c11_parameterless_tool_with_empty_arguments_runs_as_empty_object():
    seen = []

    async def cluster_health(args, ctx):
        seen.append((args, ctx.call_id))
        return "green"

    bag = ToolBag(agent="specialist-sre", tools={"cluster_health": make_tool("cluster_health", cluster_health)})
    model = ScriptedModel([calls(ToolCall(id="call_h", name="cluster_health", arguments="")), say("healthy")])
    await run(model, bag, persona=Persona(name="specialist-sre"))
    assert seen == [({}, "call_h")]
    wire = [m.to_wire() for m in model.requests[1].messages]
    assistant = [w for w in wire if w["role"] == "assistant"][0]
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"
    tool_wire = [w for w in wire if w["role"] == "tool"][0]
    assert tool_wire == {"role": "tool", "content": "green", "tool_call_id": "call_h"}


async def test_c12_every_call_answered_in_order_even_when_one_crashes():
    async def agent_tool(args, ctx):
        if args["description"] == "web-1":
            raise KeyError("host")
        return {"task_id": "w-2", "status": "completed", "result": "db-2 disk at 91%"}

    async def task_stop(args, ctx):
        raise ToolError(f"no such task {args['task_id']}")

    bag = coordinator_bag(
        make_tool("AgentTool", agent_tool, properties=dict(AGENT_TOOL_PARAMS),
                  required=("description", "subagent_type", "prompt"), tool_class="control"),
        make_tool("TaskStop", task_stop, properties={"task_id": {"type": "string"}}, required=("task_id",),
                  tool_class="control"),
    )
    model = ScriptedModel([
        calls(call("AgentTool", {"subagent_type": "specialist-sre", "description": "web-1", "prompt": "Check 5xx on web-1"}, id="call_p1"),
              call("AgentTool", {"subagent_type": "specialist-disk", "description": "db-2", "prompt": "Check disk usage on db-2"}, id="call_p2"),
              call("TaskStop", {"task_id": "w-unknown"}, id="call_p3")),
        say("db-2 disk is at 91%; the web-1 check failed."),
    ])
    result = await run(model, bag)
    assert result.status == "ok" and result.tool_calls == 3
    request = model.requests[1]
    i = next(k for k, m in enumerate(request.messages) if m.role == "assistant" and m.tool_calls)
    after = request.messages[i + 1:i + 4]
    assert [(m.role, m.tool_call_id) for m in after] == [("tool", "call_p1"), ("tool", "call_p2"), ("tool", "call_p3")]
    assert len(tool_messages(request)) == 3
    assert "AgentTool failed with an internal error: KeyError: 'host'" in error_of(after[0])
    assert json.loads(after[1].content)["result"] == "db-2 disk at 91%"
    assert error_of(after[2]) == "no such task w-unknown"


async def test_tool_calls_of_one_message_run_concurrently():
    both_started = trio.Event()
    started = []

    async def slow(args, ctx):
        started.append(ctx.call_id)
        if len(started) == 2:
            both_started.set()
        await both_started.wait()  # deadlocks unless the two run at the same time
        return ctx.call_id

    bag = ToolBag(agent="w", tools={"slow": make_tool("slow", slow)})
    model = ScriptedModel([calls(call("slow", {"n": 1}, id="c1"), call("slow", {"n": 2}, id="c2")), say("ok")])
    with trio.fail_after(5):
        await run(model, bag, persona=Persona(name="w"))
    assert [m.content for m in tool_messages(model.requests[1])] == ["c1", "c2"]


async def test_c21_huge_result_is_truncated_before_history():
    line = "10.0.0.1 - - [10/Oct/2025:10:40:00 +0000] \"GET /api/ünïcödé/日本 HTTP/1.1\" 502 173 \"-\"\n"
    big = line * (6_291_456 // len(line) + 1)

    async def du(args, ctx):
        return big

    bag = ToolBag(agent="specialist-disk", tools={"host_du_summary": make_tool("host_du_summary", du)})
    model = ScriptedModel([calls(call("host_du_summary", {})), say("done")])
    sink = Recorder()
    await run(model, bag, persona=Persona(name="specialist-disk"), sink=sink,
              limits=type("L", (), {"tool_result_max_chars": 20_000})())
    [msg] = tool_messages(model.requests[1])
    assert len(msg.content) <= 20_000
    assert f"[truncated: {len(big):,} chars → " in msg.content
    head, _, tail = msg.content.partition("\n[truncated:")
    assert big.startswith(head) and big.endswith(tail.split("]\n", 1)[1])
    [end] = sink.of(ev.ToolEndEvent)
    assert end.result.raw_chars == len(big) and end.result.content == msg.content


@pytest.mark.parametrize("content", ["The 502s began at 10:40 UTC. I'll have specialist-sre look at web-1.", "", None])
async def test_c24_text_with_tool_calls_is_kept_and_replayed(content):
    ran = []

    async def agent_tool(args, ctx):
        ran.append(args["prompt"])
        return {"status": "completed", "result": "upstream timeouts"}

    bag = coordinator_bag(make_tool("AgentTool", agent_tool, properties=dict(AGENT_TOOL_PARAMS),
                                    required=("description", "subagent_type", "prompt"), tool_class="control"))
    model = ScriptedModel([
        calls(call("AgentTool", {"subagent_type": "specialist-sre", "description": "web-1 502s",
                                 "prompt": "Check nginx upstream errors on web-1 since 10:40 UTC"}, id="call_m1"),
              content=content),
        say("Upstream timeouts on web-1."),
    ])
    sink = Recorder()
    await run(model, bag, sink=sink)
    assert ran == ["Check nginx upstream errors on web-1 since 10:40 UTC"]
    [stored] = [m for m in sink.messages if m.role == "assistant" and m.tool_calls]
    replayed = [m for m in model.requests[1].messages if m.role == "assistant"][0].to_wire()
    if content:
        assert stored.content == content
        assert replayed["content"] == content
        assert "".join(e.text for e in sink.of(ev.TokenEvent)).startswith(content)
    else:  # "" and null are stored and replayed the same way
        assert stored.content is None
        assert replayed["content"] is None
    assert replayed["tool_calls"][0]["id"] == "call_m1"


async def test_length_cut_tool_call_is_never_executed():
    ran = []

    async def incidents(args, ctx):
        ran.append(args)
        return []

    bag = coordinator_bag(make_tool("get_active_incidents", incidents, properties={"limit": {"type": "integer"}}))
    model = ScriptedModel([
        calls(ToolCall(id="call_cut", name="get_active_incidents", arguments='{"lim'), finish="length"),
        say("No active incidents."),
    ])
    sink = Recorder()
    result = await run(model, bag, sink=sink)
    assert ran == []
    assert result.status == "ok" and result.tool_calls == 0 and result.turns == 2
    [msg] = tool_messages(model.requests[1])
    assert msg.tool_call_id == "call_cut"
    assert "finish_reason=length" in error_of(msg) and "nothing was run" in error_of(msg)
    assert sink.of(ev.ToolStartEvent) == []
    assert [e.result.status for e in sink.of(ev.ToolEndEvent)] == ["error"]


async def test_text_tool_call_gets_a_hint_not_a_final_answer():
    model = ScriptedModel([
        say('<tool_call>{"name": "get_host_load", "arguments": {}}</tool_call>'),
        say("Load is fine."),
    ])
    sink = Recorder()
    result = await run(model, coordinator_bag(make_tool("query_devices")), sink=sink)
    assert result.status == "ok" and result.text == "Load is fine." and result.turns == 2
    hint = model.requests[1].messages[-1]
    notes = [m for m in model.requests[1].messages if m.role == "user" and "[ongrid]" in (m.content or "")]
    assert len(notes) == 1 and "get_host_load" in notes[0].content and "tools API" in notes[0].content
    assert hint.content == notes[0].content  # no reminder here: the note is last
    assert [e.source for e in sink.of(ev.UserMessageEvent)] == ["user", "kernel"]


async def test_text_tool_calls_until_max_turns_end_with_an_explained_status():
    text_call = say('<tool_call>{"name": "get_host_load", "arguments": {}}</tool_call>')
    model = ScriptedModel([text_call, text_call, text_call, say("Best effort: I could not check the load.")])
    result = await run(model, coordinator_bag(make_tool("query_devices")), persona=Persona(max_turns=3))
    assert result.status == "max_turns"
    assert result.turns == 3 and len(model.requests) == 4
    assert "tool call as text" in result.detail and "3 times" in result.detail
    assert result.text == "Best effort: I could not check the load."


async def test_max_turns_forces_one_last_call_without_tools():
    tool = make_tool("query_incidents", properties={"page": {"type": "integer"}})
    steps = [calls(call("query_incidents", {"page": i}, id=f"c{i}")) for i in range(3)]
    model = ScriptedModel([*steps, say("From pages 0-2: two incidents on web.")])
    sink = Recorder()
    result = await run(model, coordinator_bag(tool), persona=Persona(max_turns=3), sink=sink, reminder="R")
    assert result.status == "max_turns"
    assert result.text == "From pages 0-2: two incidents on web."
    assert result.turns == 3 and result.tool_calls == 3
    last = model.requests[-1]
    assert last.tools == ()
    assert "3 model turns" in last.messages[-2].content and "Do not call any tools" in last.messages[-2].content
    assert last.messages[-1].content.startswith("<system-reminder>")
    # the instruction is not stored; the answer is
    assert all("Do not call any tools" not in (m.content or "") for m in result.messages_added)
    assert result.messages_added[-1] == Message(role="assistant", content=result.text)
    assert sink.events[-1] == ev.FinalEvent("max_turns", result.text, result.detail)


async def test_tool_budget_runs_what_fits_then_forces_an_answer():
    ran = []

    async def q(args, ctx):
        ran.append(args["n"])
        return f"result {args['n']}"

    tool = make_tool("query_promql", q, properties={"n": {"type": "integer"}})
    model = ScriptedModel([
        calls(call("query_promql", {"n": 1}, id="a"), call("query_promql", {"n": 2}, id="b")),
        calls(call("query_promql", {"n": 3}, id="c"), call("query_promql", {"n": 4}, id="d")),
        say("Answer from three results."),
    ])
    sink = Recorder()
    result = await run(model, ToolBag(agent="w", tools={"query_promql": tool}),
                       persona=Persona(name="w", tool_budget=3), sink=sink)
    assert sorted(ran) == [1, 2, 3]
    assert result.status == "tool_budget" and result.text == "Answer from three results."
    assert result.tool_calls == 4 and result.turns == 2
    second = tool_messages(model.requests[2])[2:]
    assert [m.tool_call_id for m in second] == ["c", "d"]
    assert second[0].content == "result 3"
    assert "tool budget" in error_of(second[1]) and "was not run" in error_of(second[1])
    assert model.requests[2].tools == ()
    assert "tool budget" in result.detail


async def test_read_cache_and_a_model_repeating_itself_is_stopped():
    runs = []

    async def incidents(args, ctx):
        runs.append(args)
        return {"incidents": [{"id": "i-1"}]}

    tool = make_tool("get_active_incidents", incidents, properties={"severity": {"type": "string"}})
    same = calls(call("get_active_incidents", {"severity": "critical"}))
    same_other_order = calls(call("get_active_incidents", '{ "severity" : "critical", "unused": null }'))
    model = ScriptedModel([same, same_other_order, same, same, say("One critical incident: i-1.")])
    sink = Recorder()
    result = await run(model, coordinator_bag(tool), persona=Persona(max_turns=10, tool_budget=4), sink=sink)
    assert len(runs) == 1
    statuses = [e.result.status for e in sink.of(ev.ToolEndEvent)]
    assert statuses == ["ok", "cached", "cached", "cached"]
    cached = [e.result.content for e in sink.of(ev.ToolEndEvent)][1]
    assert cached.startswith("[cached: an identical get_active_incidents call")
    assert '{"incidents": [{"id": "i-1"}]}' in cached
    assert result.status == "tool_budget" and "tool budget is 4" in result.detail


async def test_write_class_calls_are_not_cached():
    runs = []

    async def bash(args, ctx):
        runs.append(args["cmd"])
        return "ok"

    tool = make_tool("host_bash", bash, properties={"cmd": {"type": "string"}},
                     classify=lambda a: "read" if a["cmd"] == "uptime" else "write")
    c = lambda: calls(call("host_bash", {"cmd": "touch /tmp/x", "reason": "test"}))
    model = ScriptedModel([c(), c(), say("done")])
    await run(model, ToolBag(agent="w", tools={"host_bash": tool}), persona=Persona(name="w"))
    assert runs == ["touch /tmp/x", "touch /tmp/x"]


async def test_provider_error_ends_the_run_with_status():
    tool = make_tool("query_devices")
    model = ScriptedModel([calls(call("query_devices", {})),
                           ProviderError("model provider failed after 3 retries: HTTP 500", status=500, retryable=True)])
    sink = Recorder()
    result = await run(model, coordinator_bag(tool), sink=sink)
    assert result.status == "provider_error"
    assert result.detail == "model provider failed after 3 retries: HTTP 500"
    assert sink.events[-1] == ev.ErrorEvent("provider_error", "model provider failed after 3 retries: HTTP 500")
    assert sink.of(ev.FinalEvent) == []
    assert [m.role for m in result.messages_added] == ["user", "assistant", "tool"]


async def test_unexpected_model_exception_is_a_provider_error_not_a_crash():
    model = ScriptedModel([RuntimeError("connection reset")])
    result = await run(model, coordinator_bag())
    assert result.status == "provider_error"
    assert "RuntimeError: connection reset" in result.detail


async def test_stream_without_completion_is_a_provider_error():
    class Broken:
        async def stream(self, request):
            yield ev  # not a stream event: ignored

        async def aclose(self):
            pass

    result = await run(Broken(), coordinator_bag())
    assert result.status == "provider_error" and "without a completion" in result.detail


async def test_broken_sink_does_not_kill_the_run():
    async def sink(event):
        raise RuntimeError("database is down")

    model = ScriptedModel([calls(call("query_devices", {})), say("fine")])
    result = await run(model, coordinator_bag(make_tool("query_devices")), sink=sink)
    assert result.status == "ok" and result.text == "fine"


async def test_inbox_messages_join_history_before_the_next_call():
    inbox = [[], [Message(role="user", content="actually, check db-2 instead")], []]

    def pending():
        return inbox.pop(0) if inbox else []

    model = ScriptedModel([calls(call("query_devices", {})), say("db-2 is fine")])
    sink = Recorder()
    result = await run(model, coordinator_bag(make_tool("query_devices")), sink=sink,
                       pending_user_messages=pending)
    assert result.status == "ok"
    assert model.requests[1].messages[-1].content == "actually, check db-2 instead"
    assert [e.source for e in sink.of(ev.UserMessageEvent)] == ["user", "inbox"]


async def test_missing_and_duplicate_call_ids_get_unique_ids():
    model = ScriptedModel([calls(ToolCall(id="", name="query_devices", arguments="{}"),
                                 ToolCall(id="dup", name="query_devices", arguments='{"a":1}'),
                                 ToolCall(id="dup", name="query_devices", arguments='{"a":2}')),
                           say("ok")])
    await run(model, coordinator_bag(make_tool("query_devices", properties={"a": {"type": "integer"}})))
    ids = [m.tool_call_id for m in tool_messages(model.requests[1])]
    assert len(set(ids)) == 3 and "dup" in ids and all(ids)
    assistant = [m for m in model.requests[1].messages if m.tool_calls][0]
    assert [c.id for c in assistant.tool_calls] == ids


async def test_tool_timeout_is_a_result(autojump_clock):
    async def slow(args, ctx):
        await trio.sleep(60)
        return "never"

    tool = make_tool("host_du_summary", slow, timeout_s=2)
    model = ScriptedModel([calls(call("host_du_summary", {})), say("the du timed out")])
    sink = Recorder()
    result = await run(model, ToolBag(agent="w", tools={"host_du_summary": tool}), persona=Persona(name="w"), sink=sink)
    assert result.status == "ok"
    [end] = sink.of(ev.ToolEndEvent)
    assert end.result.status == "timeout"
    assert json.loads(end.result.content) == {"status": "timeout",
                                              "error": "host_du_summary timed out after 2 s and was stopped"}


async def test_cancel_mid_stream_ends_promptly_without_final():
    started = trio.Event()

    async def hang(request):
        started.set()
        await trio.sleep_forever()

    model = ScriptedModel([hang])
    sink = Recorder()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            async def go():
                await run(model, coordinator_bag(), sink=sink)
                raise AssertionError("run_agent returned after cancellation")

            nursery.start_soon(go)
            await started.wait()
            nursery.cancel_scope.cancel()
    assert sink.of(ev.FinalEvent) == [] and sink.of(ev.ErrorEvent) == []


async def test_cancel_mid_tool_records_cancelled_results_and_keeps_history_valid():
    in_tool = trio.Event()

    async def slow(args, ctx):
        in_tool.set()
        await trio.sleep_forever()

    async def quick(args, ctx):
        return "quick result"

    bag = ToolBag(agent="w", tools={"host_du_summary": make_tool("host_du_summary", slow),
                                    "host_stat_file": make_tool("host_stat_file", quick)})
    model = ScriptedModel([calls(call("host_du_summary", {}, id="c_slow"), call("host_stat_file", {}, id="c_quick"))])
    sink = Recorder()
    with trio.fail_after(5):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: run(model, bag, persona=Persona(name="w"), sink=sink))
                await in_tool.wait()
                scope.cancel()
    assert scope.cancelled_caught
    ends = {e.call_id: e.result.status for e in sink.of(ev.ToolEndEvent)}
    assert ends == {"c_slow": "cancelled", "c_quick": "ok"}
    answers = sink.of(ev.ToolResultMessageEvent)
    assert [e.message.tool_call_id for e in answers] == ["c_slow", "c_quick"]
    assert json.loads(answers[0].message.content)["status"] == "cancelled"
    assert sink.of(ev.FinalEvent) == []


async def test_runner_must_match_bag():
    bag = coordinator_bag()
    with pytest.raises(ValueError):
        await run(ScriptedModel([]), bag, runner=ToolRunner(coordinator_bag()))


async def test_forced_answer_that_is_empty_still_explains():
    tool = make_tool("query_devices")
    model = ScriptedModel([calls(call("query_devices", {})), say("")])
    result = await run(model, coordinator_bag(tool), persona=Persona(max_turns=1))
    assert result.status == "max_turns"
    assert result.text.startswith("(no answer: stopped after 1 model calls")


class BlockingSink(Recorder):
    """Records events; blocks (cancellably) the first time ``predicate(event)`` holds."""

    def __init__(self, predicate):
        super().__init__()
        self.predicate = predicate
        self.hit = trio.Event()

    async def __call__(self, event):
        self.events.append(event)
        if not self.hit.is_set() and self.predicate(event):
            self.hit.set()
            await trio.sleep_forever()


async def _cancel_when_blocked(model, bag, sink):
    with trio.fail_after(5):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: run(model, bag, persona=Persona(name="w"), sink=sink))
                await sink.hit.wait()
                scope.cancel()
    assert scope.cancelled_caught


async def test_cancel_while_storing_the_assistant_message_still_answers_every_call():
    ran = []

    async def h(args, ctx):
        ran.append(ctx.call_id)
        return "x"

    bag = ToolBag(agent="w", tools={"q": make_tool("q", h)})
    model = ScriptedModel([calls(call("q", {"a": 1}, id="c1"), call("q", {"a": 2}, id="c2"))])
    sink = BlockingSink(lambda e: isinstance(e, ev.AssistantMessageEvent))
    await _cancel_when_blocked(model, bag, sink)
    assert ran == [] and sink.of(ev.ToolStartEvent) == []
    assert [(e.call_id, e.result.status) for e in sink.of(ev.ToolEndEvent)] == [("c1", "cancelled"), ("c2", "cancelled")]
    assert [e.message.tool_call_id for e in sink.of(ev.ToolResultMessageEvent)] == ["c1", "c2"]


async def test_cancel_while_storing_a_tool_message_sends_no_duplicates():
    async def h(args, ctx):
        return f"result {ctx.call_id}"

    bag = ToolBag(agent="w", tools={"q": make_tool("q", h)})
    model = ScriptedModel([calls(call("q", {"a": 1}, id="c1"), call("q", {"a": 2}, id="c2"), call("q", {"a": 3}, id="c3"))])
    sink = BlockingSink(lambda e: isinstance(e, ev.ToolResultMessageEvent) and e.message.tool_call_id == "c2")
    await _cancel_when_blocked(model, bag, sink)
    answers = [(e.message.tool_call_id, e.message.content) for e in sink.of(ev.ToolResultMessageEvent)]
    assert answers == [("c1", "result c1"), ("c2", "result c2"), ("c3", "result c3")]
    assert sorted(e.call_id for e in sink.of(ev.ToolEndEvent)) == ["c1", "c2", "c3"]
    assert all(e.result.status == "ok" for e in sink.of(ev.ToolEndEvent))


async def test_every_model_call_ends_with_one_model_call_event():
    """ok with the reported usage (before the assistant message), error
    without usage, and cancelled when the run is cancelled mid-call."""
    from ongridd.llm.types import Completion, Usage

    tool = make_tool("query_devices")
    first = Completion(message=Message(role="assistant", tool_calls=(ToolCall(id="c1", name="query_devices",
                                                                              arguments="{}"),)),
                       finish_reason="tool_calls", usage=Usage(prompt_tokens=70, completion_tokens=6, cached_tokens=64))
    sink = Recorder()
    result = await run(ScriptedModel([first, ProviderError("HTTP 500", status=500)]), coordinator_bag(tool), sink=sink)
    assert result.status == "provider_error"
    assert [(e.outcome, e.usage) for e in sink.of(ev.ModelCallEvent)] == [
        ("ok", Usage(prompt_tokens=70, completion_tokens=6, cached_tokens=64)), ("error", None)]
    kinds = [type(e).__name__ for e in sink.events]
    assert kinds.index("ModelCallEvent") < kinds.index("AssistantMessageEvent")
    assert result.usage == Usage(prompt_tokens=70, completion_tokens=6, cached_tokens=64)

    async def hang(request):
        await trio.sleep_forever()

    sink = Recorder()
    with trio.move_on_after(0.2):
        await run(ScriptedModel([hang]), coordinator_bag(tool), sink=sink)
    assert [(e.outcome, e.usage) for e in sink.of(ev.ModelCallEvent)] == [("cancelled", None)]


async def test_calls_run_side_by_side_answer_one_refusal_once_one_printed_a_piece_of_a_held_secret():
    """Calls of one step run concurrently and each passed the taint check before any ended; had each
    come back on its own, every call would have said whether what it printed was a piece (a key, 6
    bits a step). Once one is withheld, every result of the step is the same refusal, and the turn's
    ``on_set`` is told (the runtime stops the turn)."""
    import trio

    from ongridd.secretset import REGISTRY
    from ongridd.tools.runner import SECRET_PIECE_REFUSAL, SecretTaint, ToolRunner

    async def printf(args, ctx):
        await trio.sleep(0.05 * args["wait"])
        return args["text"].encode().decode("unicode_escape")

    tool = make_tool("printf", printf, properties={"text": {"type": "string"}, "wait": {"type": "integer"}})
    spelled = "".join(f"\\x{ord(ch):02x}" for ch in "ALICEtok")
    model = ScriptedModel([calls(call("printf", {"text": "first", "wait": 0}, id="c1"),
                                 call("printf", {"text": spelled, "wait": 1}, id="c2"),
                                 call("printf", {"text": "third", "wait": 2}, id="c3")),
                           say("done")])
    stopped: list[bool] = []
    taint = SecretTaint(on_set=lambda: stopped.append(True))
    bag = coordinator_bag(tool)
    with REGISTRY.hold(["ALICEtoken0123456789abcd"]):
        await run(model, bag, runner=ToolRunner(bag, taint=taint))
    answers = [m.content for m in tool_messages(model.requests[1])]
    assert len(answers) == 3 and all(SECRET_PIECE_REFUSAL in a for a in answers), answers
    assert stopped == [True]
