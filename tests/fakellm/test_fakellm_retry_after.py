"""The scripted model's ``retry_after`` step key (docs/fake-llm.md), and the
provider's shared rate-limit hold against it (docs/architecture.md §4)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx2
import pytest
import trio

from ongridd.fakellm import open_fake_llm
from ongridd.fakellm.script import ScriptError, coerce_script
from ongridd.llm.openai_provider import OpenAIProvider
from ongridd.llm.types import Completion, Message, ModelRequest


def test_retry_after_is_validated() -> None:
    with pytest.raises(ScriptError, match="retry_after goes with http_status"):
        coerce_script({"default": [{"content": "x", "retry_after": 2}]})
    with pytest.raises(ScriptError, match="retry_after must be seconds >= 0"):
        coerce_script({"default": [{"http_status": 429, "retry_after": -1}]})
    with pytest.raises(ScriptError, match="retry_after must be seconds >= 0"):
        coerce_script({"default": [{"http_status": 429, "retry_after": True}]})
    step = coerce_script({"default": [{"http_status": 429, "retry_after": 1.5}]}).personas["default"][0]
    assert step.retry_after == "1.5"


async def test_the_header_is_sent() -> None:
    date = "Wed, 21 Oct 2026 07:28:00 GMT"
    script = {"default": [{"http_status": 429, "retry_after": 2}, {"http_status": 503, "retry_after": date},
                          {"http_status": 429}]}
    async with open_fake_llm(script) as fake, httpx2.AsyncClient() as http:
        got = []
        for _ in range(3):
            r = await http.post(fake.base_url + "/chat/completions", json={"model": "m", "messages": []})
            got.append((r.status_code, r.headers.get("retry-after")))
    assert got == [(429, "2"), (503, date), (429, None)]


async def _call(provider: OpenAIProvider, session: str) -> Completion:
    request = ModelRequest(messages=[Message(role="user", content="hi")], agent="default", session_id=session)
    async for event in provider.stream(request):
        if isinstance(event, Completion):
            return event
    raise AssertionError("no completion")


async def test_an_http_date_retry_after_holds_every_call_of_the_provider() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=4), usegmt=True)
    script = {"default": [{"http_status": 429, "retry_after": when}, {"content": "first"}],
              "other": [{"content": "second"}]}
    async with open_fake_llm(script) as fake, OpenAIProvider(fake.base_url, model="m", max_retries=2) as provider, \
            trio.open_nursery() as nursery:
        nursery.start_soon(_call, provider, "s1")
        with trio.fail_after(10):  # the HTTP-date was understood: the provider holds
            while provider.rate_limit.remaining_s() == 0:
                await trio.sleep(0.01)
        assert len(fake.requests) == 1 and fake.requests[0].status == 429
        other = ModelRequest(messages=[Message(role="user", content="hi")], agent="other", session_id="s2")
        nursery.start_soon(_drain, provider, other)
        await trio.sleep(0.3)
        assert len(fake.requests) == 1  # the other call is held too: nothing new reached the server
    assert sorted(r.agent for r in fake.requests) == ["default", "default", "other"]
    assert all(r.status == 200 for r in fake.requests[1:])


async def _drain(provider: OpenAIProvider, request: ModelRequest) -> None:
    async for _ in provider.stream(request):
        pass
