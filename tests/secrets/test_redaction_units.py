"""The secret set and its redaction points, one by one (no daemon)."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess

import pytest

from ongridd.config import load_config, read_secret
from ongridd.llm.redacting import RedactingModel
from ongridd.llm.types import Completion, Message, ModelRequest, TextDelta, ToolCall
from ongridd.secretset import (
    REDACTED,
    REGISTRY,
    Redactor,
    collect_secrets,
    daemon_secrets,
    redact,
    remove_from_environ,
    restore_environ,
    scrubbed_env,
    secret_env_names,
)
from ongridd.store.rows import clean_text
from ongridd.tools.bag import ToolBag
from ongridd import secretset
from ongridd.tools.runner import ToolRunner, render_value
from ongridd.tools.truncate import truncate_result
from ongridd.tools.spec import Tool, ToolCallContext

TOKEN = "alice-token-0123456789"
KEY = "sk-test-ABCDEFGHIJKLMNOP"


# ---- the matcher ---------------------------------------------------------------


def test_every_literal_is_replaced_whatever_its_length():
    r = Redactor(["x", TOKEN])
    assert r.redact(f"a{TOKEN}b {TOKEN}") == f"a{REDACTED}b {REDACTED}"
    assert r.redact("box") == f"bo{REDACTED}"  # one character is still a secret
    assert r.redact("nothing here") == "nothing here"


def test_nested_and_overlapping_secrets_leave_no_fragment():
    r = Redactor(["abcd", "cdef", "bc"])
    assert r.redact("xxabcdefyy") == f"xx{REDACTED}yy"  # abcd and cdef overlap: one merged span
    assert r.redact("abc") == f"a{REDACTED}"
    r2 = Redactor(["tok", "tok-long-secret"])  # one a prefix of the other
    out = r2.redact("tok-long-secret tok")
    assert out == f"{REDACTED} {REDACTED}"
    assert "long" not in out and "secret" not in out


def test_json_escaped_forms_are_redacted():
    secret = 'p"a\\ss/é\n'
    r = Redactor([secret])
    once = json.dumps({"stdout": f"x{secret}y"})  # ensure_ascii: \" \\ \u00e9 \n
    assert secret not in r.redact(once)
    assert json.loads(r.redact(once)) == {"stdout": f"x{REDACTED}y"}
    raw = json.dumps({"stdout": secret}, ensure_ascii=False)
    assert json.loads(r.redact(raw)) == {"stdout": REDACTED}
    twice = json.dumps({"result": json.dumps({"stdout": secret})})  # a JSON result inside a JSON result
    assert json.loads(json.loads(r.redact(twice))["result"]) == {"stdout": REDACTED}
    assert r.redact(secret) == REDACTED


def test_regex_metacharacters_are_literals():
    r = Redactor(["a.b*c", "(x|y)"])
    assert r.redact("aXbc a.b*c (x|y) x") == f"aXbc {REDACTED} {REDACTED} x"


def test_a_secret_spread_out_in_hand_written_text_is_redacted():
    r = Redactor([KEY, "x"])
    spread = {
        "wrapped": "use sk-test-ABCD\n    EFGHIJKLMNOP now",
        "quoted": "> quoted sk-test-\n> ABCDEFGH\r\n> IJKLMNOP",
        "comment": "# sk-test-ABCDEFGH\n# IJKLMNOP",
        "slashes": "// sk-test-ABCDEFGH\n// IJKLMNOP",
        "bullet": "- sk-test-ABCDEFGH\n- IJKLMNOP",
        "deep indent": "sk-test-ABCDEFGH\n" + " " * 40 + "IJKLMNOP",
        "shell": 'curl -H "K: sk-test-ABCDEFGH\\\nIJKLMNOP"',
        "paragraph": "sk-test-ABCDEFGH\n\nIJKLMNOP",
        "folded": "sk-test-ABCDEFGH IJKLMNOP",  # a YAML folded scalar's parse
        "separators": "sk-test-ABCD\u2028EFGH\u0085IJKL\x0bMN\x0cOP\xa0",
        "invisible": "sk-test-ABC\u200bDEFGH\u00adIJKLMNOP",
        # invisible or blank-looking characters of other categories and planes, between every character
        **{f"U+{ord(sep):04X}": sep.join(KEY) for sep in (
            "\ufe0f",  # a variation selector (Mn)
            "\u034f",  # the combining grapheme joiner (Mn)
            "\U0001d173",  # a musical format character (Cf, beyond the first plane)
            "\u3164",  # the Hangul filler (Lo)
            "\u2800",  # the braille blank (So)
            "\U000e0041",  # a tag character
            "\x00",  # a control character
        )},
    }
    for what, text in spread.items():
        out = r.redact_wrapped(text)
        assert REDACTED in out and "ABCDEFGH" not in out and "IJKLMNOP" not in out, (what, out)
    assert r.redact_wrapped(f"{KEY} and sk-test-ABCDEFGH  \nIJKLMNOP") == f"{REDACTED} and {REDACTED}"
    assert r.redact_wrapped("sk-test-ABCDEFGH, then IJKLMNOP") == "sk-test-ABCDEFGH, then IJKLMNOP"  # words between
    assert Redactor([]).redact_wrapped("a\nb") == "a\nb" and r.redact_wrapped(None) is None
    assert r.redact_wrapped("a b\nc") == "a b\nc"  # "x" is too short to be looked for spread out
    # a non-ASCII character a secret contains is part of it, not a gap
    accented = Redactor(["pässwörd-0123456789"])
    assert accented.redact_wrapped("pä ssw\nörd-0123456789") == REDACTED
    assert accented.redact_wrapped("pässwrd-0123456789") == "pässwrd-0123456789"
    blanks = ("s" + " " * 50_000 + "k\n") * 20  # linear: one translate, one scan
    assert r.redact_wrapped(blanks) == blanks


def test_redactor_never_shows_its_values_and_passes_non_text_through():
    r = Redactor([TOKEN])
    assert TOKEN not in repr(r)
    assert r.redact(None) is None and r.redact("") == "" and r.redact(5) == 5
    assert not Redactor([]) and not Redactor([""])


def test_registry_holds_are_a_union_and_removed_on_exit():
    assert redact(TOKEN) == TOKEN
    with REGISTRY.hold([TOKEN]):
        with REGISTRY.hold([KEY]):
            assert redact(f"{TOKEN} {KEY}") == f"{REDACTED} {REDACTED}"
        assert redact(f"{TOKEN} {KEY}") == f"{REDACTED} {KEY}"
    assert redact(TOKEN) == TOKEN


# ---- reading and removing the daemon's secrets -------------------------------------


def _config(tmp_path, text: str = ""):
    path = tmp_path / "ongrid.yaml"
    path.write_text(text)
    return load_config(path, environ={})


def test_collect_reads_tokens_key_plugin_env_settings_and_the_database_password(tmp_path):
    config = _config(tmp_path, "database: {url: 'postgresql://u:p%40ss-word-123@h/db'}\n"
                               "plugins: {settings: {bridge: {bot_token_env: BRIDGE_TOKEN, "
                               "nested: {hook_secret_env: HOOK_SECRET}, chat_id: 12}}}\n")
    env = {"ONGRID_TOKENS": f"alice:{TOKEN}, bob:shortish", "OPENAI_API_KEY": KEY,
           "BRIDGE_TOKEN": "bridge-secret-value", "HOOK_SECRET": "hook-secret-value", "OTHER": "keep"}
    assert secret_env_names(config) == ["ONGRID_TOKENS", "OPENAI_API_KEY", "BRIDGE_TOKEN", "HOOK_SECRET"]
    secrets = collect_secrets(config, env)
    assert secrets.api_key == KEY and secrets.tokens_raw == env["ONGRID_TOKENS"]
    assert {TOKEN, "shortish", KEY, "bridge-secret-value", "hook-secret-value",
            "p%40ss-word-123", "p@ss-word-123"} <= secrets.values
    assert TOKEN not in repr(secrets)
    before = dict(env)
    removed = remove_from_environ(secrets, env)
    assert sorted(removed) == ["BRIDGE_TOKEN", "HOOK_SECRET", "ONGRID_TOKENS", "OPENAI_API_KEY"]
    assert env == {"OTHER": "keep"}
    assert REGISTRY.remembered("OPENAI_API_KEY") == KEY
    restore_environ(removed, env)
    assert env == before and REGISTRY.remembered("OPENAI_API_KEY") is None


def test_a_short_secret_is_refused_naming_where_it_comes_from(tmp_path):
    from ongridd.secretset import ShortSecretError

    config = _config(tmp_path, "plugins: {settings: {bridge: {bot_token_env: BRIDGE_TOKEN}}}\n")
    with pytest.raises(ShortSecretError, match=r"the secret in \$BRIDGE_TOKEN is 4 characters long") as info:
        collect_secrets(config, {"BRIDGE_TOKEN": "test"})
    assert "test" not in str(info.value)
    pg = _config(tmp_path, "database: {url: 'postgresql://u:abc@h/db'}\n")
    with pytest.raises(ShortSecretError, match="the database URL's password is 3 characters long"):
        collect_secrets(pg, {})


def test_a_short_secret_read_from_a_bridges_default_variable_is_refused_too(monkeypatch):
    from ongridd.plugins.secrets import adopt_secret
    from ongridd.secretset import ShortSecretError

    monkeypatch.setenv("ONGRID_TEST_DEFAULT_SHORT", "abc")
    for _ in range(2):  # refused when read, and again on a later read (never "not set")
        with pytest.raises(ShortSecretError, match=r"the secret in \$ONGRID_TEST_DEFAULT_SHORT is 3 characters long"):
            adopt_secret("ONGRID_TEST_DEFAULT_SHORT")
    assert "ONGRID_TEST_DEFAULT_SHORT" not in os.environ  # out of the environment all the same
    assert REGISTRY.redact("abc") == "abc"  # never held: ordinary text stays as it is


def test_a_bridge_whose_default_variable_holds_a_short_secret_fails_saying_why(tmp_path):
    cfg = tmp_path / "tg.yaml"
    cfg.write_text('plugins:\n  settings:\n    ongrid_telegram: {mode: polling, users: {"123": local}}\n')
    from tests.runtime.rt_helpers import ongrid_cmd, subprocess_env

    env = {k: v for k, v in subprocess_env(TELEGRAM_BOT_TOKEN="abc").items() if not k.startswith("ONGRID_")}
    done = subprocess.run(ongrid_cmd("plugins", "list", "--json", "--config", str(cfg)), capture_output=True,
                          text=True, timeout=60, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    telegram = {r["name"]: r for r in json.loads(done.stdout)}["ongrid_telegram"]
    assert not telegram["ok"] and telegram["error"].startswith("the secret in $TELEGRAM_BOT_TOKEN is 3 characters"), telegram


def test_daemon_secrets_leave_the_environment_while_held_and_come_back(monkeypatch, tmp_path):
    monkeypatch.setenv("ONGRID_TEST_SECRET_X", "remember-me-please-1")
    config = _config(tmp_path, "llm: {api_key_env: ONGRID_TEST_SECRET_X}\n")
    with daemon_secrets(config) as (secrets, removed):
        assert removed == ["ONGRID_TEST_SECRET_X"] and secrets.api_key == "remember-me-please-1"
        assert "ONGRID_TEST_SECRET_X" not in os.environ
        assert read_secret("ONGRID_TEST_SECRET_X") == "remember-me-please-1"  # later readers still find it
        assert read_secret("ONGRID_TEST_SECRET_X", environ={}) is None  # an explicit environ is taken as given
        assert redact("x remember-me-please-1") == f"x {REDACTED}"
        child = subprocess.run(["env"], capture_output=True, text=True, check=True).stdout  # inherits os.environ
        assert "remember-me-please-1" not in child
    assert os.environ["ONGRID_TEST_SECRET_X"] == "remember-me-please-1"
    assert redact("remember-me-please-1") == "remember-me-please-1"


def test_scrubbed_env_keeps_only_the_named_variables_and_never_a_held_secret():
    env = {"PATH": "/bin", "HOME": "/root", "OPENAI_API_KEY": KEY, "PIP_INDEX_URL": "http://idx/simple",
           "LANG": f"x{TOKEN}", "ONGRID_TOKENS": f"a:{TOKEN}"}
    with REGISTRY.hold([TOKEN]):
        out = scrubbed_env(prefixes=("PIP_",), extra={"X": "1"}, environ=env)
    assert out == {"PATH": "/bin", "HOME": "/root", "PIP_INDEX_URL": "http://idx/simple", "X": "1"}
    assert scrubbed_env(environ={})["PATH"]  # a PATH is always there


# ---- the redaction points ----------------------------------------------------------


def test_store_text_columns_are_redacted():
    with REGISTRY.hold([TOKEN]):
        assert clean_text(f"ps: {TOKEN}\x00") == f"ps: {REDACTED}\ufffd"
    assert clean_text(None) is None


async def test_tool_results_are_redacted_before_they_are_cut():
    async def leak(args, ctx):
        return {"stdout": (TOKEN + " ") * 60}

    bag = ToolBag(agent="p", tools={"leak": Tool(name="leak", description="prints a token", handler=leak)})
    runner = ToolRunner(bag, max_result_chars=300)
    with REGISTRY.hold([TOKEN]):
        res = await runner.run(ToolCall(id="c1", name="leak", arguments="{}"), ToolCallContext(session_id="s", agent="p"))
        shown = secretset.redact_pieces(render_value({"stdout": (TOKEN + " ") * 60}))
    _assert_withheld(res)  # the model sees none of it (the redaction would tell it which of its guesses is a piece)
    assert TOKEN not in res.content and TOKEN[:6] not in res.content and TOKEN[-6:] not in res.content
    cut = truncate_result(shown, 300)  # what the redaction makes of it is redacted before any cut
    assert len(cut) < len(shown) and TOKEN[:6] not in cut and TOKEN[-6:] not in cut


def _assert_withheld(res) -> None:
    """A result that held a piece of a held secret: withheld whole, an error that says why."""
    from ongridd.tools.runner import SECRET_OUTPUT_WITHHELD

    assert res.status == "error" and SECRET_OUTPUT_WITHHELD in res.content and REDACTED not in res.content, res


def _shown(value, held: str = TOKEN) -> str:
    """What the results' redaction makes of a handler's ``value`` (the runner's rendering of it)."""
    with REGISTRY.hold([held]):
        return secretset.redact_pieces(render_value(value))


async def _result_of_a_tool_returning(value):
    """The ToolResult of one call of a tool whose handler returns ``value``, with TOKEN held."""
    async def cat(args, ctx):
        return value

    bag = ToolBag(agent="p", tools={"cat": Tool(name="cat", description="reads a file", handler=cat)})
    with REGISTRY.hold([TOKEN]):
        return await ToolRunner(bag).run(ToolCall(id="c1", name="cat", arguments="{}"),
                                         ToolCallContext(session_id="s", agent="p"))


@pytest.mark.parametrize("value", [
    {"stdout": f"db:\n  password: {TOKEN[:9]}\n    {TOKEN[9:]}\n"},  # a file that wraps the value
    [{"line": "# notes"}, {"nested": [f"x {TOKEN[:5]}\n# {TOKEN[5:]} y"]}],
    f"key = {TOKEN[:11]}\\\n  {TOKEN[11:]}",  # a shell continuation, returned as plain text
    {"note": f"{TOKEN[:7]}\u200b{TOKEN[7:]}"},  # a zero-width space in the middle
])
async def test_a_secret_wrapped_in_a_tool_result_is_redacted_before_json_escapes_its_line_breaks(value):
    _assert_withheld(await _result_of_a_tool_returning(value))
    shown = _shown(value)
    assert REDACTED in shown
    for piece in (TOKEN[:5], TOKEN[7:], TOKEN[-6:]):
        assert piece not in shown, shown


async def test_a_tool_result_without_a_secret_is_rendered_as_json_unchanged():
    value = {"files": [{"path": "/var/log/a.log", "bytes": 10}], "note": "line one\nline two", "ok": True}
    res = await _result_of_a_tool_returning(value)
    assert res.content == json.dumps(value, ensure_ascii=False)


PIECED = "Zq7mXp4LrT9vBn2KwY6cHd8F"


@pytest.mark.parametrize("value", [
    # a log that wrapped the token over two lines, each with its time stamp (separate hits of a log search)
    {"hits": [{"line_no": 2, "line": f"2024-01-01T00:00:01Z start token part2 {PIECED[12:]}"},
              {"line_no": 1, "line": f"2024-01-01T00:00:00Z start token part1 {PIECED[:12]}"}]},
    # a file read a few characters at a time (head -c 14, then tail -c +15)
    f"{PIECED[:14]}",
    {"stdout": f"{PIECED[14:]}\n"},
    # a JSON file on disk with the token split by a written escape, and the grep prefix on each line
    {"stdout": f'/etc/app/conf.json:  "key": "{PIECED[:10]}\\n{PIECED[10:]}"'},
])
async def test_pieces_of_a_secret_in_a_tool_result_are_redacted(value):
    with REGISTRY.hold([PIECED]):
        _assert_withheld(await _result_of_a_tool_returning(value))
    shown = _shown(value, PIECED)
    assert REDACTED in shown
    for i in range(len(PIECED) - 7):  # no run of 8 characters of it is left
        assert PIECED[i:i + 8] not in shown, shown
    if not isinstance(value, str):
        json.loads(shown)  # a hit never crosses a JSON string's quotes


@pytest.mark.parametrize(("secret", "text"), [
    (PIECED, ".".join(PIECED) + "."),  # sed 's/./&./g'
    (PIECED, json.dumps(list(PIECED))),  # a JSON array of single characters
    (PIECED, ", ".join(f"'{ch}'" for ch in PIECED)),
    ("пароль9КлючЗима7Весна", "log: оль9КлючЗима end"),  # multibyte characters: the whole run goes
    ("пароль9КлючЗима7Весна", "пароль9КлючЗима7Весн"),
    ('Ab1"Cd2"Ef3"Gh4"', json.dumps({"out": 'Ab1"Cd2"\n   Ef3"Gh4"'})),  # a secret with quotes, in JSON
    ('Zk4":"w0rdQ9', json.dumps({"k4": "w0rdQ9x"})),
])
def test_a_secret_spelled_out_with_separators_or_in_multibyte_pieces_is_redacted_and_json_stays_json(secret, text):
    out = Redactor([secret]).redact_pieces(text)
    assert REDACTED in out
    bare = "".join(ch for ch in secret if ch.isalnum())
    for i in range(len(bare) - 3):  # no 4 of its letters and digits in a row are left
        assert bare[i:i + 4] not in "".join(ch for ch in out if ch.isalnum()).replace("redacted", "|"), out
    if text.startswith(("[", "{")):
        json.loads(out)


def test_a_long_text_is_checked_for_held_secrets_linearly_and_still_redacted_exactly():
    import random
    import string

    rng = random.Random(7)
    many = ["".join(rng.choice(string.ascii_letters + string.digits) for _ in range(28)) for _ in range(400)]
    r = Redactor(many)
    plain = "".join(rng.choice(string.ascii_letters + " \n") for _ in range(200_000))
    assert r.redact(plain) is plain  # no secret: the same object
    leaked = plain[:1000] + many[123] + plain[1000:] + json.dumps(many[7])
    assert r.redact(leaked) == plain[:1000] + REDACTED + plain[1000:] + f'"{REDACTED}"'


def test_pieces_and_ordinary_output_left_alone():
    r = Redactor([PIECED, "postgrespassword", "0123456789012345"])
    ordinary = ("postgres 1234 running; token refresh at 2024-01-01T00:00:00Z; password policy ok; "
                "build 0123456 of 7890; Zq7 Bn2 are ids")
    assert r.redact_pieces(ordinary) == ordinary  # words and numbers of one kind are not pieces
    assert r.redact_pieces("use postgres password now") == f"use {REDACTED} now"  # the whole value, spread
    assert r.redact_pieces(f"a {PIECED[:7]} b") == f"a {PIECED[:7]} b"  # shorter than a piece
    assert r.redact_pieces(f"x {PIECED[3:11]} y {PIECED[5:16]}") == f"x {REDACTED} y {REDACTED}"
    assert Redactor([]).redact_pieces("a\nb") == "a\nb" and Redactor(["short"]).redact_pieces("sh ort") == "sh ort"
    accented = "ä" * 10 + " " + PIECED[:9] + " é"  # offsets mapped back through non-ASCII text
    assert r.redact_pieces(accented) == "ä" * 10 + f" {REDACTED} é"


async def test_a_large_tool_result_is_searched_off_the_event_loop(monkeypatch):
    import threading

    from ongridd import secretset
    from ongridd.tools import runner as runner_module

    seen: list[bool] = []
    real = secretset.redact_pieces

    def spy(text):
        seen.append(threading.current_thread() is threading.main_thread())
        return real(text)

    monkeypatch.setattr(runner_module, "redact_pieces", spy)
    big = "line of log output\n" * 5000 + PIECED[:12]
    with REGISTRY.hold([PIECED]):
        res = await _result_of_a_tool_returning(big)
        small = await _result_of_a_tool_returning("short output")
    assert seen == [False, True]  # the large one in a worker thread, the small one here
    _assert_withheld(res)
    assert small.status == "ok" and small.content == "short output"


class _Echo:
    """A model client that records the request and answers with a secret."""

    def __init__(self) -> None:
        self.seen: list[ModelRequest] = []
        self.closed = False

    async def stream(self, request):
        self.seen.append(request)
        yield TextDelta(f"key {KEY}")
        yield Completion(message=Message(role="assistant", content=f"key {KEY}",
                                         tool_calls=(ToolCall(id="c", name="t", arguments=json.dumps({"k": KEY})),)),
                         finish_reason="tool_calls")

    async def aclose(self) -> None:
        self.closed = True


async def test_model_requests_and_answers_are_redacted():
    inner = _Echo()
    model = RedactingModel(inner)
    request = ModelRequest(messages=[Message(role="user", content=f"my token is {TOKEN}"),
                                     Message(role="assistant", tool_calls=(
                                         ToolCall(id="a", name="t", arguments=json.dumps({"q": TOKEN})),)),
                                     Message(role="tool", tool_call_id="a", content=json.dumps({"out": TOKEN}))])
    with REGISTRY.hold([TOKEN, KEY]):
        events = [e async for e in model.stream(request)]
    sent = json.dumps([m.to_wire() for m in inner.seen[0].messages])
    assert TOKEN not in sent and sent.count(REDACTED) == 3
    assert events[0].text == f"key {REDACTED}"
    done = events[1]
    assert done.message.content == f"key {REDACTED}"
    assert json.loads(done.message.tool_calls[0].arguments) == {"k": REDACTED}
    assert done.finish_reason == "tool_calls"
    await model.aclose()
    assert inner.closed


class _Answers:
    """Answers every call with one tool call whose arguments are ``arguments``."""

    def __init__(self, arguments: str) -> None:
        self.arguments = arguments
        self.seen: list[ModelRequest] = []

    async def stream(self, request):
        self.seen.append(request)
        call = ToolCall(id="c", name="SendMessage", arguments=self.arguments)
        yield Completion(message=Message(role="assistant", tool_calls=(call,)), finish_reason="tool_calls")


@pytest.mark.parametrize("spelled", [
    "\\u0073k-test-ABCDEFGHIJKLMNOP",  # one letter escaped
    "".join(f"\\u{ord(c):04x}" for c in KEY),  # every letter
    f"{KEY} and \\u0073k-test-ABCDEFGHIJKLMNOP",  # once plain, once escaped
    "sk\\u002dtest-ABCDEFGHIJKLMNOP",  # a dash escaped
])
async def test_a_secret_spelled_with_json_escapes_in_tool_arguments_is_redacted(spelled):
    """The tool, the store, the audit and the next prompt all read the arguments decoded:
    a secret hidden behind escapes is found in the decoded text, and the arguments are
    written again in canonical form with it redacted."""
    raw = '{"text": "leak %s end", "n": 1}' % spelled
    assert KEY in json.loads(raw)["text"]
    inner = _Answers(raw)
    model = RedactingModel(inner)
    with REGISTRY.hold([KEY]):
        done = [e async for e in model.stream(ModelRequest(messages=[Message(role="user", content="go")]))][-1]
        arguments = done.message.tool_calls[0].arguments
        assert KEY not in arguments and KEY not in json.dumps(json.loads(arguments)["text"], ensure_ascii=False)
        assert json.loads(arguments)["text"].startswith("leak ") and REDACTED in arguments
        assert json.loads(arguments)["n"] == 1
        # the same text sent back in the history (a model's own earlier call) goes out redacted too
        history = Message(role="assistant", tool_calls=(ToolCall(id="c", name="SendMessage", arguments=raw),))
        [e async for e in model.stream(ModelRequest(messages=[history]))]
        sent = inner.seen[-1].messages[0].tool_calls[0].arguments
        assert KEY not in json.loads(sent)["text"], sent


def test_arguments_with_escapes_but_no_secret_are_left_as_written():
    from ongridd.llm.redacting import redact_message

    message = Message(role="assistant", tool_calls=(
        ToolCall(id="c", name="t", arguments='{"cmd": "printf \'a\\nb\' \\u00e9"}'),
        ToolCall(id="d", name="t", arguments='{"cmd": "not json \\u0073'),))
    with REGISTRY.hold([KEY]):
        assert redact_message(message, redact) is message


class _Chunked:
    """Streams ``pieces`` as text deltas, then the whole text as the completion."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    async def stream(self, request):
        for piece in self.pieces:
            yield TextDelta(piece)
        yield Completion(message=Message(role="assistant", content="".join(self.pieces)), finish_reason="stop")


@pytest.mark.parametrize("cut", [1, 3, 7, len(TOKEN) - 1])
async def test_a_secret_split_across_streamed_pieces_never_reaches_the_stream(cut):
    text = f"the token is {TOKEN} ok"
    at = text.index(TOKEN) + cut
    pieces = [text[:at], text[at:at + 2], text[at + 2:]]
    with REGISTRY.hold([TOKEN]):
        events = [e async for e in RedactingModel(_Chunked(pieces)).stream(ModelRequest(messages=[]))]
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert streamed == f"the token is {REDACTED} ok"  # nothing lost, nothing of the token shown
    assert events[-1].message.content == f"the token is {REDACTED} ok"


@pytest.mark.parametrize("size", [1, 2, 3, 5])
async def test_overlapping_secrets_streamed_in_small_pieces_leave_no_fragment(size):
    first, second = "abcdefXYZ123", "XYZ123ghijkl"
    text = f"pre {first}ghijkl post"
    pieces = [text[i:i + size] for i in range(0, len(text), size)]
    with REGISTRY.hold([first, second]):
        events = [e async for e in RedactingModel(_Chunked(pieces)).stream(ModelRequest(messages=[]))]
        whole = REGISTRY.redact(text)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == whole == f"pre {REDACTED} post"


async def test_text_held_back_as_a_possible_secret_start_is_released_when_no_secret_follows():
    with REGISTRY.hold([TOKEN]):
        events = [e async for e in RedactingModel(_Chunked(["a " + TOKEN[:4], " b"])).stream(ModelRequest(messages=[]))]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "a " + TOKEN[:4] + " b"


async def test_a_lazy_model_factory_is_built_on_first_use_only():
    built = []

    def factory():
        built.append(1)
        return _Echo()

    model = RedactingModel(factory)
    await model.aclose()  # never built: nothing to close
    assert built == []
    [e async for e in model.stream(ModelRequest(messages=[Message(role="user", content="hi")]))]
    assert built == [1]


async def test_model_calls_are_counted_with_a_bounded_agent_label():
    from ongridd.errors import ProviderError
    from ongridd.metrics import MODEL_CALLS

    class _Failing:
        async def stream(self, request):
            raise ProviderError("boom")
            yield  # an async generator

    def value(agent, outcome):
        return MODEL_CALLS.labels(agent, outcome)._value.get()

    before = {k: value(*k) for k in [("metrics-known", "ok"), ("(unknown)", "ok"), ("metrics-known", "error")]}
    ok = RedactingModel(_Echo(), known_agents=lambda: {"metrics-known"})
    for agent in ("metrics-known", "invented-by-someone"):
        [e async for e in ok.stream(ModelRequest(messages=[Message(role="user", content="hi")], agent=agent))]
    failing = RedactingModel(_Failing(), known_agents=lambda: {"metrics-known"})
    with pytest.raises(ProviderError):
        [e async for e in failing.stream(ModelRequest(messages=[], agent="metrics-known"))]
    assert value("metrics-known", "ok") - before[("metrics-known", "ok")] == 1
    assert value("(unknown)", "ok") - before[("(unknown)", "ok")] == 1
    assert value("metrics-known", "error") - before[("metrics-known", "error")] == 1
    assert ("invented-by-someone", "ok") not in {tuple(s.labels.values()) for m in MODEL_CALLS.collect()
                                                 for s in m.samples}


def test_log_lines_never_carry_a_held_secret():
    from ongridd import logs

    stream = io.StringIO()
    logs.configure("INFO", stream=stream)
    try:
        with REGISTRY.hold(['tok"en-with-quote-123', TOKEN]):
            log = logs.get_logger("ongridd.test_secrets")
            log.info("oops", token=TOKEN, detail={"nested": 'tok"en-with-quote-123'})
            try:
                raise RuntimeError(f"failed with {TOKEN}")
            except RuntimeError:
                log.exception("boom")
            record = logging.LogRecord("other", logging.WARNING, __file__, 1, "lib says %s", (TOKEN,), None)
            logs.RedactingFilter().filter(record)
            assert TOKEN not in record.getMessage()
    finally:
        logs.configure("INFO")
    out = stream.getvalue()
    assert TOKEN not in out and 'tok\\"en-with-quote-123' not in out and "en-with-quote" not in out
    assert out.count(REDACTED) >= 3
    assert json.loads(out.splitlines()[0])["token"] == REDACTED


def test_short_tokens_are_warned_about_without_the_token(capsys):
    from ongridd import logs
    from ongridd.daemon import warn_short_tokens

    stream = io.StringIO()
    logs.configure("INFO", stream=stream)
    try:
        warn_short_tokens({"tiny-tok": "bob", TOKEN: "alice"})
    finally:
        logs.configure("INFO")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(x["event"], x["user"], x["length"]) for x in lines] == [("short_token", "bob", 8)]
    assert "tiny-tok" not in stream.getvalue()


def test_plugin_context_secret_reads_the_remembered_value(monkeypatch, tmp_path):
    from ongridd.plugins.api import PluginContext

    monkeypatch.setenv("ONGRID_TEST_BRIDGE", "bridge-value-123456")
    config = _config(tmp_path, "plugins: {settings: {bridge: {bot_token_env: ONGRID_TEST_BRIDGE}}}\n")
    ctx = PluginContext(config=config, plugin_name="bridge", settings=config.plugins.settings["bridge"])
    with daemon_secrets(config):
        assert "ONGRID_TEST_BRIDGE" not in os.environ
        assert ctx.secret("bot_token_env") == "bridge-value-123456"
        assert ctx.secret("missing_env") is None
    with pytest.raises(ValueError, match="ending in _env"):
        ctx.secret("bot_token")


def test_metrics_public_is_a_strict_bool(tmp_path):
    from ongridd.errors import ConfigError

    assert _config(tmp_path, "server: {metrics_public: true}\n").server.metrics_public is True
    assert _config(tmp_path).server.metrics_public is False
    with pytest.raises(ConfigError, match="metrics_public"):
        _config(tmp_path, "server: {metrics_public: 'yes'}\n")


def test_turn_outcomes():
    from ongridd.runtime.core import turn_outcome

    assert [turn_outcome(s) for s in ("ok", "max_turns", "tool_budget", "provider_error", "stopped", "error")] == [
        "completed", "completed", "completed", "failed", "stopped", "error"]



async def test_a_call_closed_before_its_completion_counts_as_cancelled_and_tokens_are_counted():
    import trio

    from ongridd.llm.types import Completion, Usage
    from ongridd.metrics import MODEL_CALLS, MODEL_TOKENS

    class _Slow:
        async def stream(self, request):
            yield TextDelta("thinking")
            await trio.sleep_forever()
            yield Completion(message=Message(role="assistant", content="never"))

    class _Metered:
        async def stream(self, request):
            yield Completion(message=Message(role="assistant", content="ok"),
                             usage=Usage(prompt_tokens=40, completion_tokens=4, cached_tokens=32))

    def calls(outcome):
        return MODEL_CALLS.labels("metrics-cancel", outcome)._value.get()

    def tokens(kind):
        return MODEL_TOKENS.labels("metrics-cancel", kind)._value.get()

    before = {o: calls(o) for o in ("ok", "error", "cancelled")}
    before_tokens = {k: tokens(k) for k in ("prompt", "completion", "cached")}
    with trio.move_on_after(0.1):
        [e async for e in RedactingModel(_Slow()).stream(ModelRequest(messages=[], agent="metrics-cancel"))]
    [e async for e in RedactingModel(_Metered()).stream(ModelRequest(messages=[], agent="metrics-cancel"))]
    assert {o: calls(o) - before[o] for o in before} == {"ok": 1, "error": 0, "cancelled": 1}
    assert {k: tokens(k) - before_tokens[k] for k in before_tokens} == {"prompt": 40, "completion": 4, "cached": 32}


def test_a_preview_cut_before_a_long_secret_ends_keeps_none_of_it():
    from ongridd.secretset import redact_head
    from ongridd.yamlbounds import describe, quote

    long_key = "sk-" + "0123456789abcdef" * 5  # 83 characters: longer than a 60-character preview
    with REGISTRY.hold([long_key]):
        assert redact_head("xx" + long_key + "y" * 200, 30) == ("xx" + REDACTED + "y" * 200)[:30]
        assert redact_head("plain text", 4) == "plai"
        for shown in (describe(long_key), describe({"k": ["a", long_key]}), quote("ab" + long_key, 40)):
            assert "0123456789" not in shown and REDACTED in shown, shown
    assert long_key[:40] in quote(long_key, 40)  # held by no one: a preview as before


def test_a_database_password_given_as_a_query_parameter_is_a_secret_too(tmp_path):
    from ongridd.logs import redact_url
    from ongridd.secretset import ShortSecretError
    from ongridd.store.engine import normalize_url, shown_url

    url = "postgresql://ongrid@127.0.0.1:5432/test?password=Db-Query-Pass-0123&sslmode=require&SSLPASSWORD=Key%2BPass-99"
    config = _config(tmp_path, f"database: {{url: '{url}'}}\n")
    secrets = collect_secrets(config, {})
    assert {"Db-Query-Pass-0123", "Key%2BPass-99", "Key+Pass-99"} <= secrets.values
    shown = [redact_url(url), shown_url(normalize_url(url))]
    for text in shown:
        assert "Db-Query-Pass" not in text and "Key" not in text and "sslmode=require" in text, text
    env = {"ONGRID_DATABASE_URL": url}
    assert "ONGRID_DATABASE_URL" in remove_from_environ(secrets, env) and not env
    short = _config(tmp_path, "database: {url: 'postgresql://u@h/db?password=abc'}\n")
    with pytest.raises(ShortSecretError, match="the database URL's password is 3 characters long"):
        collect_secrets(short, {})


@pytest.mark.parametrize(("url", "shown"), [
    ("sqlite:////var/lib/ongrid/ongrid.db", "sqlite:////var/lib/ongrid/ongrid.db"),  # not sqlite://var/...: no host
    ("sqlite:///ongrid.db", "sqlite:///ongrid.db"),
    ("sqlite:////tmp/x.db?password=Sqlite-Pass-0123", "sqlite:////tmp/x.db?password=***"),
    ("postgresql://u:Pg-Pass-0123@h:5432/db", "postgresql://u:***@h:5432/db"),
    ("postgresql:///test?host=/run/postgresql", "postgresql:///test?host=/run/postgresql"),
])
def test_a_shown_database_url_keeps_its_form_with_only_the_passwords_hidden(url, shown):
    from ongridd.logs import redact_url

    assert redact_url(url) == shown


def test_lone_surrogates_in_a_text_or_a_secret_break_neither_redaction():
    # RE2 takes UTF-8, which cannot hold a lone surrogate: a stray half of a UTF-16 pair in a tool's
    # output, or an undecodable byte of an environment variable read with surrogateescape
    r = Redactor([PIECED, "ab\udc80cdefghij"])
    long_text = "x\ud800y " * 1000 + PIECED
    assert r.redact(long_text) == "x\ud800y " * 1000 + REDACTED
    assert r.redact_pieces(f"a\ud800 {PIECED[:9]}") == f"a\ud800 {REDACTED}"
    # the secret with a surrogate is matched literally; the others are still found in pieces
    assert r.redact_pieces(f"ab\udc80cdefghij and {PIECED[2:12]}") == f"{REDACTED} and {REDACTED}"


def test_a_key_in_the_model_urls_query_is_a_held_secret_and_never_shown(tmp_path):
    """Google's ``?key=``, Azure's ``?api-key=``: a credential in ``llm.base_url`` is held (so every
    text that would carry it, an error frame or a log line naming the URL, is redacted) and a shown
    URL masks it as it masks a database password."""
    from ongridd.logs import redact_url
    from ongridd.secretset import ShortSecretError

    url = "https://models.example/v1?key=Gemini-Style-Key-0123&api-version=2024-10-21&API-KEY=Azure%2BKey-4567"
    secrets = collect_secrets(_config(tmp_path, f"llm: {{base_url: '{url}'}}\n"), {})
    assert {"Gemini-Style-Key-0123", "Azure%2BKey-4567", "Azure+Key-4567"} <= secrets.values
    assert redact_url(url) == "https://models.example/v1?key=***&api-version=2024-10-21&API-KEY=***"
    assert redact_url("https://u:Url-Pass-0123@models.example/v1?access_token=Tok-0123456789") == \
        "https://u:***@models.example/v1?access_token=***"
    with pytest.raises(ShortSecretError, match="the credential in llm.base_url is 3 characters long"):
        collect_secrets(_config(tmp_path, "llm: {base_url: 'https://m.example/v1?key=abc'}\n"), {})


def test_a_copy_in_another_letter_case_or_percent_encoded_is_found_in_a_tool_result():
    """A command that upper-cases a file (or a URL that carries a token) hands the model the secret
    with its case changed or ``:`` as ``%3A``: found like the secret itself; plain words that share
    letters with a secret, in any case, are not."""
    token, key = "ALICEtoken0123456789abcd", "123456789:TGbotTOKENabcdefXYZ"
    r = Redactor([token, key])
    for copy in (token.upper(), token.lower(), token.swapcase(), "123456789%3ATGbotTOKENabcdefXYZ",
                 "123456789%3atgbottokenabcdefxyz", key.upper()):
        assert r.redact_pieces(f"found: {copy}.") == f"found: {REDACTED}.", copy
        assert r.redact_pieces(json.dumps({"line": copy})) == json.dumps({"line": REDACTED}), copy
    assert r.redact_pieces("TOKEN0123456789ABCD and ALICE") == f"{REDACTED} and ALICE"  # a piece, in another case
    for plain in ("Alice tokens are rotated", "ALICE TOKEN", "abcdefxyz", "0123456789", "tgbot"):
        assert r.redact_pieces(plain) == plain


def test_a_file_is_searched_for_held_secrets_within_its_bound(tmp_path):
    import gzip
    import os

    from ongridd.secretset import _SCAN_CHUNK

    token = "123456789:TGbotTOKENabcdefXYZ"
    r = Redactor([token])

    def file(name: str, data: bytes) -> str:
        (tmp_path / name).write_bytes(data)
        return str(tmp_path / name)

    assert r.file_holds(file("plain", b"x " + token.encode() + b"\n")) is True
    assert r.file_holds(file("upper", token.upper().encode())) is True
    assert r.file_holds(file("escaped", json.dumps({"t": token}).encode())) is True
    assert r.file_holds(file("url", b"?t=123456789%3atgbottokenabcdefxyz")) is True
    assert r.file_holds(file("across", b"y" * (_SCAN_CHUNK - 7) + token.encode())) is True  # over a chunk's end
    assert r.file_holds(file("members", gzip.compress(b"a" * 10) + gzip.compress(token.encode()))) is True
    assert r.file_holds(file("none", b"nothing to see " * 100)) is False
    assert r.file_holds(file("big", b"q" * 1000 + token.encode()), max_bytes=500) is None  # not checked
    bomb = file("bomb", gzip.compress(b"\0" * (4 << 20)))
    assert r.file_holds(bomb, max_bytes=1 << 20) is None  # read decompressed up to the bound only
    os.mkfifo(tmp_path / "fifo")
    assert r.file_holds(str(tmp_path / "fifo")) is None and r.file_holds(str(tmp_path)) is None
    assert r.file_holds(str(tmp_path / "missing")) is None
    assert Redactor().file_holds(str(tmp_path / "plain")) is False  # no secret held
    changed = file("changed", b"clean")
    assert r.file_holds(changed) is False
    file("changed", b"now " + token.encode())  # another size: the kept verdict no longer applies
    assert r.file_holds(changed) is True


def test_a_file_is_searched_as_gzip_unpacks_it_and_in_other_encodings(tmp_path):
    """``gzip -dc`` prints what comes before a bad CRC, a cut-off member or trailing garbage: so is
    it searched; a copy in UTF-16, Latin-1, JSON with ``\\/`` or percent-encoded with ``/`` kept
    is found too."""
    import gzip
    from urllib.parse import quote

    token, slashed, accented = "ALICEtoken0123456789abcd", "AKIAq7/Zx+Kp9/Wm2+Lr4/Tt", "Pässwörd-Tökén-12345678"
    r = Redactor([token, slashed, accented])

    def holds(name: str, data: bytes) -> bool | None:
        (tmp_path / name).write_bytes(data)
        return r.file_holds(str(tmp_path / name))

    member = gzip.compress(b"token=" + token.encode() + b"\n")
    bad_crc = bytearray(member)
    bad_crc[-8] ^= 0xFF
    assert holds("garbage", member + b"JUNKJUNK") is True
    assert holds("zeros", member + b"\0" * 16) is True
    assert holds("crc", bytes(bad_crc)) is True
    assert holds("crc2", gzip.compress(b"first") + bytes(bad_crc)) is True
    assert holds("cut", member[:-4]) is True
    assert holds("clean", gzip.compress(b"nothing") + b"JUNK") is False
    assert holds("utf16", ("token=" + token).encode("utf-16")) is True
    assert holds("utf16be", token.upper().encode("utf-16-be")) is True
    assert holds("latin1", accented.encode("latin-1")) is True
    assert holds("php", json.dumps({"k": slashed}).replace("/", "\\/").encode()) is True
    assert holds("path", quote(slashed).encode()) is True
    assert r.redact(json.dumps({"k": slashed}).replace("/", "\\/")) == json.dumps({"k": REDACTED})


def test_a_file_pattern_re2_cannot_build_fails_closed(tmp_path, monkeypatch):
    """Held secrets and no pattern to look for them with (RE2 refused it: too large for its memory
    budget): a file is not checked (None, so a read that depends on it is refused) and bytes count as
    holding one — never "holds none"."""
    import re2

    from ongridd.secretset import Redactor

    def refuse(*_args, **_kwargs):
        raise re2.error("pattern too large - compile failed")

    monkeypatch.setattr(re2, "compile", refuse)
    (tmp_path / "app.log").write_text("GET /healthz 200\n")
    redactor = Redactor(["ALICEtoken0123456789abcd"])
    assert redactor.file_holds(str(tmp_path / "app.log")) is None
    assert redactor.holds_in(b"GET /healthz 200") is True
    assert Redactor([]).file_holds(str(tmp_path / "app.log")) is False  # nothing held: nothing to look for
