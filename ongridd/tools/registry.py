"""The tool registry: an immutable mapping ``tool name → Tool`` (docs/architecture.md §8, §13).

Each tool carries the name of the plugin that gave it (``Tool.plugin``).  A
registry is never changed in place: :meth:`ToolRegistry.with_tools` and
:meth:`ToolRegistry.without_plugin` build a new one, so a running turn keeps
the snapshot it started with and the marketplace can swap registries in one
assignment.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType

import jsonschema

from ongridd.errors import ToolRegistrationError
from ongridd.tools.schema_check import check_schema
from ongridd.tools.spec import CONTROL_TOOL_NAMES, Tool

MUTATING_CLASSES = ("write", "destructive")


def validate_tool(tool: Tool) -> None:
    """Check one tool against the rules of docs/architecture.md §8 and §10.

    - ``parameters`` is a valid JSON Schema (Draft 2020-12) of type object;
    - a non-empty ``description``; a positive, finite ``timeout_s``; a callable handler;
    - a tool that may be ``write``/``destructive`` (``Tool.may_mutate``) has
      ``describe`` and a ``reason`` property, which is required when its fixed
      class is ``write``/``destructive`` (the review gate needs both);
    - the class ``control`` is used by exactly the tools ``AgentTool``,
      ``SendMessage`` and ``TaskStop``.

    Raises ToolRegistrationError naming the tool, its plugin and the rule.
    """
    if not isinstance(tool, Tool):
        raise ToolRegistrationError(f"expected an ongridd Tool, got {type(tool).__name__}")
    where = f"tool {tool.name!r} (plugin {tool.plugin})"
    if not isinstance(tool.description, str) or not tool.description.strip():
        raise ToolRegistrationError(f"{where}: description must be a non-empty string")
    if not callable(tool.handler):
        raise ToolRegistrationError(f"{where}: handler must be an async callable")
    timeout = tool.timeout_s
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise ToolRegistrationError(f"{where}: timeout_s must be a positive number of seconds, got {timeout!r}")
    params = tool.parameters
    if not isinstance(params, Mapping):
        raise ToolRegistrationError(f"{where}: parameters must be a JSON schema object")
    try:
        check_schema(params)
    except jsonschema.SchemaError as exc:
        raise ToolRegistrationError(f"{where}: parameters is not a valid JSON schema: {exc.message}") from None
    if params.get("type") != "object":
        raise ToolRegistrationError(f"{where}: parameters must have \"type\": \"object\"")
    props = params.get("properties") or {}
    required = params.get("required") or []
    if tool.may_mutate:
        if tool.describe is None:
            raise ToolRegistrationError(
                f"{where}: a tool that can be write/destructive needs describe(args) -> Proposal for the review gate"
            )
        if "reason" not in props:
            raise ToolRegistrationError(f"{where}: a tool that can be write/destructive needs a 'reason' parameter")
        if tool.tool_class in MUTATING_CLASSES and "reason" not in required:
            raise ToolRegistrationError(f"{where}: 'reason' must be required for a {tool.tool_class} tool")
    if tool.tool_class == "control" and tool.name not in CONTROL_TOOL_NAMES:
        raise ToolRegistrationError(
            f"{where}: class 'control' is reserved for {', '.join(CONTROL_TOOL_NAMES)}"
        )
    if tool.name in CONTROL_TOOL_NAMES and tool.tool_class != "control":
        raise ToolRegistrationError(f"{where}: {tool.name} must have class 'control'")


class ToolRegistry(Mapping[str, Tool]):
    """Immutable ``dict[str, Tool]`` keyed by tool name.

    ``ToolRegistry(tools)`` validates every tool (:func:`validate_tool`) and
    raises ToolRegistrationError on the first invalid one, or on a name given
    twice (the message names both plugins).
    """

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[Tool] = ()):
        table: dict[str, Tool] = {}
        for tool in tools:
            if not isinstance(tool, Tool):
                raise ToolRegistrationError(f"expected an ongridd Tool, got {type(tool).__name__}")
            validate_tool(tool)
            if tool.name in table:
                first = table[tool.name]
                raise ToolRegistrationError(
                    f"duplicate tool name {tool.name!r}: registered by plugin {first.plugin} and by plugin {tool.plugin}"
                )
            table[tool.name] = tool
        self._tools: Mapping[str, Tool] = MappingProxyType(table)

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({sorted(self._tools)})"

    def with_tools(self, tools: Iterable[Tool]) -> ToolRegistry:
        """A new registry with these tools added (same validation and duplicate rules)."""
        return ToolRegistry([*self._tools.values(), *tools])

    def without_plugin(self, plugin: str) -> ToolRegistry:
        """A new registry without the tools of ``plugin``."""
        return ToolRegistry(t for t in self._tools.values() if t.plugin != plugin)

    def by_plugin(self) -> dict[str, list[str]]:
        """``{plugin name: [tool names]}`` (each list sorted)."""
        out: dict[str, list[str]] = {}
        for tool in self._tools.values():
            out.setdefault(tool.plugin, []).append(tool.name)
        return {k: sorted(v) for k, v in sorted(out.items())}
