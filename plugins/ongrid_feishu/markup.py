"""Markdown → a Feishu ``post`` message (one ``md`` element per message).

Feishu renders the ``md`` element's markdown itself; what is made safe
here: links keep only http(s)/mailto URLs (anything else is shown as text
that cannot form a link; ``<`` and ``>`` in a URL are percent-encoded), and
no raw ``<at>`` or other tag from the model's text reaches the platform:
in text, link text and headings every ``<`` becomes a full-width ``＜``;
in inline code and code blocks (where a shell's ``cmd < file`` must stay
as written) a ``<`` that starts a tag (``<at``, ``</x``, ``<!``); a code
block's language keeps only ``[A-Za-z0-9_+#.-]``.  Split at 30,000
characters.
"""

from __future__ import annotations

import json
import re

from ongridd.plugins.api import MarkupStyle

LIMIT = 30_000


_TAG_START = re.compile(r"<(?=[/!?]?[A-Za-z])")
_LANG_DROP = re.compile(r"[^A-Za-z0-9_+#.-]")


def _text(s: str) -> str:
    return s.replace("<", "＜").replace("](", "] (")


def _code(s: str) -> str:
    """Code as written, except a ``<`` that would start a tag."""
    return _TAG_START.sub("＜", s)


def _link(url: str, text: str) -> str:
    return f"[{_text(text.replace(']', ''))}]({url.replace('<', '%3C').replace('>', '%3E')})"


STYLE = MarkupStyle(text=_text, code=lambda s: f"`{_code(s)}`", bold=lambda s: f"**{_text(s)}**",
                    italic=lambda s: f"*{_text(s)}*", link=_link, heading=lambda s: f"**{s}**",
                    code_block=lambda code, lang: f"```{_LANG_DROP.sub('', lang)[:32]}\n{_code(code)}\n```",
                    bullet="- ")


def to_md(markdown: str) -> str:
    """Feishu-safe markdown text."""
    return STYLE.render(markdown)


def post_content(md_text: str) -> str:
    """The ``content`` string of a ``post`` message holding ``md_text``."""
    return json.dumps({"zh_cn": {"content": [[{"tag": "md", "text": md_text}]]}}, ensure_ascii=False)
