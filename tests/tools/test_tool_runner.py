"""One tool call through the ToolRunner: every failure becomes a readable
result with the right audit status (docs/architecture.md §8)."""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

from ongridd.errors import ToolError, ToolTimeout
from ongridd.llm.types import ToolCall
from ongridd.tools.bag import ToolBag
from ongridd.tools.runner import ToolRunner
from ongridd.tools.spec import Outcome, Proposal, RedirectStub, Tool, ToolCallContext

CTX = ToolCallContext(session_id="s-1", agent="specialist-disk")


def make(name, handler, *, props=None, required=(), tool_class="read", timeout_s=15.0, classify=None):
    params = {"type": "object", "properties": props or {}}
    if required:
        params["required"] = list(required)
    describe = (lambda a: Proposal(action=name, target="t")) if classify else None
    return Tool(name=name, description=name, parameters=params, handler=handler, tool_class=tool_class,
                timeout_s=timeout_s, classify=classify, describe=describe)


def runner(*tools, stubs=(), max_chars=16000, taint=None):
    bag = ToolBag(agent="specialist-disk", tools={t.name: t for t in tools}, stubs={s.tool: s for s in stubs})
    return ToolRunner(bag, max_result_chars=max_chars, taint=taint)


def c(name, args="", id="call_1"):
    return ToolCall(id=id, name=name, arguments=args if isinstance(args, str) else json.dumps(args))


async def test_string_and_json_values_and_outcome_status():
    async def s(args, ctx):
        return "plain text ü"

    async def j(args, ctx):
        return {"path": "/var/ü", "size_bytes": 3, "when": trio}  # unknown types go through str

    async def o(args, ctx):
        return Outcome({"status": "rejected", "reason": "no SOP"}, "rejected")

    r = runner(make("s", s), make("j", j), make("o", o))
    res = await r.run(c("s"), CTX)
    assert (res.content, res.status, res.call_id, res.name) == ("plain text ü", "ok", "call_1", "s")
    res = await r.run(c("j"), CTX)
    body = json.loads(res.content)
    assert body["path"] == "/var/ü" and "ü" in res.content and body["when"].startswith("<module 'trio'")
    res = await r.run(c("o"), CTX)
    assert res.status == "rejected" and json.loads(res.content) == {"status": "rejected", "reason": "no SOP"}


async def test_handler_gets_validated_args_and_context_with_nulls_dropped():
    seen = []

    async def h(args, ctx):
        seen.append((args, ctx.agent))
        return "ok"

    r = runner(make("host_du_summary", h, props={"paths": {"type": "array"}, "depth": {"type": "integer"}},
                    required=("paths",)))
    await r.run(c("host_du_summary", '{"paths": ["/var"], "depth": null}'), CTX)
    assert seen == [({"paths": ["/var"]}, "specialist-disk")]


async def test_errors_become_results():
    async def tool_error(args, ctx):
        raise ToolError("prometheus at http://127.0.0.1:9 is unreachable")

    async def crash(args, ctx):
        raise KeyError("host")

    async def own_timeout(args, ctx):
        raise ToolTimeout("ssh to db-2 timed out")

    async def cycle(args, ctx):
        x = []
        x.append(x)
        return x

    r = runner(make("q", tool_error), make("k", crash), make("t", own_timeout), make("y", cycle))
    res = await r.run(c("q"), CTX)
    assert res.status == "error"
    assert json.loads(res.content) == {"status": "error", "error": "prometheus at http://127.0.0.1:9 is unreachable"}
    res = await r.run(c("k"), CTX)
    assert res.status == "error"
    assert json.loads(res.content)["error"] == "k failed with an internal error: KeyError: 'host'"
    res = await r.run(c("t"), CTX)
    assert res.status == "timeout" and "ssh to db-2 timed out" in res.content
    res = await r.run(c("y"), CTX)
    assert res.status == "error" and "cannot be sent as JSON" in res.content


async def test_timeout(autojump_clock):
    async def slow(args, ctx):
        await trio.sleep(100)

    res = await runner(make("slow", slow, timeout_s=3)).run(c("slow"), CTX)
    assert res.status == "timeout"
    assert json.loads(res.content)["error"] == "slow timed out after 3 s and was stopped"
    assert res.duration_ms >= 0


async def test_unknown_tool_lists_the_bag_and_stub_redirects():
    async def h(args, ctx):
        return "x"

    stub = RedirectStub(tool="get_host_load", persona="specialist-compute", reason="load lives on compute")
    r = runner(make("host_du_summary", h), make("host_stat_file", h), stubs=[stub])
    res = await r.run(c("host_restart_service", {"service": "nginx"}), CTX)
    assert res.status == "error"
    error = json.loads(res.content)["error"]
    assert error.startswith("host_restart_service is not available to specialist-disk")
    assert error.endswith("Tools available to specialist-disk: host_du_summary, host_stat_file")
    res = await r.run(c("get_host_load", "not even json"), CTX)
    assert res.status == "redirect"
    body = json.loads(res.content)
    assert body["reason"] == "load lives on compute" and body["status"] == "redirect"
    res = await r.run(c(""), CTX)
    assert res.status == "error" and "a tool call without a name" in res.content


