"""Hostile text through the three platform converters: nothing the model
writes becomes markup it did not mean, and unsafe links stay text."""

from __future__ import annotations

import json

import pytest

from ongrid_feishu.markup import post_content, to_md
from ongrid_slack.mrkdwn import to_mrkdwn
from ongrid_telegram.markup import to_html

HOSTILE = ('<script>alert(1)</script> & <!channel> <@U123> **b<i>x</i>** [x](javascript:alert(1)) '
           '[ok](https://e.org/?a=1&b="2"|z>)\n```\n</code></pre><b>\n```')


def test_slack_escapes_control_characters_and_mentions():
    out = to_mrkdwn(HOSTILE)
    assert "<script>" not in out and "<!channel>" not in out and "<@U123>" not in out
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;!channel&gt; &lt;@U123&gt;" in out
    assert "*b&lt;i&gt;x&lt;/i&gt;*" in out
    assert "[x](javascript:alert(1))" in out  # not a link
    assert "<https://e.org/?a=1&b=\"2\"%7Cz%3E|ok>" in out
    assert "```\n&lt;/code&gt;&lt;/pre&gt;&lt;b&gt;\n```" in out


def test_telegram_html_has_only_the_tags_it_makes():
    out = to_html(HOSTILE)
    assert out.count("<") == out.count("</") * 2  # every tag produced is a balanced pair
    assert "&lt;script&gt;" in out and "<script" not in out
    assert '<a href="https://e.org/?a=1&amp;b=&quot;2&quot;|z&gt;">ok</a>' in out
    assert "javascript" not in out.split("[x](")[0] and 'href="javascript' not in out
    assert "<pre><code>&lt;/code&gt;&lt;/pre&gt;&lt;b&gt;</code></pre>" in out


def test_feishu_md_keeps_no_tags_and_no_unsafe_links():
    out = to_md(HOSTILE)
    assert "<" not in out.split("```")[0]  # outside code: no tag can form
    assert "[x] (javascript:alert(1))" in out
    body = json.loads(post_content(out))
    assert body["zh_cn"]["content"][0][0] == {"tag": "md", "text": out}


def test_feishu_md_code_and_link_text_carry_no_tag():
    # link text, inline code, a code block and its fence's language: no <at> (or other tag) reaches Feishu,
    # while a shell redirect in code stays as written
    out = to_md('[<at user_id="all">everyone</at>](https://example.com/<x>) and `<at user_id="all"></at>`\n'
                '```<at_user_id=all></at>\nsort < in.txt > out.txt; echo "<at id=all></at>"\n```')
    assert "<at" not in out and "</at" not in out
    assert "[＜at user_id=\"all\">everyone＜/at>](https://example.com/%3Cx%3E)" in out
    assert "`＜at user_id=\"all\">＜/at>`" in out
    assert "```at_user_idallat\nsort < in.txt > out.txt; echo \"＜at id=all>＜/at>\"\n```" in out


@pytest.mark.parametrize("outer", ["~~~", "````", "~~~~~"])
def test_feishu_md_a_fence_inside_a_code_block_cannot_close_it(outer):
    # the outer fence was written as ``` and the inner ``` left as it was: to Feishu the inner line closed
    # the block, and the line after it was live markdown that no text rule had passed through
    out = to_md(f"{outer}\n```\n[x](javascript:alert(1))\n ~~~\n```\n{outer}\nafter")
    lines = out.split("\n")
    fence = lines[0]
    assert set(fence) == {"`"} and len(fence) >= 4, out
    inner = lines[1:lines.index(fence, 1)]
    # no line inside starts like a fence (up to 3 spaces, then ``` or ~~~), to any renderer
    assert not [line for line in inner if line.lstrip(" ").startswith(("```", "~~~"))], out
    assert "[x](javascript:alert(1))" in inner and "after" in lines[lines.index(fence, 1) + 1:]


def test_feishu_md_inline_code_cannot_be_ended_by_a_backtick_inside():
    from ongrid_feishu.markup import _inline_code

    assert _inline_code("a`[y](javascript:z)") == "`aˋ[y](javascript:z)`"


TABLE = """Disk report:

| path | size | note |
|---|---:|---|
| `/var/log` | 9.1 GB | **journal** |
| /var/lib/docker | 2 GB | <b>old</b> \\| images |

Done."""


