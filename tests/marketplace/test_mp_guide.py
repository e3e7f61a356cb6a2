"""docs/plugins.md stays true: its minimal plugin builds, installs and
registers; every hook and every field of the public types is documented."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import attrs
from mp_helpers import ROOT, need, setuptools_builds_wheels, write_index

from ongridd.plugins import hookspecs
from ongridd.plugins.api import PluginContext, Tool, ToolCallContext
from ongridd.plugins.manager import HOOK_NAMES

GUIDE = ROOT / "docs" / "plugins.md"
FILE_RE = re.compile(r"<!-- guide-file: (?P<path>\S+) -->\s*```[a-z]*\n(?P<body>.*?)^```", re.DOTALL | re.MULTILINE)


def guide_files() -> dict[str, str]:
    return {m["path"]: m["body"] for m in FILE_RE.finditer(GUIDE.read_text(encoding="utf-8"))}


def test_the_guide_has_the_three_files_of_its_plugin():
    assert sorted(guide_files()) == ["ongrid-hello/ongrid_hello/__init__.py",
                                     "ongrid-hello/ongrid_hello/personas/uptime-checker.md",
                                     "ongrid-hello/pyproject.toml"]


def test_every_hook_is_documented_with_its_signature():
    text = GUIDE.read_text(encoding="utf-8")
    for name in HOOK_NAMES:
        params = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
        assert f"`{name}({params})`" in text, name


def test_every_field_of_the_public_types_is_documented():
    text = GUIDE.read_text(encoding="utf-8")
    for cls in (Tool, PluginContext):
        block = re.search(rf"class {cls.__name__}:\n(.*?)```", text, re.DOTALL)
        assert block, cls.__name__
        documented = re.findall(r"^    (\w+):", block.group(1), re.MULTILINE)
        assert documented == [f.name for f in attrs.fields(cls)], cls.__name__
    for field in attrs.fields(ToolCallContext):
        if field.name != "services":  # the runtime's, not for plugins
            assert f"`{field.name}`" in text, field.name


async def test_the_guide_plugin_installs_and_registers(env):
    need(setuptools_builds_wheels(), "setuptools >= 70.1 in the daemon's environment (folder sources)")
    for rel, body in guide_files().items():
        path = env.tmp / "guide" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    write_index(env.index, [{"name": "ongrid-hello", "version": "0.1.0", "description": "from the guide",
                             "source": "../guide/ongrid-hello"}])
    result = await env.service.install("ongrid-hello", actor="guide")
    assert result["plugins"] == ["ongrid_hello"]
    assert result["registered"]["tools"] == ["host_uptime"]
    assert result["registered"]["redirect_stubs"] == ["host_uptime"]
    reg = env.holder.current
    persona = reg.agents.by_name("uptime-checker")
    assert persona is not None and persona.tools == ("host_uptime",) and persona.permission_mode == "read-only"
    assert [s.persona for s in reg.stubs if s.tool == "host_uptime"] == ["uptime-checker"]
    tool = reg.tools["host_uptime"]
    assert tool.plugin == "ongrid_hello" and tool.tool_class == "read"
    if Path("/proc/uptime").exists():
        answer = await tool.handler({}, None)
        assert answer["uptime_s"] > 0 and answer["uptime_days"] == round(answer["uptime_s"] / 86400, 2)
    await env.service.uninstall("ongrid-hello", actor="guide")
    assert "host_uptime" not in env.holder.current.tools
