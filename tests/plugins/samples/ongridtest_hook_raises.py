"""A test plugin whose hook registers one tool, then raises."""

from ongridd.plugins.api import Tool, hookimpl


async def _h(args, ctx):
    return "x"


@hookimpl
def ongrid_register_tools(register, context):
    register(Tool(name="raises_first", description="registered before the failure", handler=_h))
    raise KeyError("settings.url")


@hookimpl
def ongrid_register_redirect_stubs(register):
    register(tool="raises_stub", persona="specialist-disk", reason="never kept")
