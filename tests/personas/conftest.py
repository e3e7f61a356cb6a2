from __future__ import annotations

from pathlib import Path

import pytest

CORPUS = Path(__file__).parent / "corpus"
REPO = Path(__file__).resolve().parents[2]

#: Every tool name the built-in tool families define (the control tools
#: always count as known to the parser).
KNOWN_TOOLS = frozenset({
    "query_knowledge", "get_active_incidents", "query_incidents", "get_incident_detail",
    "query_alert_rules", "query_devices", "query_change_events", "ack_incident",
    "get_host_load", "get_host_processes", "host_du_summary", "host_find_large_files",
    "host_stat_file", "host_probe_http", "host_probe_dns", "host_probe_tcp", "host_bash",
    "host_restart_service", "query_promql", "search_logs", "query_logql", "query_traceql",
    "find_topology_node", "expand_topology",
})


@pytest.fixture
def corpus() -> Path:
    return CORPUS


@pytest.fixture
def known_tools() -> frozenset[str]:
    return KNOWN_TOOLS


@pytest.fixture
def repo() -> Path:
    return REPO


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", newline="")
    return path


@pytest.fixture
def make_file():
    return write
