"""``find_topology_node`` and ``expand_topology`` (class ``read``).

Both return ``{nodes: [{name, kind, labels, hosts}], edges: [{from, to}],
truncated}`` (plus ``warnings`` when the graph had some).  The graph is
rebuilt when a topology file changed or at most every
:data:`CACHE_S` seconds (Prometheus targets); files are read in a worker
thread.  Errors (ToolError): an unreadable or invalid topology file (file
and entry named), an unknown node (closest names suggested).  A failing
Prometheus only adds a warning: the files and inventory still answer.
"""

from __future__ import annotations

import difflib
import os
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ongrid_prometheus.client import PrometheusClient
from ongrid_topology.graph import Target, TopologyError, build_graph, node_dict, parse_file
from ongridd.plugins.api import ToolError
from ongridd.plugins.api import PluginContext, Tool, ToolCallContext, read_yaml_file

if TYPE_CHECKING:
    import networkx as nx

CACHE_S = 60.0
MAX_FIND = 20
MAX_EXPAND_NODES = 200
MAX_DEPTH = 5
MAX_TARGETS = 5000


class TopologySource:
    """Builds (and caches) the graph for one plugin context."""

    def __init__(self, context: PluginContext, timeout_s: float = 5.0):
        self.files = tuple(context.config.topology.files)
        self.hosts = tuple(context.hosts or context.config.hosts)
        self.prometheus = (PrometheusClient(base_url=context.config.prometheus.url, http=context.http,
                                            timeout_s=timeout_s) if context.config.prometheus.url else None)
        self._key: Any = None
        self._graph: tuple[nx.DiGraph, list[str]] | None = None
        self._built_at = -1e9
        self._lock = trio.Lock()

    def _stamp(self) -> tuple:
        out: list[tuple[str, int | None, int | None]] = []
        for f in self.files:
            try:
                st = os.stat(f)
                out.append((f, st.st_mtime_ns, st.st_size))
            except OSError:
                out.append((f, None, None))
        return tuple(out)

    def _read_files(self) -> list:
        # runs in a worker thread: the first build's networkx import happens here, not on the Trio thread
        import networkx  # noqa: F401

        parsed = []
        for f in self.files:
            try:
                data = read_yaml_file(Path(f))
            except Exception as exc:  # noqa: BLE001 - ConfigError, OSError: missing, too large, bad YAML
                raise TopologyError(f"topology file {f}: {exc}") from None
            parsed.append(parse_file(data, f))
        return parsed

    async def _targets(self, warnings: list[str]) -> list[Target]:
        if self.prometheus is None:
            return []
        try:
            answer = await self.prometheus.call("targets", {"state": "active"})
        except ToolError as exc:
            warnings.append(f"Prometheus targets not merged: {exc}")
            return []
        active = (answer.data or {}).get("activeTargets") or [] if isinstance(answer.data, dict) else []
        out = []
        for t in active[:MAX_TARGETS]:
            labels = t.get("labels") if isinstance(t, dict) else None
            if isinstance(labels, dict) and isinstance(labels.get("job"), str) and isinstance(labels.get("instance"), str):
                out.append(Target(job=labels["job"], instance=labels["instance"]))
        return out

    async def graph(self) -> tuple[nx.DiGraph, list[str]]:
        """The current graph and warnings; ToolError for a bad topology file."""
        async with self._lock:
            stamp = self._stamp()
            now = trio.current_time()
            if self._graph is not None and stamp == self._key and now - self._built_at < CACHE_S:
                return self._graph
            try:
                parsed = await trio.to_thread.run_sync(self._read_files)
            except TopologyError as exc:
                raise ToolError(str(exc)) from None
            warnings: list[str] = []
            targets = await self._targets(warnings)
            try:
                g, more = build_graph(parsed, self.hosts, targets)
            except TopologyError as exc:
                raise ToolError(str(exc)) from None
            self._graph, self._key, self._built_at = (g, warnings + more), stamp, now
            return self._graph


def _edges(g: nx.DiGraph, names: set[str]) -> list[dict[str, str]]:
    return [{"from": a, "to": b} for a, b in g.edges() if a in names and b in names]


def _result(g: nx.DiGraph, order: list[str], truncated: bool, warnings: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"nodes": [node_dict(g, n) for n in order], "edges": _edges(g, set(order)),
                           "truncated": truncated}
    if warnings:
        out["warnings"] = warnings
    return out


