"""query_knowledge: BM25 over the shipped runbooks and over folders the tests write."""

from __future__ import annotations

import os
from pathlib import Path

import ongrid_knowledge
import pytest
import trio

from ongridd.config import Config, KnowledgeConfig
from ongridd.errors import ToolError
from ongridd.plugins.api import PluginContext, Tool, ToolCallContext

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "etc" / "knowledge"
CTX = ToolCallContext(session_id="00000000-0000-0000-0000-000000000002", agent="reviewer")


def knowledge_tool(*dirs: Path | str, **settings: object) -> Tool:
    """The tool as the daemon gets it, through the plugin's hook."""
    registered: list[Tool] = []
    context = PluginContext(config=Config(knowledge=KnowledgeConfig(dirs=tuple(str(d) for d in dirs))),
                            plugin_name="ongrid_knowledge", settings=settings)
    ongrid_knowledge.ongrid_register_tools(register=registered.append, context=context)
    (tool,) = registered
    return tool


async def ask(tool: Tool, query: str, **args: object) -> dict:
    return await tool.handler({"query": query, **args}, CTX)


# ---- the shipped runbooks ----------------------------------------------------


async def test_disk_full_ranks_the_disk_runbook_first():
    result = await ask(knowledge_tool(SHIPPED), "disk full")
    first = result["results"][0]
    assert Path(first["path"]).name == "disk-full.md"
    assert first["title"] == "Runbook: disk full (No space left on device)"
    assert first["matched_terms"] == ["disk", "full"]
    assert result["searched"]["files"] == 3


async def test_nginx_502_restart_rollback_finds_the_sop_passages():
    result = await ask(knowledge_tool(SHIPPED), "nginx 502 restart rollback", top_k=3)
    hits = result["results"]
    assert len(hits) == 3
    assert all(Path(h["path"]).name == "nginx-502.md" for h in hits)
    sections = [h["section"].rsplit(" › ", 1)[-1] for h in hits[:2]]
    assert set(sections) == {"Rollback", "SOP: restart the upstream service behind nginx"}
    rollback = next(h for h in hits if h["section"].endswith("Rollback"))
    assert "nginx -t" in rollback["passage"] and "systemctl restart" in rollback["passage"]
    lines = (SHIPPED / "nginx-502.md").read_text().splitlines()
    assert lines[rollback["line"] - 1] == "## Rollback"
    assert hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"] > 0


async def test_df_shows_free_space_finds_inode_runbook():
    result = await ask(knowledge_tool(SHIPPED), "inodes exhausted df -i", top_k=3)
    assert Path(result["results"][0]["path"]).name == "inode-exhaustion.md"


async def test_words_not_in_any_runbook_give_no_results_and_say_so():
    result = await ask(knowledge_tool(SHIPPED), "kubernetes etcd quorum")
    assert result["results"] == []
    assert "none of the query's words occur in the runbooks" in result["notes"]


# ---- folders written by the tests ------------------------------------------------


