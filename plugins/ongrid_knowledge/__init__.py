"""Ongrid plugin ``ongrid_knowledge``: ``query_knowledge`` over markdown runbooks and SOPs.

Folders come from ``knowledge.dirs`` (searched recursively for ``*.md``).
Ranking is BM25 (the ``bm25s`` library, Lucene variant) over passages — one
per heading section — with English stemming and CJK character bigrams (see
:mod:`ongrid_knowledge.tokens`).  ``plugins.settings.ongrid_knowledge`` may
set ``max_files``, ``max_file_bytes``, ``max_passage_chars`` (index) and
``passage_chars`` (how much of a passage a result shows).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ongrid_knowledge.index import KnowledgeBase
from ongridd.plugins.api import ToolError
from ongridd.plugins.api import PluginContext, Tool, ToolCallContext, get_logger, hookimpl

__all__ = ["make_query_knowledge", "ongrid_register_tools"]

log = get_logger(__name__)

PLUGIN_NAME = "ongrid_knowledge"
DEFAULT_TOP_K = 3
MAX_TOP_K = 10
_SETTINGS = {"max_files": 2000, "max_file_bytes": 1_048_576, "max_passage_chars": 2000, "passage_chars": 1500}

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1,
                  "description": "what to look for, in plain words, e.g. 'nginx 502 restart rollback' or '磁盘满'"},
        "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "default": DEFAULT_TOP_K,
                  "description": f"how many passages to return (1..{MAX_TOP_K}, default {DEFAULT_TOP_K})"},
    },
    "required": ["query"],
    "additionalProperties": False,
}

DESCRIPTION = (
    "Search the team's runbooks and SOPs (markdown) for a procedure. Returns the best matching passages "
    "with their document title, section, file path and line, and a BM25 score (higher is better; compare "
    "scores only within one query). Cite the title when you use a procedure."
)


def _settings(raw: Mapping[str, Any]) -> dict[str, int]:
    where = f"config.plugins.settings.{PLUGIN_NAME}"
    out = dict(_SETTINGS)
    for key, value in (raw or {}).items():
        if key not in out:
            raise ValueError(f"unknown setting {key!r} @ {where} (known: {', '.join(sorted(out))})")
        if isinstance(value, bool) or not isinstance(value, int) or value < 100:
            raise ValueError(f"expected a whole number >= 100 @ {where}.{key}, got {value!r}")
        out[key] = value
    return out


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f"\n[… passage cut at {limit} of {len(text)} characters]"


def make_query_knowledge(base: KnowledgeBase, *, passage_chars: int = 1500) -> Tool:
    """Build the ``query_knowledge`` tool over ``base``.

    The handler returns ``{query, results: [{title, section, path, line,
    score, matched_terms, passage}], searched: {files, passages}, notes?}``
    and raises ToolError when no knowledge folder is configured or the
    arguments are unusable.
    """

    async def handler(args: dict[str, Any], ctx: ToolCallContext | None = None) -> dict[str, Any]:
        args = {k: v for k, v in (args or {}).items() if v is not None}
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query_knowledge: 'query' must be a non-empty string")
        top_k = args.get("top_k", DEFAULT_TOP_K)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            raise ToolError(f"query_knowledge: 'top_k' must be a whole number from 1 to {MAX_TOP_K}, got {top_k!r}")
        if not base.dirs:
            raise ToolError("query_knowledge: no knowledge folders configured; set knowledge.dirs in the "
                            "Ongrid config to folders of markdown runbooks")
        result = await base.search(query, top_k)
        out: dict[str, Any] = {
            "query": query,
            "results": [
                {"title": hit.passage.title, "section": hit.passage.section, "path": hit.passage.path,
                 "line": hit.passage.line, "score": hit.score, "matched_terms": list(hit.matched_terms),
                 "passage": _cut(hit.passage.text, passage_chars)}
                for hit in result.hits
            ],
            "searched": {"files": result.files, "passages": result.passages},
        }
        if result.notes:
            out["notes"] = list(result.notes)
        return out

    return Tool(name="query_knowledge", description=DESCRIPTION, parameters=PARAMETERS, handler=handler,
                tool_class="read", timeout_s=15.0)


@hookimpl
def ongrid_register_tools(register: Any, context: PluginContext) -> None:
    """Register ``query_knowledge`` over ``context.config.knowledge.dirs``."""
    settings = _settings(context.settings or {})
    base = KnowledgeBase(dirs=tuple(context.config.knowledge.dirs), max_files=settings["max_files"],
                         max_file_bytes=settings["max_file_bytes"],
                         max_passage_chars=settings["max_passage_chars"])
    register(make_query_knowledge(base, passage_chars=settings["passage_chars"]))
    for folder in context.config.knowledge.dirs:
        _warn_if_missing(folder)


#: folders already said to be missing (a registry reload registers the tool again)
_WARNED: set[str] = set()


def _warn_if_missing(folder: str) -> None:
    """Tell the operator, once per process, about a knowledge folder that is not there: the
    workers and the reviewer, who checks every proposed change against the runbooks, would
    otherwise search it in silence and find nothing."""
    if folder in _WARNED or os.path.isdir(folder):
        return
    _WARNED.add(folder)
    log.warning("knowledge_folder_missing", folder=folder,
                problem="does not exist" if not os.path.exists(folder) else "is not a folder",
                hint="query_knowledge finds no runbook there, and the reviewer checks proposed changes against "
                     "none of it: create it, or fix knowledge.dirs in the config")
