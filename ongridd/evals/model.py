"""The model client of an evaluation run: the real OpenAI-compatible
provider, counting every HTTP request it makes (retries and the kernel's
forced last calls included) and the tokens the endpoint reports."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ongridd.llm.http import HTTPClient, Response
from ongridd.llm.openai_provider import OpenAIProvider
from ongridd.llm.types import Completion, ModelRequest


class CountingProvider(OpenAIProvider):
    """An :class:`OpenAIProvider` with counters, reset per incident.

    ``requests``: chat-completion requests sent (each attempt of a retried
    call counts).  ``prompt_tokens`` / ``completion_tokens``: summed from the
    usage the endpoint reported, ``None`` until one call reports it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None

    async def _post(self, client: HTTPClient, request: ModelRequest, body: bytes, *, accept: str) -> Response:
        self.requests += 1
        return await super()._post(client, request, body, accept=accept)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        async for event in super().stream(request):
            if isinstance(event, Completion) and event.usage is not None:
                self.prompt_tokens = (self.prompt_tokens or 0) + (event.usage.prompt_tokens or 0)
                self.completion_tokens = (self.completion_tokens or 0) + (event.usage.completion_tokens or 0)
            yield event
