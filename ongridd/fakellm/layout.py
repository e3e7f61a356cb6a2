"""A tool result laid out as markdown for a person: what the scripted model's ``markdown`` answers hold.

:func:`lay_out` turns one tool result (the text the model received) into markdown a chat page
renders: the tool's name in bold, the result's plain fields on the same line, each list of
records as a table, anything else as indented JSON in a fenced code block.  Generic: nothing
here knows a tool.  A pair of fields ``X_bytes`` and ``X_human`` is shown once, as ``X`` with
the human value; records nested in a record's list field (a folder's ``children``) become the
rows after it, so a tree reads as a table in walk order.  Pure; bounded: at most
:data:`MAX_ROWS` rows a table, :data:`MAX_COLUMNS` columns and :data:`MAX_CELL_CHARS` characters
a cell, :data:`MAX_RECORDS` records walked in all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

MAX_ROWS = 20
MAX_COLUMNS = 8
MAX_CELL_CHARS = 120
MAX_RECORDS = 10_000

_MARKUP = re.compile(r"[\\`*\[\]<>|#]")  # escaped in a cell's text: shown as written, never as markup
_SIZE = re.compile(r"-?\d+(\.\d+)? ?([KMGTPE]i?)?B")


def lay_out(name: str, result: str) -> str:
    """``result`` (a tool's result text) as markdown under ``**name**``: a JSON object's plain
    fields and lists of plain values on the heading's line (``key: value`` apart by `` · ``; an
    empty list left out), each list of records as a
    table (at most :data:`MAX_ROWS` rows, then how many more), its other fields as JSON in a
    fenced code block; a result that is not a JSON object, in a fenced code block (JSON
    indented), the fence longer than any run of backticks in it."""
    try:
        value = json.loads(result)
    except (ValueError, RecursionError):
        return f"**{name}**\n\n{fenced(result, '')}"
    if not isinstance(value, dict):
        return f"**{name}**\n\n{fenced(json.dumps(value, indent=2, ensure_ascii=False), 'json')}"
    facts: list[str] = []
    tables: list[tuple[str, list[dict[str, Any]]]] = []
    rest: dict[str, Any] = {}
    for key, field in _paired(value).items():
        if _is_plain(field):
            if field is not None:
                facts.append(f"{_cell(key)}: {_cell(field)}")
        elif isinstance(field, list) and all(_is_plain(item) for item in field):
            if not field:
                continue  # an empty list says nothing a person needs
            shown = ", ".join(_cell(item) for item in field[:10])
            facts.append(f"{_cell(key)}: {shown}{' …' if len(field) > 10 else ''}")
        elif isinstance(field, list) and all(isinstance(item, Mapping) for item in field):
            tables.append((key, list(_rows(field))))
        else:
            rest[key] = field
    lines = [f"**{name}**" + (" — " + " · ".join(facts) if facts else "")]
    for key, rows in tables:
        lines += ["", f"*{_cell(key)}*", "", *_table(rows)]
    if rest:
        lines += ["", fenced(json.dumps(rest, indent=2, ensure_ascii=False), "json")]
    return "\n".join(lines)


def fenced(text: str, info: str) -> str:
    """``text`` in a fenced code block whose fence is longer than any run of backticks in it."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return f"{fence}{info}\n{text}\n{fence}"


def _is_plain(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _paired(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with each ``X_bytes`` whose ``X_human`` is a string folded into ``X`` (the
    human value, where ``X_bytes`` stood); keys that are not strings as their text."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        key = str(key)
        if key.endswith("_human") and isinstance(value, str) and f"{key[:-6]}_bytes" in record:
            continue  # shown where its _bytes field stands
        if key.endswith("_bytes") and isinstance(record.get(f"{key[:-6]}_human"), str):
            out[key[:-6]] = record[f"{key[:-6]}_human"]
        else:
            out[key] = value
    return out


def _rows(records: list[Any]) -> Iterator[dict[str, Any]]:
    """Each record's fields (paired) with the records in its list fields after it, depth first;
    at most :data:`MAX_RECORDS` in all."""
    stack = list(reversed(records))
    walked = 0
    while stack and walked < MAX_RECORDS:
        record = stack.pop()
        if not isinstance(record, Mapping):
            continue
        walked += 1
        row: dict[str, Any] = {}
        nested: list[Any] = []
        for key, value in _paired(record).items():
            if isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
                nested.extend(value)
            else:
                row[key] = value
        yield row
        stack.extend(reversed(nested))


def _table(rows: list[dict[str, Any]]) -> list[str]:
    """``rows`` as a markdown table: the columns in the order first seen (at most
    :data:`MAX_COLUMNS`), numbers and sizes right-aligned, then how many rows were left out."""
    columns: list[str] = []
    for row in rows:
        columns.extend(key for key in row if key not in columns)
    columns = columns[:MAX_COLUMNS]
    shown = rows[:MAX_ROWS]
    right = [all(_is_number_like(row.get(c)) for row in shown if row.get(c) is not None) for c in columns]
    lines = ["| " + " | ".join(_cell(c) for c in columns) + " |",
             "|" + "|".join("---:" if r else "---" for r in right) + "|"]
    lines += ["| " + " | ".join(_cell(row.get(c), code=True) for c in columns) + " |" for row in shown]
    if len(rows) > len(shown):
        lines += ["", f"… and {len(rows) - len(shown)} more"]
    return lines


def _is_number_like(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, (int, float)) or isinstance(value, str) and _SIZE.fullmatch(value) is not None


def _cell(value: Any, *, code: bool = False) -> str:
    """``value`` as text fit for one table cell or one line: one line, ``|`` escaped, cut at
    :data:`MAX_CELL_CHARS`; with ``code``, a path (a string starting with ``/``) in backticks."""
    if value is None:
        return ""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (str, int, float)):
        text = str(value)
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    text = " ".join(text.split())
    if len(text) > MAX_CELL_CHARS:
        text = text[:MAX_CELL_CHARS] + "…"
    if code and text.startswith("/") and "`" not in text:
        return f"`{text}`".replace("|", "\\|")
    return _MARKUP.sub(r"\\\g<0>", text)
