"""The service graph: ``topology.files`` merged with the host inventory and,
when Prometheus is configured, its active targets.

File format (YAML; every key optional but ``name``/``from``/``to``)::

    nodes:
      - {name: checkout, kind: service, labels: {team: payments}, hosts: [web-1, web-2]}
      - {name: postgres-main, kind: database, hosts: [db-2]}
    edges:
      - {from: checkout, to: postgres-main}     # from depends on to

Later files override earlier ones node by node (the whole node is
replaced); edges add up.  Each inventory host is a node ``host:<name>``
(kind ``host``, its inventory labels); a node's ``hosts`` give edges node →
``host:<name>``.  Prometheus targets: a target whose ``job`` label is a node
name (or a node's ``labels.job``) links that node to the host its
``instance`` names (by inventory name or address, port dropped); a job that
names no node becomes a node of kind ``job``.  An edge naming an unknown node
adds it with kind ``unknown`` and a warning.

The graph is a ``networkx.DiGraph`` (edge u → v: u depends on v); node
attributes ``kind``, ``labels`` (str → str), ``hosts`` (list of str).
Problems in a file raise :class:`TopologyError` naming the file and entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:  # networkx (~0.1-0.2 s to import) is imported by build_graph, not at plugin load
    import networkx as nx

MAX_NODES = 20_000
MAX_EDGES = 100_000
MAX_NAME = 200
_NODE_KEYS = ("name", "kind", "labels", "hosts")
_EDGE_KEYS = ("from", "to")


class TopologyError(Exception):
    """A topology file that cannot be used (message names file and entry)."""


@attrs.frozen
class Target:
    """One Prometheus target's ``job`` and ``instance`` labels."""

    job: str
    instance: str


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        raise TopologyError(f"{where}: expected a non-empty name of at most {MAX_NAME} characters, got {value!r}")
    return value.strip()


def _node(entry: Any, where: str) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        raise TopologyError(f"{where}: expected a mapping {{name, kind, labels, hosts}}")
    unknown = sorted(set(entry) - set(_NODE_KEYS))
    if unknown:
        raise TopologyError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(_NODE_KEYS)})")
    name = _name(entry.get("name"), f"{where}.name")
    kind = entry.get("kind", "service")
    kind = _name(kind, f"{where}.kind")
    labels = entry.get("labels") or {}
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) for k in labels):
        raise TopologyError(f"{where}.labels: expected a mapping of names to values")
    labels = {k: str(v) for k, v in labels.items() if isinstance(v, (str, int, float, bool))}
    hosts = entry.get("hosts") or []
    if not isinstance(hosts, Sequence) or isinstance(hosts, str):
        raise TopologyError(f"{where}.hosts: expected a list of host names")
    return {"name": name, "kind": kind, "labels": labels,
            "hosts": [_name(h, f"{where}.hosts[{i}]") for i, h in enumerate(hosts)]}


def parse_file(data: Any, source: str) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """(nodes, edges) from one file's YAML data; TopologyError naming ``source``."""
    if data is None:
        return [], []
    if not isinstance(data, Mapping):
        raise TopologyError(f"{source}: the top level must be a mapping with 'nodes' and 'edges'")
    unknown = sorted(set(data) - {"nodes", "edges"})
    if unknown:
        raise TopologyError(f"{source}: unknown key {unknown[0]!r} (known: nodes, edges)")
    raw_nodes, raw_edges = data.get("nodes") or [], data.get("edges") or []
    if not isinstance(raw_nodes, list) or not isinstance(raw_edges, list):
        raise TopologyError(f"{source}: 'nodes' and 'edges' must be lists")
    nodes = [_node(n, f"{source}: nodes[{i}]") for i, n in enumerate(raw_nodes)]
    edges = []
    for i, e in enumerate(raw_edges):
        where = f"{source}: edges[{i}]"
        if not isinstance(e, Mapping) or set(e) - set(_EDGE_KEYS):
            raise TopologyError(f"{where}: expected {{from: A, to: B}} (A depends on B)")
        edges.append((_name(e.get("from"), f"{where}.from"), _name(e.get("to"), f"{where}.to")))
    return nodes, edges


def _host_part(instance: str) -> str:
    if instance.startswith("["):
        return instance[1:].split("]", 1)[0]
    return instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance


def build_graph(files: Iterable[tuple[list[dict[str, Any]], list[tuple[str, str]]]],
                hosts: Iterable[Any], targets: Iterable[Target] = ()) -> tuple[nx.DiGraph, list[str]]:
    """The merged graph and its warnings.  ``files``: parsed files in
    order; ``hosts``: inventory entries with ``name``, ``address``, ``labels``.
    Imports networkx on its first call (call it once in a worker thread to
    keep that import off the Trio thread)."""
    import networkx as nx

    nodes: dict[str, dict[str, Any]] = {}
    edges: list[tuple[str, str]] = []
    warnings: list[str] = []
    for file_nodes, file_edges in files:
        for n in file_nodes:
            nodes[n["name"]] = n  # a later file replaces the node
        edges.extend(file_edges)
    g = nx.DiGraph()
    by_address: dict[str, str] = {}
    for h in hosts:
        name = f"host:{h.name}"
        g.add_node(name, kind="host", labels=dict(h.labels or {}), hosts=[h.name])
        by_address[h.name] = h.name
        if getattr(h, "address", ""):
            by_address.setdefault(h.address, h.name)
    for n in nodes.values():
        g.add_node(n["name"], kind=n["kind"], labels=n["labels"], hosts=list(n["hosts"]))
        for host in n["hosts"]:
            _ensure_host(g, host)
            g.add_edge(n["name"], f"host:{host}")
    for a, b in edges:
        for end in (a, b):
            if end not in g:
                g.add_node(end, kind="unknown", labels={}, hosts=[])
                warnings.append(f"edge names {end!r}, which no file defines; added with kind 'unknown'")
        g.add_edge(a, b)
    by_job = {n["labels"].get("job"): n["name"] for n in nodes.values() if n["labels"].get("job")}
    for t in targets:
        node = t.job if t.job in nodes else by_job.get(t.job)
        if node is None:
            node = t.job
            if node not in g:
                g.add_node(node, kind="job", labels={"job": t.job}, hosts=[])
        host = by_address.get(_host_part(t.instance))
        if host is not None:
            g.add_edge(node, f"host:{host}")
            if host not in g.nodes[node]["hosts"]:
                g.nodes[node]["hosts"].append(host)
        if g.number_of_nodes() > MAX_NODES:
            break
    if g.number_of_nodes() > MAX_NODES or g.number_of_edges() > MAX_EDGES:
        raise TopologyError(f"the topology has {g.number_of_nodes()} nodes and {g.number_of_edges()} edges; "
                            f"at most {MAX_NODES} and {MAX_EDGES} are read")
    return g, warnings[:20]


def _ensure_host(g: nx.DiGraph, host: str) -> None:
    name = f"host:{host}"
    if name not in g:
        g.add_node(name, kind="host", labels={}, hosts=[host])


def node_dict(g: nx.DiGraph, name: str) -> dict[str, Any]:
    """``{name, kind, labels, hosts}`` of one node."""
    a = g.nodes[name]
    return {"name": name, "kind": a["kind"], "labels": dict(a["labels"]), "hosts": list(a["hosts"])}