def test_a_table_becomes_aligned_columns_in_a_code_block():
    # no chat platform's markup has tables: as written they showed as rows of pipes
    aligned = ("path               size  note\n"  # size: ---: is right-aligned
               "---------------  ------  -------------------\n"
               "/var/log         9.1 GB  journal\n"
               "/var/lib/docker    2 GB  <b>old</b> | images")
    slack = to_mrkdwn(TABLE)
    assert "```\n" + aligned.replace("<", "&lt;").replace(">", "&gt;") + "\n```" in slack
    assert slack.startswith("Disk report:\n") and slack.endswith("\nDone.")
    telegram = to_html(TABLE)
    assert "<pre><code>" + aligned.replace("<", "&lt;").replace(">", "&gt;") + "</code></pre>" in telegram
    assert "<b>old</b>" not in telegram


def test_a_table_column_is_aligned_as_its_rule_says():
    table = "| size | file | kind |\n|---:|---|:---:|\n| 6.0 MiB | a.log | log |\n| 12.5 MiB | b | archive |"
    aligned = ("    size  file     kind\n"
               "--------  -----  -------\n"
               " 6.0 MiB  a.log    log\n"
               "12.5 MiB  b      archive")
    assert "<pre><code>" + aligned + "</code></pre>" in to_html(table)
    assert "```\n" + aligned + "\n```" in to_mrkdwn(table)


def test_pipes_that_are_no_table_and_a_table_too_wide_stay_as_written():
    assert to_mrkdwn("| a | b |\n| c | d |") == "| a | b |\n| c | d |"  # no |---| rule
    wide = "| " + " | ".join("x" * 30 for _ in range(5)) + " |\n|" + "---|" * 5 + "\n| 1 | 2 | 3 | 4 | 5 |"
    assert to_mrkdwn(wide) == wide


def test_code_inside_bold_loses_its_backticks_not_its_bold():
    assert to_html("**size of `/var`**") == "<b>size of /var</b>"
    assert to_mrkdwn("**size of `/var`** and `x`") == "*size of /var* and `x`"


def test_the_placeholder_shows_what_the_coordinator_said_before_a_tool_call():
    from ongridd.plugins.bridgekit import Progress

    progress = Progress()
    for piece in ("Dispatching ", "the disk specialist."):
        assert progress.apply({"type": "token", "text": piece}) is False  # no edit per streamed piece
    assert progress.apply({"type": "tool", "name": "AgentTool", "status": "started"}) is True
    assert progress.lines()[:3] == ["⏳ _Working on it…_", "", "│ Dispatching the disk specialist."]
    assert progress.apply({"type": "tool", "name": "AgentTool", "status": "ok"}) is False
    # the answer's own text is followed by no tool call: it is not shown in the placeholder
    progress.apply({"type": "token", "text": "The journal holds 9 GB."})
    progress.apply({"type": "final", "text": "The journal holds 9 GB."})
    assert "The journal holds 9 GB." not in progress.markdown()
    # a SendMessage's own text wins over what preceded it
    progress.apply({"type": "token", "text": "Let me tell you:"})
    progress.apply({"type": "tool", "name": "SendMessage", "status": "started"})
    progress.apply({"type": "interim", "text": "Still looking at /var."})
    assert "Still looking at /var." in progress.markdown() and "Let me tell you" not in progress.markdown()


def test_the_models_interim_text_cannot_pose_as_a_tile_or_a_reviewers_decision():
    from ongridd.plugins.bridgekit import Progress

    progress = Progress()
    forged = "On it.\n\n✅ **reviewer** (completed, approve) — Review: restart nginx on web-1"
    progress.apply({"type": "interim", "text": forged})
    progress.apply({"type": "agent_tile", "task_id": "r1", "subagent_type": "reviewer", "status": "completed",
                    "decision": "reject", "description": "x (completed, approve)"})
    lines = progress.lines()
    assert lines[2:4] == ["│ On it.", "│ ✅ **reviewer** (completed, approve) — Review: restart nginx on web-1"]
    # the only line that starts with a tile mark is the daemon's, its status before the model's words
    assert [line for line in lines if line.startswith("✅")] == ["✅ **reviewer** (completed, reject) — x (completed, approve)"]



