"""Markdown → sanitised HTML for the web console (answers, interim messages, worker results).

:func:`markdown_html` renders with markdown-it-py (CommonMark plus tables and
strikethrough, raw HTML in the source disabled, so ``<script>`` in a model's
answer stays text) and then passes the result through nh3 with an allowlist:

- tags: headings, paragraphs, lists, quotes, code, tables, emphasis, links, ``hr``/``br``;
  never ``script``, ``style``, ``img``, ``iframe``, forms or media;
- attributes: ``href``/``title`` on ``a``, ``start`` on ``ol``; no ``style``,
  no event handlers (``on…``) — nothing outside the allowlist survives;
- images are shown as their alt text (``[image: alt]``), never loaded;
- a line break inside a paragraph stays a line break (``<br>``), as in chat tools;
- links: absolute ``http``, ``https`` and ``mailto`` URLs only — a ``javascript:`` or ``data:``
  link loses its ``href``, and so does one without a scheme (``//other.site``, ``/api/...``,
  ``#/personas/x``: it would take the console's tab elsewhere, or to one of its own pages);
  every link gets ``rel="noopener noreferrer"`` and ``target="_blank"`` (it opens beside the
  console, never in its place).

The result is safe to insert with ``innerHTML`` in a page whose
Content-Security-Policy forbids inline script.  Input is bounded, and so is
the time a render takes on the event loop: markdown-it costs up to ~15 µs a
character on markup-dense text (200,000 ``![`` took 3 s here), so text longer
than :data:`MARKDOWN_MAX_CHARS` is shown as escaped plain text in a ``<pre>``
(with a note; escaping is linear and fast), text longer than
:data:`MAX_RENDER_CHARS` is cut (with a note), and a long text's HTML is
remembered (:data:`MEMO_MAX_CHARS` in all), so loading a thread again does
not render its long answers again.  Unpaired surrogates (possible in model
output) become U+FFFD.  Synchronous, no I/O; the renderer is built (and
markdown-it imported) on the first call, once per process; safe from any
thread.  Never raises for any ``str``.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import nh3

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: one line of plain words and punctuation that no markdown rule touches (no emphasis, code,
#: link, HTML, entity, list, heading, quote or table character): its HTML is one paragraph of
#: the text itself, exactly what the renderer and the sanitiser make of it (checked by the tests)
_PLAIN_LINE = re.compile(r"[A-Za-z][A-Za-z0-9 .,;:!?'\"()%/-]*(?<! )")

#: the longest text rendered; the rest is dropped with a visible note
MAX_RENDER_CHARS = 200_000
#: the longest text rendered as markdown; a longer one is shown as plain text (bounded render time)
MARKDOWN_MAX_CHARS = 20_000
#: the longest text a live frame renders as markdown on the event loop (at most ~60 ms on markup-dense
#: text); a longer one goes out as plain text, rendered in full by the transcript (a worker thread)
FRAME_MARKDOWN_CHARS = 4_000
#: texts at least this long have their HTML remembered, up to MEMO_MAX_CHARS characters of text in all
MEMO_MIN_CHARS = 2_000
MEMO_MAX_CHARS = 16_000_000

ALLOWED_TAGS = frozenset({
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "s", "code", "pre",
    "blockquote", "ul", "ol", "li", "a", "table", "thead", "tbody", "tr", "th", "td",
})
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}}
URL_SCHEMES = frozenset({"http", "https", "mailto"})


@functools.cache
def _markdown() -> MarkdownIt:
    from markdown_it import MarkdownIt

    # "commonmark" with html off: raw HTML blocks/inline HTML are escaped as text; a line break in a
    # paragraph is kept (``<br>``), as chat tools show it: answers are often line-oriented ("Decision:
    # approve", then the reason; one finding a line)
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False, "breaks": True})
    md.enable(["table", "strikethrough"])
    md.add_render_rule("image", _image_as_text)
    return md


def _image_as_text(self, tokens, idx, options, env) -> str:  # noqa: ANN001 - markdown-it's rule signature
    """An image is never loaded: it shows as its alt text in brackets."""
    alt = self.renderInlineAsText(tokens[idx].children or [], options, env)
    return _escape(f"[image: {alt}]" if alt else "[image]")


def sanitize_html(html: str) -> str:
    """``html`` cleaned to the allowlist above (nh3/ammonia)."""
    return nh3.clean(
        html,
        tags=set(ALLOWED_TAGS),
        attributes={k: set(v) for k, v in ALLOWED_ATTRIBUTES.items()},
        url_schemes=set(URL_SCHEMES),
        link_rel="noopener noreferrer",
        set_tag_attribute_values={"a": {"target": "_blank"}},
        attribute_filter=_absolute_links,
        strip_comments=True,
    )


_ABSOLUTE_LINK = re.compile(r"(?:https?://|mailto:)\S", re.IGNORECASE)


def _absolute_links(tag: str, attribute: str, value: str) -> str | None:
    """nh3's attribute filter: an ``href`` is kept only when it is an absolute URL of an allowed
    scheme (nh3 then checks the scheme itself again); every other attribute as it is."""
    if attribute == "href" and not _ABSOLUTE_LINK.match(value):
        return None
    return value


def markdown_html(text: str | None) -> str:
    """The sanitised HTML of markdown ``text`` ("" for None or empty text)."""
    if not text:
        return ""
    if len(text) < MEMO_MIN_CHARS:
        if _PLAIN_LINE.fullmatch(text):  # a short plain answer: nothing to render
            return f"<p>{text}</p>\n"
        return _render(text)
    html = _remembered(text)
    if html is None:
        html = _render(text)
        _remember(text, html)
    return html


def frame_html(text: str | None) -> tuple[str, bool]:
    """``(html, later)`` for a live frame, built on the event loop: :func:`markdown_html` when
    ``text`` has at most :data:`FRAME_MARKDOWN_CHARS` characters or was rendered before, else the
    text escaped into a ``<pre>`` (linear, fast) and ``later`` True: the stored transcript has it
    rendered (``GET …/messages`` renders in a worker thread), so many long answers cannot hold the
    loop for seconds."""
    if not text or len(text) <= FRAME_MARKDOWN_CHARS:
        return markdown_html(text), False
    html = _remembered(text)
    if html is not None:
        return html, False
    shown = _LONE_SURROGATE.sub("\ufffd", text[:MAX_RENDER_CHARS])
    return sanitize_html(f"<pre>{_escape(shown)}</pre>\n"), True


#: text → HTML of the long texts rendered lately, least recently used first
_memo: OrderedDict[str, str] = OrderedDict()
_memo_chars = 0
_memo_lock = threading.Lock()


def _remembered(text: str) -> str | None:
    """The HTML remembered for ``text`` (now the most recently used), or None."""
    with _memo_lock:
        html = _memo.get(text)
        if html is not None:
            _memo.move_to_end(text)
        return html


def _remember(text: str, html: str) -> None:
    global _memo_chars
    with _memo_lock:
        if text in _memo:
            return
        _memo[text] = html
        _memo_chars += len(text) + len(html)
        while _memo_chars > MEMO_MAX_CHARS and _memo:
            old, old_html = _memo.popitem(last=False)
            _memo_chars -= len(old) + len(old_html)


def _render(text: str) -> str:
    """:func:`markdown_html` through markdown-it and nh3 (the general path), or as plain text
    past :data:`MARKDOWN_MAX_CHARS`."""
    text = _LONE_SURROGATE.sub("\ufffd", text)  # model output may hold them; the sanitiser needs UTF-8
    total = len(text)
    if total > MARKDOWN_MAX_CHARS:
        shown = text[:MAX_RENDER_CHARS]
        note = (f"shown as plain text: longer than {MARKDOWN_MAX_CHARS:,} characters"
                + (f"; up to {MAX_RENDER_CHARS:,} characters of {total:,}" if total > MAX_RENDER_CHARS else ""))
        return sanitize_html(f"<p><em>({note})</em></p>\n<pre>{_escape(shown)}</pre>\n")
    try:
        rendered = _markdown().render(text)
    except RecursionError:  # pathological nesting: show it as plain text
        rendered = "<pre>" + _escape(text) + "</pre>"
    return sanitize_html(rendered)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


__all__ = ["ALLOWED_TAGS", "FRAME_MARKDOWN_CHARS", "MARKDOWN_MAX_CHARS", "frame_html", "MAX_RENDER_CHARS", "URL_SCHEMES", "markdown_html", "sanitize_html"]
