"""Tool bags: what one agent run may call (docs/architecture.md §8).

A bag holds real tools and (coordinator only) redirect stubs.  It is the
only list the kernel shows the model *and* the only list the runner executes
from: a tool outside the bag never runs, whatever the model sends.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Container, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from ongridd.logs import get_logger
from ongridd.tools.registry import MUTATING_CLASSES
from ongridd.tools.spec import CONTROL_TOOL_NAMES, RedirectStub, Tool
from ongridd.tools.stubs import stub_schema

log = get_logger(__name__)


def _frozen_map(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


@attrs.frozen(kw_only=True)
class ToolBag:
    """The tools of one agent run.

    ``agent``: the persona name (used in "not available to <agent>" errors).
    ``tools``: ``dict[str, Tool]`` keyed by tool name, in the order shown to
    the model.  ``stubs``: ``dict[str, RedirectStub]`` keyed by the stubbed
    tool name; never contains a name that is also in ``tools``.
    """

    agent: str
    tools: Mapping[str, Tool] = attrs.field(factory=dict, converter=_frozen_map)
    stubs: Mapping[str, RedirectStub] = attrs.field(factory=dict, converter=_frozen_map)
    _schemas: tuple[dict[str, Any], ...] | None = attrs.field(init=False, default=None, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        hidden = sorted(set(self.tools) & set(self.stubs))
        if hidden:
            raise ValueError(f"redirect stubs would hide real tools: {', '.join(hidden)}")

    def schemas(self) -> tuple[dict[str, Any], ...]:
        """The OpenAI ``tools`` list: real tools, then stubs (permissive object
        schema).  Built on the first call and then the same tuple every time
        (each model call of a run sends it; callers must not mutate it)."""
        if self._schemas is None:
            built = tuple(t.schema() for t in self.tools.values()) + tuple(stub_schema(s) for s in self.stubs.values())
            object.__setattr__(self, "_schemas", built)
            return built
        return self._schemas

    def names(self) -> tuple[str, ...]:
        """Names of the real tools (stubs excluded), in bag order."""
        return tuple(self.tools)

    def __contains__(self, name: object) -> bool:
        return name in self.tools


def _persona_tools(persona: Any) -> tuple[str, ...]:
    tools = getattr(persona, "tools", None) or ()
    if isinstance(tools, str):
        tools = [t.strip() for t in tools.split(",")]
    return tuple(dict.fromkeys(t for t in tools if t))


def _is_read_only(persona: Any) -> bool:
    value = getattr(persona, "read_only", None)
    if isinstance(value, bool):
        return value
    return getattr(persona, "permission_mode", "default") == "read-only"


def _disallowed(persona: Any, name: str) -> bool:
    patterns = getattr(persona, "disallowed_tools", None) or ()
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _fixed_mutating(tool: Tool) -> bool:
    return tool.classify is None and tool.tool_class in MUTATING_CLASSES


def _listed_tools(persona: Any, registry: Mapping[str, Tool]) -> dict[str, Tool]:
    """persona.tools ∩ registered − disallowed − control − (read-only: always-mutating tools)."""
    read_only = _is_read_only(persona)
    out: dict[str, Tool] = {}
    for name in _persona_tools(persona):
        tool = registry.get(name)
        if tool is None or _disallowed(persona, name):
            continue
        if tool.tool_class == "control" or name in CONTROL_TOOL_NAMES:
            continue
        if read_only and _fixed_mutating(tool):
            continue
        out[name] = tool
    return out


def worker_bag(persona: Any, registry: Mapping[str, Tool]) -> ToolBag:
    """The bag of a worker (or reviewer) run.

    Its persona's ``tools`` ∩ registered tools, minus ``disallowed_tools``
    (fnmatch globs, case-sensitive), minus every ``control`` tool (workers
    never spawn workers or talk to the user), minus — when the persona is
    read-only — every tool whose *fixed* class is ``write``/``destructive``
    (tools with ``classify``, such as ``host_bash``, stay and refuse
    mutating calls themselves).  An empty ``tools`` list gives an empty bag.
    Listed names that are not registered are skipped (the persona loader
    warns about them).  No stubs.
    """
    return ToolBag(agent=persona.name, tools=_listed_tools(persona, registry))


def coordinator_bag(
    persona: Any,
    registry: Mapping[str, Tool],
    control_tools: Iterable[Tool],
    stubs: Iterable[RedirectStub],
    *,
    personas: Container[str] | None = None,
) -> ToolBag:
    """The bag of a coordinator turn.

    The tools listed by ``persona`` (``default.md``) ∩ registered tools (with
    the same ``disallowed_tools`` / read-only filtering as workers), plus
    ``control_tools`` (``AgentTool``, ``SendMessage``, ``TaskStop``, built by
    the runtime), plus each redirect stub whose name is not a tool the bag
    already has (a stub never hides a real tool).  When ``personas`` is
    given, stubs pointing to a persona not in it are dropped with a warning
    (the target must exist).  The first stub for a name wins.
    """
    tools = _listed_tools(persona, registry)
    for tool in control_tools:
        tools[tool.name] = tool
    table: dict[str, RedirectStub] = {}
    for stub in stubs:
        if stub.tool in tools or stub.tool in table:
            continue
        if personas is not None and stub.persona not in personas:
            log.warning("redirect_stub_dropped", tool=stub.tool, persona=stub.persona,
                        reason="target persona does not exist")
            continue
        table[stub.tool] = stub
    return ToolBag(agent=persona.name, tools=tools, stubs=table)


def wrap_tools(bag: ToolBag, wrapper: Callable[[Tool], Tool]) -> ToolBag:
    """A new bag where every tool that may be ``write``/``destructive``
    (``Tool.may_mutate``) is replaced by ``wrapper(tool)`` — how the runtime
    puts the review gate around them.  The wrapper must return a Tool with
    the same name; the runner applies the *returned* tool's ``timeout_s``,
    so a gate wrapper sets one that covers the review and the inner tool.
    Raises ValueError if the wrapper renames a tool.
    """
    tools: dict[str, Tool] = {}
    for name, tool in bag.tools.items():
        if tool.may_mutate and tool.tool_class != "control":
            wrapped = wrapper(tool)
            if wrapped.name != name:
                raise ValueError(f"wrapper renamed tool {name!r} to {wrapped.name!r}")
            tool = wrapped
        tools[name] = tool
    return attrs.evolve(bag, tools=tools)
