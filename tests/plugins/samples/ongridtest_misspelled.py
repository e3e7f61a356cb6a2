"""A test plugin with a misspelled hook name."""

from ongridd.plugins.api import Tool, hookimpl


async def _h(args, ctx):
    return "x"


@hookimpl
def ongrid_register_tool(register, context):  # missing the final "s"
    register(Tool(name="misspelled_tool", description="never registered", handler=_h))


@hookimpl
def ongrid_register_redirect_stubs(register):
    register(tool="misspelled_stub", persona="specialist-disk", reason="never kept")
