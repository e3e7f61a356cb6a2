"""Markdown → sanitised HTML: what models write renders, nothing in it can run."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ongridd.render import _PLAIN_LINE, ALLOWED_TAGS, MARKDOWN_MAX_CHARS, MAX_RENDER_CHARS, _render, markdown_html
from ongridd.runtime import frames


class Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))


def tags_of(html: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    c = Collect()
    c.feed(html)
    return c.tags


def assert_inert(html: str) -> None:
    for tag, attrs in tags_of(html):
        assert tag in ALLOWED_TAGS, (tag, html)
        for name, value in attrs:
            assert name in ("href", "title", "rel", "start", "target"), (name, html)
            if name == "href":
                assert value and not value.strip().lower().startswith(("javascript:", "data:", "vbscript:")), html


def test_markdown_renders():
    html = markdown_html("# Disk\n\n**big** `du -sh` [docs](https://example.org)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
                         "- one\n- two\n\n```\ncode <b>\n```")
    assert "<h1>Disk</h1>" in html and "<strong>big</strong>" in html and "<code>du -sh</code>" in html
    assert '<a href="https://example.org" target="_blank" rel="noopener noreferrer">docs</a>' in html
    assert "<table>" in html and "<li>one</li>" in html and "code &lt;b&gt;" in html
    assert_inert(html)


@pytest.mark.parametrize("link", ["//evil.example/x", "/api/sessions", "#/personas/reviewer", "evil.example",
                                  "http:evil.example", "?q=1", "mailto"])
def test_a_link_without_an_absolute_url_of_an_allowed_scheme_goes_nowhere(link):
    # a model's answer must not take the console's tab to another site, or to one of the console's pages
    html = markdown_html(f"[click]({link}) and <{link}>")
    assert "href" not in html, html
    assert_inert(html)


@pytest.mark.parametrize("link", ["https://example.org/a?b=c#d", "HTTP://EXAMPLE.ORG", "mailto:ops@example.org"])
def test_an_absolute_link_opens_beside_the_console(link):
    html = markdown_html(f"[click]({link})")
    assert f'href="{link}"' in html and 'target="_blank"' in html and 'rel="noopener noreferrer"' in html


def test_a_line_break_in_a_paragraph_is_kept():
    # a reviewer's verdict and its reason, one finding a line: shown on their own lines, as chat tools do
    assert markdown_html("Decision: approve\nReason: the runbook covers it") == (
        "<p>Decision: approve<br>\nReason: the runbook covers it</p>\n")
    assert "<br>" not in markdown_html("one paragraph\n\nanother")


def test_hostile_markdown_is_text():
    for text in ("<script>alert(1)</script>", '<img src=x onerror="alert(1)">', "[x](javascript:alert(1))",
                 "[x](JAVASCRIPT:alert(1))", "<a href='javascript:alert(1)'>y</a>", "[d](data:text/html,<b>)",
                 "<iframe src=https://evil></iframe>", "![pic](https://evil/x.png)", "<style>*{}</style>",
                 "[a](vbscript:x)", '<div onclick="x()">hi</div>', "<svg onload=alert(1)>"):
        html = markdown_html(text)
        assert_inert(html)
        assert "<script" not in html and "<img" not in html and "<iframe" not in html and "<svg" not in html
    assert markdown_html("![pic](https://evil/x.png)") == "<p>[image: pic]</p>\n"
    assert "href" not in markdown_html("[x](javascript:alert(1))")


def test_empty_and_huge():
    assert markdown_html("") == "" and markdown_html(None) == ""
    html = markdown_html("a" * (MAX_RENDER_CHARS + 10))
    assert f"up to {MAX_RENDER_CHARS:,} characters of {MAX_RENDER_CHARS + 10:,}" in html
    deep = markdown_html(">" * 5000 + " x" + "[" * 5000)
    assert_inert(deep)
    assert markdown_html("bad \ud800 text") == "<p>bad \ufffd text</p>\n"


def test_a_long_text_is_shown_as_plain_text_and_rendered_once():
    # markdown-it costs up to ~15 µs a character on markup-dense text, on the event loop: past
    # MARKDOWN_MAX_CHARS the text is escaped into a <pre> instead (linear), inert all the same
    dense = "![" * MARKDOWN_MAX_CHARS + "<script>alert(1)</script>"
    html = markdown_html(dense)
    assert html.startswith(f"<p><em>(shown as plain text: longer than {MARKDOWN_MAX_CHARS:,} characters)</em></p>")
    assert "&lt;script&gt;" in html and "<script" not in html
    assert_inert(html)
    assert "<table>" in markdown_html("| a | b |\n|---|---|\n" + "| x | y |\n" * 1000)  # under the limit: markdown
    # a long text's HTML is remembered: the same object again, without a second render
    report = "## Findings\n\n" + "- web-1: /var/log is 91% full\n" * 200
    assert markdown_html(report) is markdown_html(report)
    assert markdown_html("short **one**") == "<p>short <strong>one</strong></p>\n"


def test_a_long_live_frame_goes_out_as_plain_text_and_the_transcript_renders_it():
    from ongridd.render import FRAME_MARKDOWN_CHARS

    long = "**bold** [x](http://e)\n" * (FRAME_MARKDOWN_CHARS // 20)
    frame = frames.final(long)
    assert frame["html_later"] is True and frame["html"].startswith("<pre>**bold**")
    assert "html_later" not in frames.final("**short**") and "html_later" not in frames.interim("**short**")
    assert frames.agent_result("t", "completed", long)["html_later"] is True
    markdown_html(long)  # the transcript's render (a worker thread) is remembered: live frames then use it
    again = frames.interim(long)
    assert "html_later" not in again and again["html"].startswith("<p><strong>bold</strong>")


def test_frames_carry_html():
    assert frames.final("**a**") == {"type": "final", "text": "**a**", "html": "<p><strong>a</strong></p>\n"}
    assert frames.interim("<b>x</b>")["html"] == "<p>&lt;b&gt;x&lt;/b&gt;</p>\n"
    assert frames.agent_result("t", "completed", "ok")["html"] == "<p>ok</p>\n"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("<>[]()!`*_#-|:/\"'= \nabcjavscriptonerrorimgsrchref&;\ud800")),
               max_size=200))
def test_any_text_renders_inert(text):
    assert_inert(markdown_html(text))


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="abcXYZ019 .,;:!?'\"()%/-", min_size=1, max_size=40))
def test_the_plain_line_shortcut_gives_what_the_renderer_gives(text):
    """A plain one-line answer skips markdown-it and nh3: the HTML must be the same."""
    if _PLAIN_LINE.fullmatch(text):
        assert markdown_html(text) == _render(text)


def test_the_plain_line_shortcut_leaves_markdown_to_the_renderer():
    for text in ("- item", "1. first", "# title", "> quote", "a *b*", "x_y_", "`code`", "[a](http://x)",
                 "a & b", "<b>x</b>", "a | b", "é accent", "two\nlines", "line  "):
        assert not _PLAIN_LINE.fullmatch(text), text
    assert markdown_html("done, 3 files removed (40 GiB).") == "<p>done, 3 files removed (40 GiB).</p>\n"
