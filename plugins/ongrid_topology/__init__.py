"""Ongrid plugin ``ongrid_topology``: the service graph tools
``find_topology_node`` and ``expand_topology``.

Configuration: ``topology.files`` (YAML files of nodes and "depends on"
edges, see :mod:`ongrid_topology.graph`; ``etc/topology.yaml`` is an
example), merged with the host inventory and, when ``prometheus.url`` is
set, the job/instance labels of Prometheus's active targets.
"""

from __future__ import annotations

from typing import Any

from ongrid_topology.tools import TopologySource, make_tools
from ongridd.plugins.api import PluginContext, hookimpl

__all__ = ["ongrid_register_tools"]


@hookimpl
def ongrid_register_tools(register: Any, context: PluginContext) -> None:
    """Register ``find_topology_node`` and ``expand_topology``."""
    for tool in make_tools(TopologySource(context)):
        register(tool)
