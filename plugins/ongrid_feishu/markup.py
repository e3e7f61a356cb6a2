"""Markdown → a Feishu ``post`` message (one ``md`` element per message).

Feishu renders the ``md`` element's markdown itself; what is made safe
here: links keep only http(s)/mailto URLs (anything else is shown as text
that cannot form a link; ``<`` and ``>`` in a URL are percent-encoded), and
no raw ``<at>`` or other tag from the model's text reaches the platform:
in text, link text and headings every ``<`` becomes a full-width ``＜``;
in inline code and code blocks (where a shell's ``cmd < file`` must stay
as written) a ``<`` that starts a tag (``<at``, ``</x``, ``<!``); a code
block's language keeps only ``[A-Za-z0-9_+#.-]``; nothing inside a code
block or inline code can end it (a fence line inside, a backtick).  Split at
30,000 characters.
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


#: a line inside a code block that a renderer could take for the block's closing fence
_INNER_FENCE = re.compile(r"^( {0,3})(?=```|~~~)", re.MULTILINE)


def _code_block(code: str, lang: str) -> str:
    """A fenced block that nothing inside can close: a line of the code that starts like a fence
    gets a zero-width space in front (it is no fence then, to any renderer), and the fence is
    longer than any run of backticks inside (CommonMark's own rule, for renderers that keep it)."""
    code = _INNER_FENCE.sub("\\1\u200b", _code(code))
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", code)), default=0))
    return f"{fence}{_LANG_DROP.sub('', lang)[:32]}\n{code}\n{fence}"


def _inline_code(s: str) -> str:
    """Inline code that nothing inside can end: a backtick in it is shown as ``ˋ`` (U+02CB), as a
    run of backticks' own fences are not rendered alike everywhere."""
    return f"`{_code(s).replace('`', 'ˋ')}`"


def _link(url: str, text: str) -> str:
    return f"[{_text(text.replace(']', ''))}]({url.replace('<', '%3C').replace('>', '%3E')})"


STYLE = MarkupStyle(text=_text, code=_inline_code, bold=lambda s: f"**{_text(s)}**",
                    italic=lambda s: f"*{_text(s)}*", link=_link, heading=lambda s: f"**{s}**",
                    code_block=_code_block, bullet="- ")


def to_md(markdown: str) -> str:
    """Feishu-safe markdown text."""
    return STYLE.render(markdown)


def post_content(md_text: str) -> str:
    """The ``content`` string of a ``post`` message holding ``md_text``."""
    return json.dumps({"zh_cn": {"content": [[{"tag": "md", "text": md_text}]]}}, ensure_ascii=False)
