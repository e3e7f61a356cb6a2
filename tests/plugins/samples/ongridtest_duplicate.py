"""A test plugin registering a tool name another plugin already has."""

from ongridd.plugins.api import Tool, hookimpl


async def _h(args, ctx):
    return "x"


@hookimpl
def ongrid_register_tools(register, context):
    register(Tool(name="duplicate_unique", description="fine on its own", handler=_h))
    register(Tool(name="sample_echo", description="clashes with ongridtest_good", handler=_h))
