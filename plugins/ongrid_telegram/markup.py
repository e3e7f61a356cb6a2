"""Markdown (as the coordinator writes it) → Telegram HTML (``parse_mode: HTML``).

Telegram HTML knows ``b i u s a code pre blockquote``; everything else must
be text with ``& < >`` escaped (``"`` too inside attributes).  Links keep
only http(s)/mailto URLs; a code fence's language becomes
``<code class="language-…">`` when it is a plain word.  Pure functions.
"""

from __future__ import annotations

import html
import re

from ongridd.plugins.api import MarkupStyle

LIMIT = 4096  # characters per Telegram message "after entities parsing": what a reader sees (visible_length)
LANG_RE = re.compile(r"^[A-Za-z0-9_+-]{1,30}\Z")


def escape(text: str) -> str:
    return html.escape(text, quote=False)


def _code_block(code: str, lang: str) -> str:
    cls = f' class="language-{lang}"' if LANG_RE.match(lang or "") else ""
    return f"<pre><code{cls}>{escape(code)}</code></pre>"


STYLE = MarkupStyle(text=escape, code=lambda s: f"<code>{escape(s)}</code>", bold=lambda s: f"<b>{escape(s)}</b>",
                    italic=lambda s: f"<i>{escape(s)}</i>",
                    link=lambda url, text: f'<a href="{html.escape(url, quote=True)}">{escape(text)}</a>',
                    heading=lambda s: f"<b>{s}</b>", code_block=_code_block)


_TAG_RE = re.compile(r"<[^<>]*>")


def visible_length(html_text: str) -> int:
    """How Telegram counts a message sent with ``parse_mode: HTML`` against its 4,096 limit: the text
    after entities parsing (tags dropped, ``&amp;`` one character), in UTF-16 code units (as Telegram
    counts entity offsets: a character outside the BMP is two)."""
    shown = html.unescape(_TAG_RE.sub("", html_text))
    return len(shown) + sum(1 for ch in shown if ord(ch) > 0xFFFF)


def to_html(markdown: str) -> str:
    """The Telegram HTML rendering of ``markdown``."""
    return STYLE.render(markdown)
