"""Markdown (as the coordinator writes it) → Slack ``mrkdwn``.

Slack text needs ``&``, ``<`` and ``>`` escaped everywhere (also in code);
bold is ``*x*``, italic ``_x_``, links ``<url|text>``, headings have no
markup of their own (shown bold), code fences keep ``````` but no language.
Pure functions, bounded by the input (one pass per line).
"""

from __future__ import annotations

from ongridd.plugins.api import MarkupStyle

LIMIT = 3900  # characters per Slack message


def escape(text: str) -> str:
    """Slack's three control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _link(url: str, text: str) -> str:
    safe_url = url.replace("|", "%7C").replace(">", "%3E").replace("<", "%3C")
    return f"<{safe_url}|{escape(text.replace('|', '/'))}>"


STYLE = MarkupStyle(text=escape, code=lambda s: f"`{escape(s)}`", bold=lambda s: f"*{escape(s)}*",
                    italic=lambda s: f"_{escape(s)}_", link=_link, heading=lambda s: f"*{s}*",
                    code_block=lambda code, lang: f"```\n{escape(code)}\n```")


def to_mrkdwn(markdown: str) -> str:
    """The Slack rendering of ``markdown``."""
    return STYLE.render(markdown)
