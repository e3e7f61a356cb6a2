"""A well-behaved test plugin: one of everything."""

from ongridd.plugins.api import Proposal, Tool, hookimpl


async def _echo(args, ctx):
    return {"echo": args.get("text"), "settings": dict(CONTEXTS[-1].settings) if CONTEXTS else None}


async def _restart(args, ctx):
    return "restarted"


async def _status(request):
    return {"ok": True}


CONTEXTS = []


@hookimpl
def ongrid_register_tools(register, context):
    CONTEXTS.append(context)
    register(Tool(name="sample_echo", description="Echo text back.",
                  parameters={"type": "object", "properties": {"text": {"type": "string"}}}, handler=_echo))
    register(Tool(name="sample_restart", description="Restart a sample service.", tool_class="write",
                  parameters={"type": "object", "properties": {"service": {"type": "string"}, "reason": {"type": "string"}},
                              "required": ["service", "reason"]},
                  handler=_restart, describe=lambda a: Proposal(action="restart", target=a["service"])))


@hookimpl
def ongrid_register_redirect_stubs(register):
    register(tool="sample_hallucinated", persona="specialist-sample", reason="the sample specialist has it")


@hookimpl
def ongrid_register_personas(register):
    register("good_agents")  # relative to this module's folder


@hookimpl
def ongrid_register_skills(register):
    register("good_skills")


@hookimpl
def ongrid_register_routes(register, context):
    register("GET", "/api/plugins/sample/status", _status)
