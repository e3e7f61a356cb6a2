"""The AgentTool result stays valid JSON whatever the worker's answer length.

The tool runner cuts every result text to ``limits.tool_result_max_chars``;
cutting a serialised JSON object there would leave broken JSON.  So the
worker's answer is cut *inside* the ``result`` string (with the marker of
:func:`ongridd.tools.truncate.marker`, which carries the original length)
until the whole object, serialised as the runner does it, fits.
"""

from __future__ import annotations

import json
from typing import Any

from ongridd.tools.truncate import MIN_MAX_CHARS, truncate_result

#: room left below the limit for the redaction pass (a replaced secret may grow)
SAFETY_MARGIN_CHARS = 64


def serialised_len(body: dict[str, Any]) -> int:
    """Length in characters of ``body`` as the tool runner serialises it."""
    return len(json.dumps(body, ensure_ascii=False, default=str))


def fit_result(body: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """``body`` with its ``result`` string cut (head + marker + tail) so the
    serialised object has at most ``max_chars - SAFETY_MARGIN_CHARS``
    characters.  Returns a new dict; ``body`` is not changed.  JSON escaping
    (quotes, newlines, control characters) is accounted for by measuring
    the serialised form and shrinking again, at most a few rounds; when
    even an empty result cannot fit, the result is the marker alone cut as
    short as the truncation allows.  Pure; raises nothing for str results.
    """
    out = dict(body)
    text = out.get("result")
    if not isinstance(text, str):
        return out
    limit = max(max_chars - SAFETY_MARGIN_CHARS, MIN_MAX_CHARS)
    if serialised_len(out) <= limit:
        return out
    overhead = serialised_len({**out, "result": ""})
    target = limit - overhead  # characters the encoded result string may take
    room = target
    for _ in range(12):
        room = max(room, MIN_MAX_CHARS)
        out["result"] = truncate_result(text, room)
        encoded = serialised_len(out) - overhead
        if encoded <= target or room == MIN_MAX_CHARS:
            break
        # escaping makes the encoded form longer than the text: shrink in proportion
        room = min(room - 1, int(room * target / encoded))
    return out
