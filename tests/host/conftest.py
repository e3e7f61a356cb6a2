"""Shared fixtures for the host tools: a plugin context, a call helper that
validates arguments like the runtime does (optionally through the real
review gate with a scripted reviewer), a runner path (ToolRunner + review
gate, as an agent run uses them), and a tree of real files."""

from __future__ import annotations

import json
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
from ongridd.llm.types import ToolCall
from ongridd.plugins.api import PluginContext, ToolCallContext
from ongridd.runtime.gate import ReviewGate
from ongridd.runtime.workers import WorkerOutcome
from ongridd.tools.bag import ToolBag
from ongridd.tools.runner import ToolRunner
from ongridd.tools.spec import ToolResult


def make_tools(hosts=(), settings=None) -> dict:
    context = PluginContext(config=Config(), plugin_name="ongrid_host", settings=settings or {},
                            hosts=(HostConfig(name="local"), *hosts))
    registered = []
    ongrid_host.ongrid_register_tools(register=registered.append, context=context)
    return {t.name: t for t in registered}


class ProposalStore:
    """The store calls the review gate makes, kept in memory."""

    def __init__(self) -> None:
        self.proposals: list[dict] = []
        self.changes: list[dict] = []

    async def record_change_event(self, **row) -> dict:
        self.changes.append(row)
        return row

    async def create_proposal(self, **row) -> str:
        row["id"] = f"proposal-{len(self.proposals) + 1}"
        self.proposals.append(row)
        return row["id"]

    async def decide_proposal(self, proposal_id: str, **decision) -> None:
        next(p for p in self.proposals if p["id"] == proposal_id).update(decision)


def review_gate(answer: str = "Decision: approve\nrunbook covers it (test)") -> tuple[ReviewGate, ProposalStore]:
    """A real :class:`ReviewGate` whose reviewer answers ``answer``."""
    store = ProposalStore()

    async def spawn_reviewer(ctx, brief, description, timeout_s):
        return WorkerOutcome(task_id=f"reviewer-{len(store.proposals)}", persona="reviewer", status="completed",
                             result=answer, finish_reason="stop")

    return ReviewGate(store=store, spawn_reviewer=spawn_reviewer, reviewer_timeout_s=10), store


class Caller:
    """Calls a tool the way the runtime does: nulls dropped, arguments
    validated against the tool's schema, then the handler — with
    ``reviewer`` set, the handler wrapped by the real review gate whose
    reviewer answers that text (``approve()`` for a clean approval)."""

    def __init__(self, tools: dict):
        self.tools = tools
        self.store: ProposalStore | None = None

    async def __call__(self, name: str, args: dict | None = None, *, read_only: bool = False, raw: bool = False,
                       reviewer: str | None = None):
        tool = self.tools[name]
        args = {k: v for k, v in (args or {}).items() if v is not None}
        jsonschema.Draft202012Validator(tool.parameters).validate(args)
        ctx = ToolCallContext(session_id="test-session", agent="specialist-test", read_only=read_only)
        handler = tool.handler
        if reviewer is not None:
            gate, self.store = review_gate(reviewer)
            handler = gate.wrap(tool).handler
        value = await handler(args, ctx)
        if raw:
            return value
        return getattr(value, "value", value)


APPROVE = "Decision: approve\nrunbook covers it (test)"


async def run_through_runner(tools: dict, name: str, args: dict, *, read_only: bool,
                             reviewer: str = "Decision: reject\nnot in a test") -> tuple[ToolResult, ProposalStore]:
    """One call the way an agent run makes it: the real :class:`ToolRunner`
    over a bag whose mutating tools are wrapped by the real review gate."""
    gate, store = review_gate(reviewer)
    tool = tools[name]
    bag = ToolBag(agent="specialist-test", tools={name: gate.wrap(tool) if tool.may_mutate else tool})
    runner = ToolRunner(bag)
    ctx = ToolCallContext(session_id="test-session", agent="specialist-test", read_only=read_only)
    result = await runner.run(ToolCall(id="call-1", name=name, arguments=json.dumps(args)), ctx)
    return result, store


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
