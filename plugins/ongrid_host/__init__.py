"""Ongrid's host tools plugin (``ongrid_host``): load, processes, disk usage,
large files, stat, network probes, ``host_bash`` and service restarts, on
the local host or on inventory hosts over ssh.

Tools: ``get_host_load``, ``get_host_processes``, ``host_du_summary``,
``host_find_large_files``, ``host_stat_file``, ``host_probe_http``,
``host_probe_dns``, ``host_probe_tcp`` (probes: local host only),
``host_bash`` (class ``read`` on the allowlist, else ``write``) and
``host_restart_service`` (``destructive``) and ``search_logs`` (log files
under ``logs.dirs`` and the systemd journal, see :mod:`ongrid_host.logs_tool`).  Settings:
``plugins.settings.ongrid_host`` (see :mod:`ongrid_host.settings`).
"""

from __future__ import annotations

from ongrid_host.tools import build_tools
from ongridd.plugins.api import PluginContext, hookimpl

__all__ = ["build_tools", "ongrid_register_tools"]


@hookimpl
def ongrid_register_tools(register, context: PluginContext) -> None:
    """Register every host tool with ``register(tool)``."""
    for tool in build_tools(context):
        register(tool)
