"""The plugin's registration and tool contract."""

from __future__ import annotations

import jsonschema
import ongrid_host
import pluggy
import pytest

from ongridd.config import Config, HostConfig
from ongridd.errors import ConfigError, ToolError
from ongridd.plugins import hookspecs
from ongridd.plugins.api import PluginContext
from tests.host.conftest import Caller, make_tools

EXPECTED = {
    "get_host_load": "read", "get_host_processes": "read", "host_du_summary": "read",
    "host_find_large_files": "read", "host_stat_file": "read", "host_probe_http": "read",
    "host_probe_dns": "read", "host_probe_tcp": "read", "host_bash": "read",
    "host_restart_service": "destructive", "search_logs": "read",
}


def test_registers_through_pluggy():
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(ongrid_host, name="ongrid_host")
    registered = []
    context = PluginContext(config=Config(), plugin_name="ongrid_host", hosts=(HostConfig(name="local"),))
    pm.hook.ongrid_register_tools(register=registered.append, context=context)
    assert {t.name: t.tool_class for t in registered} == EXPECTED


def test_schemas_follow_the_contract():
    for tool in make_tools().values():
        params = tool.parameters
        jsonschema.Draft202012Validator.check_schema(params)
        assert params["additionalProperties"] is False, tool.name
        assert "host" in params["properties"] and "host" not in params["required"], tool.name
        for name, prop in params["properties"].items():
            if name not in params["required"]:
                assert prop.get("description"), f"{tool.name}.{name} has no description"
        assert tool.description


def test_may_mutate_tools_describe_proposals():
    tools = make_tools()
    assert tools["host_bash"].may_mutate and tools["host_bash"].describe is not None
    p = tools["host_restart_service"].describe({"service": "nginx", "reason": "502s", "host": "web-1"})
    assert (p.action, p.target, p.blast_radius) == ("restart service nginx.service", "web-1:nginx.service", "service")
    p = tools["host_bash"].describe({"cmd": "rm -rf /tmp/x"})
    assert (p.action, p.target, p.blast_radius) == ("run command: rm -rf /tmp/x", "local", "single_host")


async def test_unknown_host_lists_known_hosts():
    call = Caller(make_tools(hosts=(HostConfig(name="web-1", address="10.0.0.1"),)))
    with pytest.raises(ToolError, match=r"unknown host 'db-9'; known hosts: local, web-1"):
        await call("get_host_load", {"host": "db-9"})


async def test_null_optional_arguments_count_as_absent(call):
    result = await call("get_host_processes", {"host": None, "top_n": None, "sort_by": None})
    assert result["sort_by"] == "cpu" and len(result["processes"]) <= 10


def test_bad_settings_are_refused_with_the_key():
    with pytest.raises(ConfigError, match=r"strict_host_key_checking"):
        make_tools(settings={"strict_host_key_checking": "maybe"})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) known_host_file"):
        make_tools(settings={"known_host_file": "/x"})


def test_schema_refuses_out_of_range_and_extra_arguments():
    tools = make_tools()
    v = jsonschema.Draft202012Validator(tools["get_host_processes"].parameters)
    assert not v.is_valid({"top_n": 101})
    assert not v.is_valid({"sort_by": "mem"})
    assert not v.is_valid({"bogus": 1})
    v = jsonschema.Draft202012Validator(tools["host_du_summary"].parameters)
    assert not v.is_valid({"paths": []})
    assert not v.is_valid({"paths": ["/a"] * 17})
    assert not v.is_valid({"paths": ["/a"], "depth": 6})


def test_core_registry_accepts_every_tool():
    from ongridd.tools.registry import ToolRegistry

    registry = ToolRegistry(make_tools().values())
    assert set(registry) == set(EXPECTED)