async def test_results_are_truncated_and_raw_size_kept():
    async def big(args, ctx):
        return "ü" * 50_000

    res = await runner(make("big", big), max_chars=1000).run(c("big"), CTX)
    assert len(res.content) <= 1000 and res.raw_chars == 50_000
    assert "[truncated: 50,000 chars → " in res.content


async def test_read_cache_only_for_successful_read_calls():
    runs = []

    async def h(args, ctx):
        runs.append(args)
        if args.get("fail"):
            raise ToolError("boom")
        return {"n": len(runs)}

    props = {"q": {"type": "string"}, "fail": {"type": "boolean"}}
    r = runner(make("query", h, props=props))
    first = await r.run(c("query", {"q": "a"}), CTX)
    again = await r.run(c("query", '{ "q" : "a" }', id="call_2"), CTX)
    assert first.status == "ok" and again.status == "cached" and again.call_id == "call_2"
    assert again.content.startswith("[cached: an identical query call earlier in this run")
    assert again.content.endswith('{"n": 1}')
    other = await r.run(c("query", {"q": "b"}), CTX)
    assert other.status == "ok"
    await r.run(c("query", {"q": "x", "fail": True}), CTX)
    failed_again = await r.run(c("query", {"q": "x", "fail": True}), CTX)
    assert failed_again.status == "error"
    assert len(runs) == 4
    # a new runner is a new run: no cache
    assert (await runner(make("query", h, props=props)).run(c("query", {"q": "a"}), CTX)).status == "ok"


async def test_identical_concurrent_read_calls_share_one_execution():
    release = trio.Event()
    runs = []

    async def h(args, ctx):
        runs.append(1)
        await release.wait()
        return "shared"

    r = runner(make("query", h))
    results = []
    async with trio.open_nursery() as nursery:
        async def go(i):
            results.append(await r.run(c("query", {}, id=f"c{i}"), CTX))

        nursery.start_soon(go, 1)
        nursery.start_soon(go, 2)
        await trio.testing.wait_all_tasks_blocked()
        release.set()
    assert len(runs) == 1
    assert sorted(x.status for x in results) == ["cached", "ok"]


async def test_classified_write_calls_are_never_cached_and_bad_classify_is_an_error():
    runs = []

    async def bash(args, ctx):
        runs.append(args["cmd"])
        return "done"

    def classify(args):
        if args["cmd"] == "explode":
            raise RuntimeError("classifier bug")
        return "read" if args["cmd"] == "uptime" else "write"

    r = runner(make("host_bash", bash, props={"cmd": {"type": "string"}, "reason": {"type": "string"}},
                    classify=classify))
    for _ in range(2):
        await r.run(c("host_bash", {"cmd": "rm -rf /tmp/x"}), CTX)
        await r.run(c("host_bash", {"cmd": "uptime"}), CTX)
    assert runs == ["rm -rf /tmp/x", "uptime", "rm -rf /tmp/x"]
    res = await r.run(c("host_bash", {"cmd": "explode"}), CTX)
    assert res.status == "error" and "classifier bug" in res.content


async def test_cancellation_propagates_and_caller_can_record_it():
    started = trio.Event()

    async def hang(args, ctx):
        started.set()
        await trio.sleep_forever()

    r = runner(make("hang", hang))
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(r.run, c("hang"), CTX)
            await started.wait()
            scope.cancel()
    assert scope.cancelled_caught
    res = r.cancelled_result(c("hang"))
    assert res.status == "cancelled"
    assert json.loads(res.content) == {"status": "cancelled", "error": "hang was cancelled: stopped before it finished"}


async def test_handler_exception_group_is_an_error_result():
    """A handler's own nursery failing with an ExceptionGroup is still an error result."""
    async def grouped(args, ctx):
        async with trio.open_nursery() as n:
            async def boom():
                raise ValueError("inner")
            n.start_soon(boom)

    res = await runner(make("g", grouped)).run(c("g"), CTX)
    assert res.status == "error" and "ExceptionGroup" in res.content


@pytest.mark.parametrize("raw", ["[1]", "{bad", '{"paths": "not-a-list"}'])
async def test_bad_arguments_never_reach_the_handler(raw):
    calls = []

    async def h(args, ctx):
        calls.append(args)

    res = await runner(make("host_du_summary", h, props={"paths": {"type": "array"}}, required=("paths",))).run(
        c("host_du_summary", raw), CTX)
    assert res.status == "error" and calls == []
    assert "host_du_summary" in json.loads(res.content)["error"]


