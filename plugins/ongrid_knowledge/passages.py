"""Split a markdown runbook into passages at its headings.

A passage is one section: a heading and the text up to the next heading (of
any level), outside fenced code blocks.  Text before the first heading is a
passage of its own.  A section longer than ``max_chars`` is cut at blank
lines into several passages with the same section name.  YAML front matter
(``---`` … ``---`` at the top) may give ``title`` and ``tags``.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
from ruamel.yaml.error import YAMLError

from ongridd.plugins.api import load_front_matter

_HEADING_RE = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
SECTION_SEP = " › "


@attrs.frozen(kw_only=True)
class Passage:
    """One searchable piece of a runbook.

    ``title``: the document's title; ``section``: the heading path
    (``"Runbook: nginx 502 › Rollback"``); ``path``: the file as shown to
    users; ``line``: 1-based first line in the file; ``text``: the markdown.
    ``tags``: front-matter tags of the document.
    """

    title: str
    section: str
    path: str
    line: int
    text: str
    tags: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class ParsedDoc:
    title: str
    passages: tuple[Passage, ...]
    notes: tuple[str, ...] = ()


def _front_matter(lines: list[str], path: str) -> tuple[dict[str, Any], int, list[str]]:
    """(mapping, number of lines it used, notes)."""
    if not lines or lines[0].strip() != "---":
        return {}, 0, []
    for end in range(1, len(lines)):
        if lines[end].strip() in ("---", "..."):
            try:
                # bounded: alias bombs, recursive aliases and deep nesting are refused
                data = load_front_matter("\n".join(lines[1:end]))
            except (YAMLError, ValueError, RecursionError) as exc:
                mark = getattr(exc, "problem_mark", None)
                where = f":{mark.line + 2}" if mark is not None else ""
                return {}, end + 1, [f"{path}{where}: front matter is not valid YAML; ignored"]
            return (data if isinstance(data, dict) else {}), end + 1, []
    return {}, 0, []  # no closing line: not front matter, just a rule


def _chunks(body: list[str], max_chars: int) -> list[tuple[int, list[str]]]:
    """Pack the paragraphs of ``body`` into chunks of at most ``max_chars``: (line offset, lines).

    Chunks end at blank lines; a single paragraph longer than ``max_chars``
    is a chunk of its own (a section's heading stays with its first paragraph).
    """
    paragraphs: list[tuple[int, list[str]]] = []
    for i, line in enumerate(body):
        if not line.strip():
            continue
        if paragraphs and i > 0 and body[i - 1].strip():
            paragraphs[-1][1].append(line)
        else:
            paragraphs.append((i, [line]))
    out: list[tuple[int, list[str]]] = []
    size = 0
    for offset, lines in paragraphs:
        length = sum(len(x) + 1 for x in lines)
        heading_only = len(out) == 1 and len(out[0][1]) == 1 and _HEADING_RE.match(out[0][1][0])
        if out and (size + 1 + length <= max_chars or heading_only):
            out[-1][1].extend(["", *lines])
            size += 1 + length
        else:
            out.append((offset, list(lines)))
            size = length
    return out


def split_markdown(text: str, path: str, *, default_title: str, max_chars: int = 2000) -> ParsedDoc:
    """Parse ``text`` (a markdown file shown as ``path``) into passages.

    ``default_title``: used when there is neither a front-matter ``title``
    nor a level-1 heading (typically the file name).  Never raises: bad
    front matter is ignored with a note.
    """
    lines = text.splitlines()
    meta, skip, notes = _front_matter(lines, path)
    title = meta.get("title") if isinstance(meta.get("title"), str) else None
    raw_tags = meta.get("tags")
    # scalars only: str() of a list could expand an alias bomb (`tags: *a8`) to gigabytes
    tags = tuple(str(t) for t in raw_tags if isinstance(t, (str, int, float))) if isinstance(raw_tags, list) else ()

    sections: list[tuple[list[str], int, list[str]]] = []  # (heading path, first line index, lines)
    stack: list[tuple[int, str]] = []
    current: list[str] = []
    current_start = skip
    fence: str | None = None
    for index in range(skip, len(lines)):
        line = lines[index]
        fence_match = _FENCE_RE.match(line)
        if fence_match:
            marker = fence_match.group(1)
            if fence is None:
                fence = marker[0] * 3
            elif marker.startswith(fence):
                fence = None
        heading = _HEADING_RE.match(line) if fence is None else None
        if heading:
            sections.append(([h for _, h in stack], current_start, current))
            level = len(heading.group(1))
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, heading.group(2).strip()))
            if title is None and level == 1:
                title = heading.group(2).strip()
            current, current_start = [line], index
        else:
            current.append(line)
    sections.append(([h for _, h in stack], current_start, current))

    title = title or default_title
    passages = []
    for heads, start, body in sections:
        own_text = body[1:] if heads else body  # a section's first line is its heading
        if not any(line.strip() for line in own_text):
            continue  # a heading with no text of its own
        section = SECTION_SEP.join(heads) if heads else title
        for offset, chunk in _chunks(body, max_chars):
            passages.append(Passage(title=title, section=section, path=path, line=start + offset + 1,
                                    text="\n".join(chunk).strip(), tags=tags))
    return ParsedDoc(title=title, passages=tuple(passages), notes=tuple(notes))
