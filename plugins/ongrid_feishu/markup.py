"""Markdown → a Feishu ``post`` message (one ``md`` element per message).

Feishu renders the ``md`` element's markdown itself; what is made safe
here: links keep only http(s)/mailto URLs (anything else is shown as text
that cannot form a link), and no raw ``<at>`` or other tag from the
model's text reaches the platform (``<`` becomes a full-width ``＜``).
Split at 30,000 characters.
"""

from __future__ import annotations

import json

from ongridd.plugins.api import MarkupStyle

LIMIT = 30_000


def _text(s: str) -> str:
    return s.replace("<", "＜").replace("](", "] (")


STYLE = MarkupStyle(text=_text, code=lambda s: f"`{s}`", bold=lambda s: f"**{_text(s)}**",
                    italic=lambda s: f"*{_text(s)}*", link=lambda url, text: f"[{text.replace(']', '')}]({url})",
                    heading=lambda s: f"**{s}**", code_block=lambda code, lang: f"```{lang}\n{code}\n```",
                    bullet="- ")


def to_md(markdown: str) -> str:
    """Feishu-safe markdown text."""
    return STYLE.render(markdown)


def post_content(md_text: str) -> str:
    """The ``content`` string of a ``post`` message holding ``md_text``."""
    return json.dumps({"zh_cn": {"content": [[{"tag": "md", "text": md_text}]]}}, ensure_ascii=False)