async def test_a_result_with_an_unpaired_surrogate_reaches_the_model_and_the_store_as_valid_text():
    """A file name with a byte that is not UTF-8 comes back from ``os.scandir`` as a lone
    surrogate (``surrogateescape``); UTF-8 cannot carry it (not to the store, the client or the
    model), so the result carries U+FFFD there, in plain text and in JSON values alike."""
    async def s(args, ctx):
        return "found /var/log/app-\udcff.log"

    async def j(args, ctx):
        return {"file": "/var/log/app-\udcff.log", "emoji": "\U0001f600"}

    r = runner(make("s", s), make("j", j))
    res = await r.run(c("s"), CTX)
    assert res.content == "found /var/log/app-\ufffd.log"
    res = await r.run(c("j"), CTX)
    assert json.loads(res.content) == {"file": "/var/log/app-\ufffd.log", "emoji": "\U0001f600"}
    res.content.encode("utf-8")


async def test_a_call_carrying_a_piece_of_a_held_secret_is_neither_run_nor_echoed_nor_are_its_runs_later_calls():
    """The results' redaction hides a held secret's pieces; a tool that echoes its input would tell a
    model which of its guesses is a piece (`date '+ALICEtoa%%ALICEtob…'`: only the right one came
    back redacted), a secret a character at a time. A call whose arguments carry a piece is refused
    without echoing them, and every later call of the run with it: one yes/no per run."""
    from ongridd.secretset import REGISTRY
    from ongridd.tools.runner import SECRET_PIECE_REFUSAL, SecretTaint

    ran: list[str] = []

    async def echo(args, ctx):
        ran.append(args["text"])
        return args["text"]

    tool = make("echo", echo, props={"text": {"type": "string"}}, required=("text",))
    with REGISTRY.hold(["ALICEtoken0123456789abcd"]):
        r = runner(tool)
        wrong = await r.run(c("echo", {"text": "+ALICEtoa%ALICEtob%ALICEto9"}), CTX)
        assert wrong.status == "ok" and wrong.content == "+ALICEtoa%ALICEtob%ALICEto9"  # no piece: as it is
        right = await r.run(c("echo", {"text": "+ALICEtoa%ALICEtok%ALICEto9"}, id="call_2"), CTX)
        assert right.status == "error" and SECRET_PIECE_REFUSAL in right.content and "ALICEto" not in right.content
        escaped = runner(tool)  # the same piece spelled with JSON escapes
        hidden = await escaped.run(c("echo", '{"text": "\\u0041LICEtok"}'), CTX)
        assert hidden.status == "error" and SECRET_PIECE_REFUSAL in hidden.content
        later = await r.run(c("echo", {"text": "hello"}, id="call_3"), CTX)
        assert later.status == "error" and SECRET_PIECE_REFUSAL in later.content
        fresh = await runner(tool).run(c("echo", {"text": "hello"}), CTX)  # another turn's run: not affected
        assert fresh.status == "ok" and fresh.content == "hello"
        taint = SecretTaint()  # the runs of one turn share theirs: one worker's guess stops another's calls
        guesser, other = runner(tool, taint=taint), runner(tool, taint=taint)
        assert (await guesser.run(c("echo", {"text": "ALICEtok"}), CTX)).status == "error"
        after = await other.run(c("echo", {"text": "hello"}), CTX)
        assert after.status == "error" and SECRET_PIECE_REFUSAL in after.content
    assert ran == ["+ALICEtoa%ALICEtob%ALICEto9", "hello"]


async def test_a_result_holding_a_piece_of_a_held_secret_is_withheld_and_taints_the_turn():
    """A tool that spells out what it prints (escapes, format directives) lets a model write a guess
    no check of its arguments sees; the result is withheld whole (its redaction would show which
    guess is a piece) and the turn's later calls are refused."""
    from ongridd.secretset import REGISTRY
    from ongridd.tools.runner import SECRET_OUTPUT_WITHHELD, SECRET_PIECE_REFUSAL, SecretTaint

    async def unescape(args, ctx):
        return args["text"].encode().decode("unicode_escape")

    tool = make("printf", unescape, props={"text": {"type": "string"}}, required=("text",))
    with REGISTRY.hold(["ALICEtoken0123456789abcd"]):
        taint = SecretTaint()
        r = runner(tool, taint=taint)
        spelled = "".join(f"\\x{ord(ch):02x}" for ch in "ALICEtok")
        miss = await r.run(c("printf", {"text": "\\x41LICEtoa"}), CTX)
        assert miss.status == "ok" and miss.content == "ALICEtoa" and not taint.seen
        hit = await r.run(c("printf", {"text": f"@{spelled}@ALICEtoa"}, id="call_2"), CTX)
        assert hit.status == "error" and SECRET_OUTPUT_WITHHELD in hit.content and "ALICE" not in hit.content
        assert taint.seen
        later = await runner(tool, taint=taint).run(c("printf", {"text": "hello"}, id="call_3"), CTX)
        assert later.status == "error" and SECRET_PIECE_REFUSAL in later.content
