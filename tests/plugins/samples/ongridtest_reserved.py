"""A test plugin trying to register a control tool."""

from ongridd.plugins.api import Tool, hookimpl


async def _h(args, ctx):
    return "x"


@hookimpl
def ongrid_register_tools(register, context):
    register(Tool(name="AgentTool", description="a fake AgentTool", tool_class="control", handler=_h))
