"""A small Ongrid plugin for the runtime tests (registered like any plugin).

Tools (all real, all harmless):

* ``rt_wait(key)`` — ``read``: sets ``STARTED[key]`` and waits until the test
  sets ``RELEASE[key]`` (an in-process test controls exactly when a worker's
  tool call is in flight and when it returns).
* ``rt_sleep(seconds)`` — ``read``: sleeps (for daemons in another process).
* ``rt_raise()`` — ``read``: raises ``KeyError('host')`` (a buggy tool).
* ``rt_echo(text)`` — ``read``: returns the text.
* ``rt_touch(name, reason)`` — ``write``: creates the file ``name`` in the
  folder ``plugins.settings.rt_testtools.marker_dir`` (a real change, passes
  the review gate).
* ``rt_shell(cmd, reason?)`` — class by argument like ``host_bash``: ``echo …``
  is ``read``, anything else ``write``; a read-only persona's call is refused.

The events are module-level: the daemon under test runs in the test's own
process and imports this same module, so the test and the tool share them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from ongridd.plugins.api import Proposal, Tool, ToolCallContext, ToolError, hookimpl

STARTED: dict[str, trio.Event] = {}
RELEASE: dict[str, trio.Event] = {}
CALLS: list[tuple[str, dict]] = []


def reset() -> None:
    """Forget every event and recorded call (between tests)."""
    STARTED.clear()
    RELEASE.clear()
    CALLS.clear()


def events(key: str) -> tuple[trio.Event, trio.Event]:
    """``(started, release)`` for ``rt_wait(key)``, created on first use."""
    return STARTED.setdefault(key, trio.Event()), RELEASE.setdefault(key, trio.Event())


def _obj(props: dict, required: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}


def _marker_dir(context: Any) -> Path | None:
    value = (context.settings or {}).get("marker_dir")
    return Path(value) if value else None


@hookimpl
def ongrid_register_tools(register, context):
    marker_dir = _marker_dir(context)

    async def rt_wait(args: dict, ctx: ToolCallContext) -> Any:
        CALLS.append(("rt_wait", dict(args, session_id=ctx.session_id)))
        started, release = events(args["key"])
        started.set()
        await release.wait()
        return {"key": args["key"], "released": True}

    async def rt_sleep(args: dict, ctx: ToolCallContext) -> Any:
        CALLS.append(("rt_sleep", dict(args)))
        await trio.sleep(args["seconds"])
        return {"slept_s": args["seconds"]}

    async def rt_raise(args: dict, ctx: ToolCallContext) -> Any:
        CALLS.append(("rt_raise", dict(args)))
        raise KeyError("host")

    async def rt_echo(args: dict, ctx: ToolCallContext) -> Any:
        CALLS.append(("rt_echo", dict(args)))
        return {"echo": args["text"]}

    def touch_target(args: dict) -> Path:
        if marker_dir is None:
            raise ToolError("rt_touch: plugins.settings.rt_testtools.marker_dir is not set")
        name = args["name"]
        if "/" in name or name in (".", ".."):
            raise ToolError(f"rt_touch: {name!r} must be a plain file name")
        return marker_dir / name

    async def rt_touch(args: dict, ctx: ToolCallContext) -> Any:
        CALLS.append(("rt_touch", dict(args)))
        path = touch_target(args)
        path.write_text(f"touched by {ctx.agent} in {ctx.session_id} for {ctx.user_id}: {args['reason']}\n")
        return {"created": str(path)}

    def touch_describe(args: dict) -> Proposal:
        return Proposal(action=f"create marker file {args.get('name')}", target=f"local:{args.get('name')}",
                        blast_radius="single_host")

    def shell_class(args: dict) -> str:
        return "read" if str(args.get("cmd", "")).split()[:1] == ["echo"] else "write"

    async def rt_shell(args: dict, ctx: ToolCallContext) -> Any:
        CALLS.append(("rt_shell", dict(args)))
        words = args["cmd"].split()
        if shell_class(args) == "write":
            if ctx.read_only:
                raise ToolError(f"refused: persona {ctx.agent!r} is read-only; nothing was run")
            if words[:1] == ["touch"] and len(words) == 2:
                touch_target({"name": words[1]}).write_text("rt_shell\n")
                return {"ran": args["cmd"]}
            raise ToolError(f"rt_shell: only 'echo …' and 'touch NAME' are supported, got {args['cmd']!r}")
        return {"stdout": " ".join(words[1:])}

    register(Tool(name="rt_wait", description="Wait until the test releases KEY.", handler=rt_wait,
                  parameters=_obj({"key": {"type": "string", "minLength": 1}}, ("key",)), timeout_s=300))
    register(Tool(name="rt_sleep", description="Sleep SECONDS.", handler=rt_sleep,
                  parameters=_obj({"seconds": {"type": "number", "minimum": 0}}, ("seconds",)), timeout_s=300))
    register(Tool(name="rt_raise", description="Always raises KeyError('host').", handler=rt_raise))
    register(Tool(name="rt_echo", description="Echo TEXT.", handler=rt_echo,
                  parameters=_obj({"text": {"type": "string"}}, ("text",))))
    register(Tool(name="rt_touch", description="Create a marker file (a change; needs a reason).",
                  handler=rt_touch, tool_class="write", describe=touch_describe,
                  parameters=_obj({"name": {"type": "string", "minLength": 1},
                                   "reason": {"type": "string", "minLength": 1}}, ("name", "reason"))))
    register(Tool(name="rt_shell", description="echo (read) or touch NAME (write).", handler=rt_shell,
                  classify=shell_class, describe=lambda a: Proposal(action=f"run {a.get('cmd')}", target="local"),
                  parameters=_obj({"cmd": {"type": "string", "minLength": 1}, "reason": {"type": "string"}},
                                  ("cmd",))))
