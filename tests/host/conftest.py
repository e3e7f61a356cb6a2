"""Shared fixtures for the host tools: a plugin context, a call helper that
validates arguments like the runtime does, and a tree of real files."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import jsonschema
import pytest

_PLUGINS = str(Path(__file__).resolve().parents[2] / "plugins")
if _PLUGINS not in sys.path:
    sys.path.insert(0, _PLUGINS)

import ongrid_host

from ongridd.config import Config, HostConfig
from ongridd.plugins.api import PluginContext, ToolCallContext


def make_tools(hosts=(), settings=None) -> dict:
    context = PluginContext(config=Config(), plugin_name="ongrid_host", settings=settings or {},
                            hosts=(HostConfig(name="local"), *hosts))
    registered = []
    ongrid_host.ongrid_register_tools(register=registered.append, context=context)
    return {t.name: t for t in registered}


class Caller:
    """Calls a tool the way the runtime does: nulls dropped, arguments
    validated against the tool's schema, then the handler."""

    def __init__(self, tools: dict):
        self.tools = tools

    async def __call__(self, name: str, args: dict | None = None, *, read_only: bool = False, raw: bool = False):
        tool = self.tools[name]
        args = {k: v for k, v in (args or {}).items() if v is not None}
        jsonschema.Draft202012Validator(tool.parameters).validate(args)
        ctx = ToolCallContext(session_id="test-session", agent="specialist-test", read_only=read_only)
        value = await tool.handler(args, ctx)
        if raw:
            return value
        return getattr(value, "value", value)


@pytest.fixture
def tools() -> dict:
    return make_tools()


@pytest.fixture
def call(tools) -> Caller:
    return Caller(tools)


def write_random(path: Path, size: int) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return size


@pytest.fixture
def tree(tmp_path: Path) -> dict:
    """A real folder of real (non-sparse) files::

        root/
          big/a.bin 5 MB, big/nested/deep/b.bin 3 MB
          logs/app.log 2 MB, logs/old.log 1 MB + 1 byte
          small/tiny.txt 100 B
          loop -> .  (a symlink loop)
          big/hard.bin: a hard link to big/a.bin
    """
    root = tmp_path / "root"
    sizes = {
        "big/a.bin": 5 * 1024 * 1024,
        "big/nested/deep/b.bin": 3 * 1024 * 1024,
        "logs/app.log": 2 * 1024 * 1024,
        "logs/old.log": 1024 * 1024 + 1,
        "small/tiny.txt": 100,
    }
    for rel, size in sizes.items():
        write_random(root / rel, size)
    os.symlink(".", root / "loop")
    os.link(root / "big/a.bin", root / "big/hard.bin")
    return {"root": root, "sizes": sizes}
