"""Prometheus metrics (prometheus-client), exposed at ``GET /metrics``.

Module-level collectors on the default registry; the runtime and kernel
event sinks update them.  Names follow Prometheus conventions.
"""

from __future__ import annotations

from typing import Any, TypeVar

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound=MetricWrapperBase)

TURNS = Counter("ongrid_turns_total", "Coordinator turns finished, by final status", ["status"])
TOOL_CALLS = Counter("ongrid_tool_calls_total", "Tool calls by tool and audit status", ["tool", "status"])
TOOL_SECONDS = Histogram("ongrid_tool_call_duration_seconds", "Tool call wall time", ["tool"])
WORKERS = Counter("ongrid_workers_total", "Worker and reviewer sessions ended, by persona and status",
                  ["agent", "status"])
WORKERS_RUNNING = Gauge("ongrid_workers_running", "Worker and reviewer sessions running now")
MODEL_CALLS_WAITING = Gauge("ongrid_model_calls_waiting",
                            "Model calls waiting for a free slot (llm.max_concurrent_calls) now")
MODEL_CALLS = Counter("ongrid_model_calls_total", "Model calls by persona and outcome (ok|error|cancelled), "
                      "each call once however many attempts it took", ["persona", "outcome"])
MODEL_RESPONSE_SECONDS = Histogram(
    "ongrid_model_response_seconds",
    "Time from a model request sent to its response head arriving (the provider's own latency to the first "
    "byte; every attempt, whatever its status)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0))
MODEL_RETRIES = Counter("ongrid_model_retries_total", "Failed model-call attempts the provider retried, by persona",
                        ["persona"])
MODEL_TOKENS = Counter("ongrid_model_tokens_total", "Tokens the model provider reported, by persona and kind "
                       "(prompt|completion|cached; cached tokens are part of prompt)", ["persona", "kind"])
TEXT_TOOL_CALLS = Counter("ongrid_text_tool_calls_total", "Tool calls a model wrote as text instead of through "
                          "the tools API (the server's tool-call parser is off), by persona and model",
                          ["persona", "model"])
REVIEWS = Counter("ongrid_review_decisions_total", "Review gate decisions", ["decision"])
WS_CLIENTS = Gauge("ongrid_websocket_clients", "Chat socket clients attached now")
STORE_WRITES = Counter("ongrid_store_writes_total", "Queued store writes settled, by kind and outcome "
                       "(committed|failed)", ["kind", "outcome"])
STORE_TRANSACTIONS = Counter("ongrid_store_write_transactions_total",
                             "Transactions (one thread hop each) the store writer committed")
STORE_QUEUE = Gauge("ongrid_store_write_queue", "Store writes waiting for the store writer")


#: labelled children handed out by :func:`labelled` (bounded: past it, labels() every time)
_CHILDREN: dict[tuple[int, tuple[str, ...]], Any] = {}
_CHILDREN_MAX = 10_000


def labelled(metric: M, *values: str) -> M:
    """``metric.labels(*values)``, kept: the hot paths (every store write,
    tool call, worker) look the child up in a dict instead of paying for
    ``labels()``'s checks and lock each time.  Values must be strings.
    Metrics whose children are removed must not go through here."""
    key = (id(metric), values)
    child = _CHILDREN.get(key)
    if child is None:
        child = metric.labels(*values)
        if len(_CHILDREN) < _CHILDREN_MAX:
            _CHILDREN[key] = child
    return child
