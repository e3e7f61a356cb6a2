"""The scripted model's example in docs/fake-llm.md, run as the doc says: the answer a user reads
is the worker's report (``content_from_tool_results: reports``), naming the real files its
tools measured."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ongridd.fakellm.layout import MAX_CELL_CHARS, MAX_COLUMNS, MAX_ROWS, lay_out
from ongridd.fakellm.replies import tool_results_since_previous_step
from ongridd.yamlbounds import parse_yaml
from tests.runtime.rt_helpers import open_daemon

DOC = Path(__file__).resolve().parents[2] / "docs" / "fake-llm.md"


def doc_script() -> dict:
    block = re.search(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None, "docs/fake-llm.md has no yaml example"
    return parse_yaml(block.group(1), "docs/fake-llm.md")


async def test_the_doc_example_answers_with_the_workers_report(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "huge-archive.bin").write_bytes(b"\0" * 3_000_000)
    (logs / "small.txt").write_text("x")
    async with open_daemon(tmp_path, doc_script()) as d:
        d.env["DIR"] = str(logs)
        async with d.ws("doc") as c:
            final = await c.ask(f"what is filling {logs}?")
    assert final["type"] == "final", final
    text = final["text"]
    assert "huge-archive.bin" in text and "host_find_large_files" in text, text
    assert '"status"' not in text  # the report, not the AgentTool JSON around it


def test_reports_give_a_worker_report_alone_and_other_results_as_they_are():
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a1", "type": "function", "function": {"name": "AgentTool", "arguments": "{}"}},
        {"id": "a2", "type": "function", "function": {"name": "AgentTool", "arguments": "{}"}},
        {"id": "q1", "type": "function", "function": {"name": "query_knowledge", "arguments": "{}"}}]}
    messages = [{"role": "user", "content": "hi"}, call,
                {"role": "tool", "tool_call_id": "a1", "content": json.dumps({"status": "completed", "result": "r1"})},
                {"role": "tool", "tool_call_id": "a2", "content": json.dumps({"status": "failed", "result": "r2"})},
                {"role": "tool", "tool_call_id": "q1", "content": "found"}]
    assert tool_results_since_previous_step(messages, reports=True) == "r1\n(failed)\nr2\nquery_knowledge: found"
    assert tool_results_since_previous_step(messages).startswith('AgentTool: {"status": "completed"')


def test_markdown_lays_each_result_out_for_a_person_and_gives_a_worker_report_alone():
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a1", "type": "function", "function": {"name": "AgentTool", "arguments": "{}"}},
        {"id": "d1", "type": "function", "function": {"name": "host_du_summary", "arguments": "{}"}},
        {"id": "q1", "type": "function", "function": {"name": "query_knowledge", "arguments": "{}"}}]}
    messages = [{"role": "user", "content": "hi"}, call,
                {"role": "tool", "tool_call_id": "a1", "content": json.dumps({"status": "completed", "result": "r1"})},
                {"role": "tool", "tool_call_id": "d1", "content": json.dumps({"total": 5, "paths": ["/a"]})},
                {"role": "tool", "tool_call_id": "q1", "content": "found ```x``` here"}]
    assert tool_results_since_previous_step(messages, reports=True, markdown=True) == (
        "r1\n\n**host_du_summary** — total: 5 · paths: /a\n\n"
        "**query_knowledge**\n\n````\nfound ```x``` here\n````")


def test_markdown_lays_a_tree_of_records_out_as_one_table_in_walk_order():
    du = {"host": "local", "skipped": [], "paths": [
        {"path": "/d", "allocated_bytes": 30, "allocated_human": "30 B", "files": 3, "children": [
            {"path": "/d/a", "allocated_bytes": 20, "allocated_human": "20 B", "files": 2, "children": [
                {"path": "/d/a/x", "allocated_bytes": 20, "allocated_human": "20 B", "files": 2}]},
            {"path": "/d/b|c", "allocated_bytes": 10, "allocated_human": "10 B", "files": 1}]}],
        "meta": {"took_ms": 4}}
    assert lay_out("host_du_summary", json.dumps(du)) == "\n".join([
        "**host_du_summary** — host: local",
        "",
        "*paths*",
        "",
        "| path | allocated | files |",
        "|---|---:|---:|",
        "| `/d` | 30 B | 3 |",
        "| `/d/a` | 20 B | 2 |",
        "| `/d/a/x` | 20 B | 2 |",
        "| `/d/b\\|c` | 10 B | 1 |",
        "",
        '```json\n{\n  "meta": {\n    "took_ms": 4\n  }\n}\n```'])


def test_markdown_tables_are_bounded_and_their_text_is_never_markup():
    rows = [{"name": f"<b>n{i}</b> *x* | `y`", "n": i, "note": "z" * 500, **{f"c{j}": j for j in range(12)}}
            for i in range(50)]
    text = lay_out("t", json.dumps({"rows": rows, "title": "# not a heading\nsecond line"}))
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert len(table) == 2 + MAX_ROWS and text.endswith(f"… and {50 - MAX_ROWS} more")
    assert all(line.count(" | ") == MAX_COLUMNS - 1 for line in table[2:])  # at most MAX_COLUMNS columns
    assert "\\<b\\>n0\\</b\\> \\*x\\* \\| \\`y\\`" in table[2]  # shown as written, not as markup
    assert "z" * MAX_CELL_CHARS + "…" in table[2] and "z" * (MAX_CELL_CHARS + 1) not in text
    assert text.startswith("**t** — title: \\# not a heading second line\n")  # one line


@pytest.mark.parametrize("result", ["plain text", "[1, 2]", '"a string"', "{bad json"])
def test_markdown_fences_what_is_not_a_json_object(result):
    text = lay_out("tool", result)
    assert text.startswith("**tool**\n\n```") and text.endswith("\n```")