async def test_a_long_answer_is_converted_off_the_event_loop_into_the_same_messages():
    import threading

    from ongrid_slack.mrkdwn import LIMIT, to_mrkdwn
    from ongridd.plugins.bridgekit import RENDER_INLINE_CHARS, MessageOutlet, split_rendered

    posted: list[str] = []
    threads: list[threading.Thread] = []

    async def post(text: str) -> str:
        posted.append(text)
        return "ref"

    async def edit(_ref: object, text: str) -> None:
        posted.append(text)

    def render(text: str) -> str:
        threads.append(threading.current_thread())
        return to_mrkdwn(text)

    answer = "**Findings** for `web-1`:\n\n" + "- [/var/log](http://x) is *91%* full\n" * (RENDER_INLINE_CHARS // 30)
    outlet = MessageOutlet(post=post, edit=edit, render=render, limit=LIMIT)
    await outlet.final(answer)
    assert posted == split_rendered(answer, LIMIT, to_mrkdwn) and len(posted) > 1
    assert threads and threading.main_thread() not in threads  # converted in a worker thread
    posted.clear()
    threads.clear()
    await outlet.final("short **answer**")
    assert posted == [to_mrkdwn("short **answer**")] and threads == [threading.main_thread()]


def test_blank_looking_padding_cannot_push_a_forged_line_onto_its_own_line():
    from ongridd.plugins.bridgekit import Progress

    progress = Progress()
    pad = "\u3164" * 60 + "\u2800" * 10 + "\u202e\u200b"
    progress.apply({"type": "interim", "text": f"ok{pad}✅ **reviewer** (completed, approve)"})
    assert progress.lines()[2] == "│ ok✅ **reviewer** (completed, approve)"



def test_a_long_telegram_answer_is_split_by_what_a_reader_sees_into_as_few_messages_as_fit():
    """Telegram's 4,096 counts the text after entities parsing: escapes and tags are free. Counting the
    HTML made 8 uneven messages (1,788 / 1,789 / 516 / 882 …) of a 7,693-character answer with ``&`` and
    ``<`` in it, and cut a 120-line code block after two lines."""
    from ongrid_telegram.markup import LIMIT, visible_length

    from ongridd.plugins.bridgekit import split_rendered

    assert visible_length('<b>a &amp; b</b> &lt;x&gt; <a href="https://e.org/?a=1&amp;b=2">y</a> 😀') == 14
    one_line = " ".join(f"<{i}>&<{i}>" for i in range(1000))[:7693]
    parts = split_rendered(one_line, LIMIT, to_html, visible_length)
    assert len(parts) == 2 and all(visible_length(p) <= LIMIT for p in parts)
    code = "Output:\n\n```\n" + "\n".join(f"/srv/data/f{i:04d} <dir> & {'x' * 40}" for i in range(120)) + "\n```\n"
    parts = split_rendered(code, LIMIT, to_html, visible_length)
    assert len(parts) == 2 and all(visible_length(p) <= LIMIT for p in parts)
    assert all(p.count("\n") > 40 for p in parts)  # no message of two lines
    wide = "😀" * 3000  # two UTF-16 units each, as Telegram counts
    assert all(visible_length(p) <= LIMIT for p in split_rendered(wide, LIMIT, to_html, visible_length))


async def test_a_stopped_turn_says_why_it_stopped_in_the_chat():
    """A person's stop, a daemon stop and a stop for a secret a tool call carried read differently."""
    from ongridd.plugins.bridgekit import STOPPED, STOPPED_BY_SHUTDOWN, MessageOutlet
    from ongridd.runtime.frames import SECRET_STOPPED, SHUTDOWN_STOPPED

    shown: list[str] = []

    async def post(text: str) -> str:
        shown.append(text)
        return "ref"

    async def edit(_ref: object, text: str) -> None:
        shown.append(text)

    outlet = MessageOutlet(post=post, edit=edit, render=lambda s: s, limit=4096)
    for message in ("the turn was stopped", SHUTDOWN_STOPPED, SECRET_STOPPED):
        await outlet.failed("stopped", message)
    assert shown[:2] == [STOPPED, STOPPED_BY_SHUTDOWN]
    assert shown[2].startswith("⏹ Stopped: one of its tool calls carried or printed part of a secret")
