"""The model used when no provider is configured: every call fails with a
clear ProviderError (the daemon still serves everything else)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ongridd.errors import ProviderError
from ongridd.llm.types import ModelRequest, StreamEvent


class UnconfiguredModel:
    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        raise ProviderError("no model is configured: set llm.base_url in the config or ONGRID_LLM_BASE_URL (and "
                            "llm.model / ONGRID_LLM_MODEL, unless the server's first listed model will do); "
                            "try `ongrid demo` for the scripted model")
        yield  # pragma: no cover  (makes this an async generator)

    async def aclose(self) -> None:
        return None