async def test_missing_and_empty_folders_are_notes_not_errors(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = tmp_path / "missing"
    result = await ask(knowledge_tool(empty, missing), "disk")
    assert result["results"] == []
    assert f"knowledge folder {missing} does not exist" in result["notes"]
    assert f"no runbooks found in {empty}, {missing}" in result["notes"]


async def test_no_folders_configured_is_an_error():
    with pytest.raises(ToolError, match="set knowledge.dirs"):
        await ask(knowledge_tool(), "disk")


async def test_non_utf8_file_is_skipped_with_a_note(tmp_path):
    (tmp_path / "good.md").write_text("# Certificates\n\nRenew the TLS certificate with certbot renew.\n")
    (tmp_path / "latin1.md").write_bytes(b"# Caf\xe9\n\nRenew the certificate.\n")
    result = await ask(knowledge_tool(tmp_path), "renew certificate")
    assert [Path(h["path"]).name for h in result["results"]] == ["good.md"]
    assert f"skipped {tmp_path / 'latin1.md'}: not valid UTF-8 (byte 0xE9 at offset 5)" in result["notes"]
    assert result["searched"]["files"] == 1


async def test_cjk_runbooks_are_found_by_chinese_and_japanese_queries(tmp_path):
    (tmp_path / "zh-disk.md").write_text(
        "# 磁盘满处理手册\n\n## 排查\n\n使用 df -h 查看磁盘使用率，找出占用空间最大的目录。\n\n"
        "## 清理\n\n清理旧日志文件，释放磁盘空间。\n", encoding="utf-8")
    (tmp_path / "zh-db.md").write_text(
        "# 数据库连接数过高\n\n## 排查\n\n检查连接池配置与慢查询。\n", encoding="utf-8")
    (tmp_path / "ja-net.md").write_text(
        "# ネットワーク障害対応\n\n## 確認\n\nパケットロスと遅延を確認する。\n", encoding="utf-8")
    tool = knowledge_tool(tmp_path)
    result = await ask(tool, "磁盘满了怎么办")
    assert Path(result["results"][0]["path"]).name == "zh-disk.md"
    assert "磁盘满了怎么办" in result["results"][0]["matched_terms"]
    result = await ask(tool, "连接数")
    assert Path(result["results"][0]["path"]).name == "zh-db.md"
    result = await ask(tool, "パケットロス")
    assert Path(result["results"][0]["path"]).name == "ja-net.md"
    assert result["results"][0]["section"] == "ネットワーク障害対応 › 確認"


async def test_index_is_rebuilt_when_files_change(tmp_path):
    runbook = tmp_path / "sub" / "redis.md"
    runbook.parent.mkdir()
    runbook.write_text("# Redis\n\nFlush the cache only with approval.\n")
    tool = knowledge_tool(tmp_path)
    assert (await ask(tool, "redis"))["results"][0]["path"].endswith("redis.md")
    assert (await ask(tool, "failover sentinel"))["results"] == []

    runbook.write_text("# Redis\n\nPromote a replica with a sentinel failover when the primary is lost.\n")
    stat = runbook.stat()
    os.utime(runbook, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    result = await ask(tool, "failover sentinel")
    assert result["results"][0]["path"] == str(tmp_path / "sub" / "redis.md")

    runbook.unlink()
    result = await ask(tool, "redis")
    assert result["results"] == []
    assert result["searched"] == {"files": 0, "passages": 0}


async def test_top_k_default_bounds_and_null(tmp_path):
    for i in range(12):
        (tmp_path / f"rb{i:02d}.md").write_text(f"# Backup {i}\n\nRestore the backup number {i}.\n")
    tool = knowledge_tool(tmp_path)
    assert len((await ask(tool, "backup restore"))["results"]) == 3
    assert len((await ask(tool, "backup restore", top_k=None))["results"]) == 3
    assert len((await ask(tool, "backup restore", top_k=10))["results"]) == 10
    for bad in (0, 11, "3", True):
        with pytest.raises(ToolError, match="'top_k' must be a whole number from 1 to 10"):
            await ask(tool, "backup", top_k=bad)
    with pytest.raises(ToolError, match="'query' must be a non-empty string"):
        await tool.handler({"query": "  "}, CTX)
    assert tool.parameters["properties"]["top_k"]["maximum"] == 10


async def test_long_passage_is_bounded_and_says_so(tmp_path):
    body = " ".join(f"step {i}: check the quota of volume {i}." for i in range(300))
    (tmp_path / "quota.md").write_text(f"# Quota\n\n{body}\n")
    result = await ask(knowledge_tool(tmp_path, passage_chars=500), "quota volume")
    passage = result["results"][0]["passage"]
    assert passage.endswith(f"[… passage cut at 500 of {len(body) + len('# Quota') + 2} characters]")
    assert len(passage) < 600


async def test_concurrent_searches_share_one_index(tmp_path):
    (tmp_path / "a.md").write_text("# Alpha\n\nalpha procedure\n")
    tool = knowledge_tool(tmp_path)
    results: list[dict] = []

    async def one() -> None:
        results.append(await ask(tool, "alpha"))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(one)
    assert [r["results"][0]["title"] for r in results] == ["Alpha"] * 5


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="unknown setting 'passage_size'"):
        knowledge_tool(SHIPPED, passage_size=10)
    with pytest.raises(ValueError,
                       match=r"expected a whole number >= 100 @ config.plugins.settings.ongrid_knowledge.max_files"):
        knowledge_tool(SHIPPED, max_files="many")


def test_a_missing_knowledge_folder_is_told_to_the_operator_once(tmp_path, caplog):
    missing, a_file = tmp_path / "runbooks", tmp_path / "notes.md"
    a_file.write_text("# notes\n")
    with caplog.at_level("WARNING", logger="ongrid_knowledge"):
        knowledge_tool(SHIPPED, missing, a_file)
        knowledge_tool(SHIPPED, missing, a_file)  # a registry reload registers the tool again
    said = [(r.getMessage(), r.ongrid_fields) for r in caplog.records if r.name == "ongrid_knowledge"]
    assert [(m, f["folder"], f["problem"]) for m, f in said] == [
        ("knowledge_folder_missing", str(missing), "does not exist"),
        ("knowledge_folder_missing", str(a_file), "is not a folder")]
    assert "reviewer" in said[0][1]["hint"]