def _score(g: nx.DiGraph, name: str, q: str) -> int:
    a = g.nodes[name]
    low = name.lower()
    bare = low[5:] if low.startswith("host:") else low
    if q in (low, bare):
        return 100
    if "=" in q:
        key, _, value = q.partition("=")
        return 80 if str(a["labels"].get(key.strip(), "")).lower() == value.strip() else 0
    if low.startswith(q) or bare.startswith(q):
        return 70
    if q in low:
        return 60
    if any(q == h.lower() for h in a["hosts"]):
        return 50
    if any(q == str(v).lower() for v in a["labels"].values()) or q == a["kind"].lower():
        return 40
    if any(q in h.lower() for h in a["hosts"]) or any(q in str(v).lower() for v in a["labels"].values()):
        return 20
    return 0


def make_tools(source: TopologySource) -> list[Tool]:
    """Both tools over ``source``."""

    async def find(args: dict[str, Any], ctx: ToolCallContext | None = None) -> dict[str, Any]:
        q = str(args.get("query") or "").strip().lower()
        if not q:
            raise ToolError("query: give a node name, host name or label (e.g. 'checkout', 'web-1', 'team=payments')")
        g, warnings = await source.graph()
        scored = sorted(((s, n) for n in g.nodes if (s := _score(g, n, q)) > 0), key=lambda x: (-x[0], x[1]))
        order = [n for _, n in scored[:MAX_FIND]]
        out = _result(g, order, len(scored) > MAX_FIND, warnings)
        if not order:
            out["note"] = (f"no node matches {q!r}; the graph has {g.number_of_nodes()} nodes"
                           + (f", e.g. {', '.join(sorted(g.nodes)[:10])}" if g.number_of_nodes() else
                              " (set topology.files in the Ongrid config)"))
        return out

    async def expand(args: dict[str, Any], ctx: ToolCallContext | None = None) -> dict[str, Any]:
        g, warnings = await source.graph()
        name = str(args.get("node") or "")
        if name not in g and f"host:{name}" in g:
            name = f"host:{name}"
        if name not in g:
            close = difflib.get_close_matches(name, list(g.nodes), n=5, cutoff=0.5)
            raise ToolError(f"node: no node {name!r} in the topology"
                            + (f"; closest: {', '.join(close)}" if close else "; use find_topology_node"))
        depth = int(args.get("depth", 2))
        direction = args.get("direction", "both")
        steps = []
        if direction in ("down", "both"):
            steps.append(g.successors)
        if direction in ("up", "both"):
            steps.append(g.predecessors)
        seen = {name: 0}
        order = [name]
        queue = deque([name])
        truncated = False
        while queue:
            cur = queue.popleft()
            if seen[cur] >= depth:
                continue
            for step in steps:
                for nxt in sorted(step(cur)):
                    if nxt in seen:
                        continue
                    if len(order) >= MAX_EXPAND_NODES:
                        truncated = True
                        break
                    seen[nxt] = seen[cur] + 1
                    order.append(nxt)
                    queue.append(nxt)
        out = _result(g, order, truncated, warnings)
        out["root"] = name
        return out

    return [
        Tool(name="find_topology_node",
             description=("Find nodes of the service graph (services, databases, hosts, Prometheus jobs) by "
                          "name, host or label ('team=payments'), best matches first, with the edges between "
                          "them (from depends on to)."),
             parameters={"type": "object", "additionalProperties": False, "required": ["query"],
                         "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 200,
                                                  "description": "a name, host, label value or key=value"}}},
             handler=find, tool_class="read", timeout_s=20),
        Tool(name="expand_topology",
             description=("The neighbourhood of one node of the service graph: 'down' follows what it depends on, "
                          "'up' what depends on it, 'both' (default); depth 1-5 (default 2). Use it to walk from a "
                          "symptom to patient zero."),
             parameters={"type": "object", "additionalProperties": False, "required": ["node"],
                         "properties": {
                             "node": {"type": "string", "minLength": 1, "maxLength": 200,
                                      "description": "exact node name (e.g. 'checkout' or 'host:web-1')"},
                             "depth": {"type": "integer", "minimum": 1, "maximum": MAX_DEPTH,
                                       "description": "how many steps (default 2)"},
                             "direction": {"type": "string", "enum": ["up", "down", "both"],
                                           "description": "down: dependencies, up: dependents, both (default)"}}},
             handler=expand, tool_class="read", timeout_s=20),
    ]
