"""Tools: the spec (`Tool`), the call context, bags and the runner."""

from ongridd.tools.spec import (
    TOOL_CLASSES,
    Proposal,
    Tool,
    ToolCallContext,
    ToolResult,
    RedirectStub,
    Outcome,
)

__all__ = ["TOOL_CLASSES", "Proposal", "Tool", "ToolCallContext", "ToolResult", "RedirectStub", "Outcome"]
