"""A test plugin registering a write tool without a reason parameter (after a valid one)."""

from ongridd.plugins.api import Proposal, Tool, hookimpl


async def _h(args, ctx):
    return "x"


@hookimpl
def ongrid_register_tools(register, context):
    register(Tool(name="invalid_ok_first", description="valid", handler=_h))
    try:
        register(Tool(name="invalid_write", description="no reason", tool_class="write", handler=_h,
                      describe=lambda a: Proposal(action="x", target="y")))
    except Exception:  # noqa: BLE001, S110
        pass  # swallowing the refusal does not make the plugin valid
