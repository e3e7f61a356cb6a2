"""Ongrid marketplace example: disk space held by deleted-but-open files.

Contributes

* the read tool ``find_deleted_open_files`` (scans ``/proc`` on the
  daemon's host, see :mod:`ongrid_example_diskreport.deleted`);
* the persona ``disk-leak-hunter`` that uses it (``personas/``);
* a redirect stub sending a coordinator that calls the tool directly to
  that persona.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from ongrid_example_diskreport.deleted import scan_deleted_open_files
from ongridd.plugins.api import (
    PluginContext,
    Tool,
    ToolCallContext,
    ToolError,
    hookimpl,
)

__version__ = "0.1.0"
TOOL_NAME = "find_deleted_open_files"
PERSONA = "disk-leak-hunter"
HERE = Path(__file__).resolve().parent

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "min_size_mb": {"type": "number", "minimum": 0, "default": 1,
                        "description": "only files of at least this many MiB (default 1)"},
        "top_n": {"type": "integer", "minimum": 1, "maximum": 200, "default": 20,
                  "description": "how many of the largest files to list (1..200, default 20)"},
    },
    "additionalProperties": False,
}


async def find_deleted_open_files(args: dict[str, Any], ctx: ToolCallContext) -> dict[str, Any]:
    """The tool's handler: scan in a worker thread (``/proc`` may be large)."""
    min_bytes = int(float(args.get("min_size_mb", 1)) * 1024 * 1024)
    top_n = int(args.get("top_n", 20))
    try:
        return await trio.to_thread.run_sync(
            lambda: scan_deleted_open_files(min_bytes=min_bytes, top_n=top_n), abandon_on_cancel=True)
    except OSError as exc:
        raise ToolError(f"{TOOL_NAME}: cannot read /proc on this host ({exc.strerror or exc}); "
                        "this tool works on Linux only") from None


def make_tool() -> Tool:
    return Tool(
        name=TOOL_NAME,
        description=(
            "On the daemon's host: files that were deleted but are still held open by a process, so their "
            "disk space is not freed (df full, du much smaller). Lists the largest first with the processes "
            "(pid, name, user, fd) holding each; restarting or signalling those processes frees the space."
        ),
        parameters=PARAMETERS,
        handler=find_deleted_open_files,
        tool_class="read",
        timeout_s=20.0,
    )


@hookimpl
def ongrid_register_tools(register: Any, context: PluginContext) -> None:
    register(make_tool())


@hookimpl
def ongrid_register_personas(register: Any) -> None:
    register(HERE / "personas")


@hookimpl
def ongrid_register_redirect_stubs(register: Any) -> None:
    register(tool=TOOL_NAME, persona=PERSONA,
             reason="deleted-but-open files are hunted by the disk-leak-hunter specialist")
