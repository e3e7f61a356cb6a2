"""Model output is shown as text by ``ongrid ask`` / ``ongrid chat``:
escape sequences (colours, cursor moves, OSC 52 clipboard writes, OSC 8
links), 8-bit C1 controls, carriage returns and bidi overrides never reach
the terminal, and rich markup is printed literally.  Real daemon, real CLI
processes, the scripted model.  docs/architecture.md §15.1."""

from __future__ import annotations

import io
import re
import json
import os

import trio
from rt_helpers import ongrid_cmd, prepare, subprocess_env
from test_rt_process import serve, write_config

from ongridd.cli.common import print_json
from ongridd.cli.termui import json_line, print_markdown, safe_text, tile_line
from ongridd.fakellm import open_fake_llm

HOSTILE = ("ok \x1b]52;c;cm0gLXJmIH4=\x07 clip \x1b[2J\x1b[H wipe \x9b31m red "
           "\x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\ over\rwrite [bold red]markup[/] "
           "\u202eevil\u202c end")
UNSAFE = ["\x1b", "\x9b", "\r", "\x07", "\u202e"]


def test_safe_text_and_non_tty_markdown_strip_controls():
    out = io.StringIO()  # not a TTY
    print_markdown(HOSTILE, out)
    shown = out.getvalue()
    assert not [c for c in UNSAFE if c in shown], repr(shown)
    assert "[bold red]markup[/]" in shown and "\t" in safe_text("a\tb") and "\n" in safe_text("a\nb")
    line = tile_line({"status": "running", "subagent_type": "disk\x1b[2J", "description": "x\n  ✓ forged [done]"})
    assert "\n" not in line and "\x1b" not in line
    dumped = json_line({"text": HOSTILE})
    assert not [c for c in UNSAFE if c in dumped] and json.loads(dumped)["text"] == HOSTILE


def test_cli_json_output_escapes_controls(capsys):
    # what the --json views print (sessions messages, audit, …): the same JSON, nothing a terminal acts on
    print_json([{"content": HOSTILE, HOSTILE: 1}])
    printed = capsys.readouterr().out
    assert not [c for c in UNSAFE if c in printed], repr(printed)
    assert json.loads(printed) == [{"content": HOSTILE, HOSTILE: 1}]
    # an unpaired surrogate goes out escaped: printable as UTF-8, the same value read back
    for dumped in (json_line({"name": "app-\udcff.log\u2028"}),):
        dumped.encode("utf-8")
        assert json.loads(dumped) == {"name": "app-\udcff.log\u2028"} and "\\udcff" in dumped


def test_terminal_markdown_keeps_a_line_break_in_a_paragraph():
    out = io.StringIO()
    out.isatty = lambda: True  # type: ignore[method-assign]
    print_markdown("Decision: reject\nReason: no runbook covers it\n\n- one\n  more", out)
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert "Decision: reject" in lines and "Reason: no runbook covers it" in lines, lines


def test_terminal_markdown_shows_html_as_text():
    # rich drops HTML: "<none>" of a kubectl table, a tag a model wrote, a block of HTML vanished
    out = io.StringIO()
    out.isatty = lambda: True  # type: ignore[method-assign]
    print_markdown("Pods whose NODE is <none> are unscheduled; a < b and x > y.\n\nC: <b>bold</b> end.\n\n"
                   "<script>alert(1)</script>\n\nafter", out)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    for part in ("NODE is <none> are unscheduled", "a < b and x > y", "<b>bold</b> end", "<script>alert(1)</script>",
                 "after"):
        assert part in shown, (part, shown)


async def test_ask_and_chat_show_model_controls_as_text(tmp_path):
    async with open_fake_llm({"default": [{"content": HOSTILE}] * 4}) as fake:
        mapping = prepare(tmp_path)
        mapping["llm"]["base_url"] = fake.base_url
        config = write_config(tmp_path, mapping)
        async with serve(config) as d:
            env = subprocess_env()
            for extra in ([], ["--json"]):
                done = await trio.run_process(ongrid_cmd("ask", "--url", d.url, *extra, "hello"),
                                              capture_stdout=True, capture_stderr=True, env=env, check=False)
                shown = done.stdout.decode()
                assert done.returncode == 0, done.stderr
                assert "markup" in shown
                assert not [c for c in UNSAFE if c in shown], repr(shown)
            # a terminal: rich draws its own colours, but none of the model's sequences get through
            master, slave = os.openpty()
            proc = await trio.lowlevel.open_process(
                ongrid_cmd("chat", "--url", d.url, "--thread", "hostile"), stdin=slave, stdout=slave,
                stderr=slave, env=subprocess_env(COLUMNS="200", TERM="xterm-256color"))
            os.close(slave)
            out = b""
            try:
                with trio.fail_after(30):
                    while b"you> " not in out:
                        out += await trio.to_thread.run_sync(os.read, master, 65536)
                    os.write(master, b"hello\n")
                    while b" end" not in out.split(b"hello", 1)[-1]:
                        out += await trio.to_thread.run_sync(os.read, master, 65536)
            finally:
                proc.kill()
                await proc.wait()
                os.close(master)
            text = out.decode(errors="replace")
            assert "\x1b]52" not in text and "\x1b[2J" not in text and "\x9b" not in text
            assert "evil.example" in text and "\x1b]8;;http://evil" not in text
            assert "\u202e" not in text and "[bold red]markup[/]" in text
