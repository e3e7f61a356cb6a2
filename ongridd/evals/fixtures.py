"""The fixture tool registry: every tool answers from recorded results.

:func:`fixture_tools` takes the real registry (so tool names, descriptions,
schemas and classes — what the model sees — stay exactly as in production)
and replaces every handler by a lookup in the incident's fixtures; a name
that only the fixtures know (a tool not installed here) gets a tool with an
open schema.  No handler of a real tool is ever called, and argument-based
classification (``host_bash``'s allowlist check, which may resolve paths on
this host) is replaced by the tool's static class, so replaying an incident
touches nothing on the machine running the evaluation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ongridd.errors import ToolError
from ongridd.evals.suite import Fixture
from ongridd.tools.spec import CONTROL_TOOL_NAMES, Tool, ToolCallContext

#: the start of the error a call with no matching recording gets
NO_RECORDING = "no recording exists"
_ARGS_SHOWN_CHARS = 300


def matches(fixture: Fixture, args: Mapping[str, Any]) -> bool:
    """True when every ``match`` key is an argument with an equal value
    (JSON equality: ``1 == 1.0``, lists in order, mappings by key)."""
    return all(key in args and args[key] == value for key, value in fixture.match.items())


def lookup(fixtures: Sequence[Fixture], tool: str, args: Mapping[str, Any]) -> Fixture | None:
    """The first fixture for ``tool`` whose ``match`` holds, else ``None``."""
    for fixture in fixtures:
        if fixture.tool == tool and matches(fixture, args):
            return fixture
    return None


def no_recording_message(tool: str, args: Mapping[str, Any]) -> str:
    shown = json.dumps(dict(args), ensure_ascii=False, sort_keys=True, default=str)
    if len(shown) > _ARGS_SHOWN_CHARS:
        shown = shown[:_ARGS_SHOWN_CHARS] + "…"
    return (f"{NO_RECORDING} for {tool} with arguments {shown}: this is an evaluation replay, "
            "tools answer only from recorded results and nothing was run")


def _handler(name: str, fixtures: Sequence[Fixture]) -> Any:
    async def handler(args: dict[str, Any], ctx: ToolCallContext) -> Any:
        fixture = lookup(fixtures, name, {k: v for k, v in args.items() if v is not None})
        if fixture is None:
            raise ToolError(no_recording_message(name, args))
        if fixture.error is not None:
            raise ToolError(fixture.error)
        return fixture.result

    return handler


OPEN_SCHEMA = {"type": "object", "properties": {}, "additionalProperties": True}


def fixture_tools(real: Mapping[str, Tool], fixtures: Sequence[Fixture]) -> dict[str, Tool]:
    """name → Tool: every tool of ``real`` (control tools are never in a
    registry; any found are left out) with a recorded-result handler, plus
    one open-schema ``read`` tool for each fixture name not in ``real``."""
    out: dict[str, Tool] = {}
    for name, tool in real.items():
        if name in CONTROL_TOOL_NAMES:
            continue
        out[name] = attrs.evolve(tool, handler=_handler(name, fixtures), classify=None)
    for fixture in fixtures:
        if fixture.tool not in out and fixture.tool not in CONTROL_TOOL_NAMES:
            out[fixture.tool] = Tool(name=fixture.tool, description=f"{fixture.tool} (recorded for this evaluation)",
                                     parameters=OPEN_SCHEMA, handler=_handler(fixture.tool, fixtures),
                                     plugin="ongrid-eval")
    return out
