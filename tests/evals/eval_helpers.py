"""A tiny suite written into a temp folder for the harness tests."""

from __future__ import annotations

import json
from pathlib import Path

INCIDENT = {
    "name": "tiny-disk",
    "question": "db-2 is out of disk, why?",
    "hosts": [{"name": "db-2", "labels": {"role": "db"}}],
    "fixtures": [
        {"tool": "host_du_summary", "match": {"host": "db-2"},
         "result": {"host": "db-2", "paths": [{"path": "/var/lib/postgresql/15/main/pg_wal", "allocated_human": "305.0 GiB"}]}},
        {"tool": "host_bash", "match": {"host": "db-2"},
         "result": {"host": "db-2", "exit_code": 0, "stdout": "analytics_cdc|logical|f|303 GB\n"}},
    ],
    "expected": {"root_cause": ["db-2", "pg_wal", "analytics_cdc"], "distractors": ["db-20"], "max_tool_calls": 3},
}

BRIEF = {"name": "AgentTool", "arguments": {"description": "disk on db-2", "subagent_type": "specialist-disk",
                                            "prompt": "db-2: find what fills /var/lib/postgresql"}}
DU = {"name": "host_du_summary", "arguments": {"host": "db-2", "paths": ["/var/lib/postgresql"], "depth": 2}}
SLOTS = {"name": "host_bash", "arguments": {"host": "db-2", "cmd": "psql -XAt -c 'select * from pg_replication_slots'"}}

SCRIPTS = {
    # the answer is built from the recorded results: F1 1.0
    "solve": {"default": [{"tool_calls": [BRIEF]}, {"content_from_tool_results": True}],
              "specialist-disk": [{"tool_calls": [DU, SLOTS]}, {"content_from_tool_results": True}]},
    # "solve" with explicit usage on every step: the report's tokens are exactly these sums
    "metered": {"default": [{"tool_calls": [BRIEF], "usage": {"prompt_tokens": 500, "completion_tokens": 40,
                                                              "cached_tokens": 256}},
                            {"content_from_tool_results": True,
                             "usage": {"prompt_tokens": 900, "completion_tokens": 60}}],
                "specialist-disk": [{"tool_calls": [DU, SLOTS], "usage": {"prompt_tokens": 300, "completion_tokens": 20,
                                                                          "cached_tokens": 128}},
                                    {"content_from_tool_results": True,
                                     "usage": {"prompt_tokens": 450, "completion_tokens": 30}}]},
    # blames the wrong host: nothing expected found, a distractor found
    "wrong": {"default": [{"content": "It is db-20's backup job; nothing to do with WAL."}]},
    # re-asks with ever new arguments: 5 calls against max_tool_calls 3
    "loop": {"default": [{"tool_calls": [BRIEF]}, {"content_from_tool_results": True}],
             "specialist-disk": [
                 *({"tool_calls": [{"name": "host_du_summary", "arguments": {
                     "host": "db-2", "paths": ["/var/lib/postgresql"], "depth": d}}]} for d in (1, 2, 3, 4, 5)),
                 {"content": "db-2: pg_wal is big, slot analytics_cdc."}]},
    # a call no fixture answers, and a model error the provider retries
    "unrecorded": {"default": [{"http_status": 500}, {"tool_calls": [BRIEF]}, {"content_from_tool_results": True}],
                   "specialist-disk": [
                       {"tool_calls": [{"name": "host_du_summary", "arguments": {"host": "db-20", "paths": ["/srv"]}}]},
                       {"content": "db-2: no data."}]},
}


def write_suite(folder: Path, names=("solve",)) -> Path:
    """One incident per script name (``tiny-<name>``), scripts in ``scripts/``."""
    (folder / "scripts").mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / "scripts" / f"{name}.yaml").write_text(json.dumps(SCRIPTS[name]), encoding="utf-8")
        incident = {**INCIDENT, "name": f"tiny-{name}", "script": f"scripts/{name}.yaml"}
        (folder / f"tiny-{name}.yaml").write_text(json.dumps(incident), encoding="utf-8")
    return folder
