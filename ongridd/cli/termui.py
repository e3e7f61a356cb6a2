"""Terminal output shared by ``ongrid chat`` and ``ongrid demo``
(docs/architecture.md §15.1, §17).

- :func:`print_markdown`: an answer's markdown rendered with ``rich`` on a
  terminal; the text as it is when the output is not a TTY (a pipe, a file).
- :class:`TileBoard`: one line per worker tile.  On a terminal the lines are
  redrawn in place (``rich.live.Live``); otherwise each state change of a
  tile is printed once, as one line.

Synchronous, no I/O besides writing to ``out``.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from ongridd.unicodetext import CONTROL_CHARS, valid_text

# what a terminal acts on (see ongridd.unicodetext.CONTROL_CHARS): text from the model or the
# daemon never moves the cursor, sets the clipboard, hides a link or reorders what is read
_UNSAFE = CONTROL_CHARS
_UNSAFE_CHARS = re.compile(f"[{_UNSAFE}]")
#: what JSON text written for a terminal escapes: those, and surrogates left unpaired (which no
#: UTF-8 output can carry)
_ESCAPED_IN_JSON = re.compile(f"[{_UNSAFE}\ud800-\udfff]")


def safe_text(value: Any) -> str:
    """``value`` as a ``str`` fit for a terminal: every control character
    but newline and tab removed (an escape sequence is shown as the plain
    characters that follow ESC), an unpaired surrogate (which a UTF-8 terminal
    cannot be sent) shown as U+FFFD.  Never raises."""
    return valid_text(_UNSAFE_CHARS.sub("", value if isinstance(value, str) else str(value)))


def safe_frame(value: Any) -> Any:
    """A decoded frame with :func:`safe_text` applied to every string in
    it (keys and values, nested), the shape unchanged."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_text(k): safe_frame(v) for k, v in value.items()}
    if isinstance(value, list):
        return [safe_frame(v) for v in value]
    return value


def json_line(frame: Any) -> str:
    """``frame`` as one JSON line with every control character escaped
    (``json.dumps`` with ``ensure_ascii=False`` leaves C1 and the bidi
    controls raw)."""
    import json

    return escape_controls(json.dumps(frame, ensure_ascii=False))


def escape_controls(json_text: str) -> str:
    """JSON text with every character :func:`safe_text` removes, and every unpaired surrogate,
    written as a ``\\uXXXX`` escape instead: the same JSON value (outside strings, JSON text
    holds none of them), printable on any UTF-8 terminal."""
    return _ESCAPED_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text)


STATUS_MARK = {"pending": "○", "running": "▶", "completed": "✓", "failed": "✗", "killed": "■"}


def is_tty(out: Any) -> bool:
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError):
        return False


def _console(out: Any) -> Any:
    from rich.console import Console

    return Console(file=out, force_terminal=True, highlight=False, soft_wrap=False)


def print_markdown(text: str, out: Any = None) -> None:
    """Write ``text`` (markdown) to ``out`` (default stdout): rendered on a
    TTY, verbatim otherwise.  Never raises for any ``str``."""
    out = out or sys.stdout
    text = safe_text(text)
    if not is_tty(out) or not text.strip():
        out.write(text + ("\n" if not text.endswith("\n") else ""))
        out.flush()
        return
    _console(out).print(_markdown(text))
    out.flush()


def _markdown(text: str) -> Any:
    """``text`` as a rich renderable: a link's address shown, not hidden; a line break inside a
    paragraph kept, as the web console and chat tools show it (rich's own parser joins the lines);
    HTML shown as the text it is (rich drops it: ``<none>`` of a kubectl table vanished), a block
    of it as a code block."""
    from rich.markdown import Markdown

    rendered = Markdown(text, hyperlinks=False)
    for token in rendered.parsed:
        if token.type == "html_block":
            token.type, token.tag, token.info = "code_block", "code", ""
        for child in token.children or ():
            if child.type == "softbreak":
                child.type = "hardbreak"
            elif child.type == "html_inline":
                child.type = "text"
    return rendered


def one_line(text: str) -> str:
    """``text`` as one terminal line: line breaks become spaces, then
    :func:`safe_text`.  Never raises for any ``str``."""
    return safe_text(" ".join(text.splitlines()))


def tile_line(frame: dict) -> str:
    """One line for an ``agent_tile`` frame: mark, persona, status, description."""
    status = str(frame.get("status", ""))
    decided = f" → {frame['decision']}" if frame.get("decision") in ("approve", "reject") else ""  # a reviewer's
    indent = "    " if frame.get("parent_task_id") else "  "  # started by a worker: under it
    mark = STATUS_MARK.get(status, "·")
    not_made = frame.get("changes_not_made")
    if isinstance(not_made, int) and not isinstance(not_made, bool) and not_made > 0:  # the gate did not let them run
        mark, decided = "!", f"{decided} · {not_made} change{'s' if not_made != 1 else ''} not made"
    return one_line(f"{indent}{mark} {frame.get('subagent_type')} [{status}{decided}] "
                    f"{frame.get('description', '')}")  # one line, whatever the model named it


def tool_line(frame: dict, *, dispatches: bool = False) -> str | None:
    """One line for a coordinator's finished ``tool`` frame — ``tool NAME: STATUS``, and ``— why``
    for one that did not succeed — or None when there is nothing to say: a call just started, or
    (unless ``dispatches``) an ``AgentTool`` that dispatched: its worker's tile says the rest (a
    failed dispatch has no tile, so it is said)."""
    status, name = str(frame.get("status", "")), str(frame.get("name", ""))
    if status == "started" or (name == "AgentTool" and status == "ok" and not dispatches):
        return None
    why = frame.get("error")
    return one_line(f"tool {name}: {status}" + (f" — {why}" if isinstance(why, str) and why.strip() else ""))


class TileBoard:
    """The worker tiles of the running turn.  ``update(frame)`` takes an
    ``agent_tile`` frame; ``close()`` ends the in-place display (call it at
    the turn's end, before printing the answer)."""

    def __init__(self, out: Any = None):
        self.out = out or sys.stdout
        self.tty = is_tty(self.out)
        self.tiles: dict[str, dict] = {}
        self._live: Any = None
        #: (not a TTY) a reviewer's finished tile held until the gate's decision on it comes (one line
        #: with the decision, not two), or the turn ends
        self._held: dict[str, dict] = {}

    def _renderable(self) -> Any:
        from rich.text import Text

        return Text("\n".join(tile_line(f) for f in self.tiles.values()))

    def update(self, frame: dict) -> None:
        task_id = str(frame.get("task_id"))
        old = self.tiles.get(task_id)
        self.tiles[task_id] = frame
        if not self.tty:
            if old is None or ([old.get(k) for k in ("status", "decision", "changes_not_made")]
                               != [frame.get(k) for k in ("status", "decision", "changes_not_made")]):
                if (frame.get("subagent_type") == "reviewer" and frame.get("status") in ("completed", "failed")
                        and not frame.get("decision")):
                    self._held[task_id] = frame  # the gate's decision follows at once
                    return
                self._held.pop(task_id, None)
                self.out.write(tile_line(frame) + "\n")
                self.out.flush()
            return
        if self._live is None:
            from rich.live import Live

            self._live = Live(self._renderable(), console=_console(self.out), auto_refresh=False,
                              redirect_stdout=False, redirect_stderr=False, transient=False)
            self._live.start()
        self._live.update(self._renderable(), refresh=True)

    @property
    def active(self) -> bool:
        return self._live is not None

    def print_above(self, line: str) -> None:
        """``line`` printed above the live tiles, which are drawn again under it (on a terminal
        with tiles showing); else written as a line of its own."""
        if self._live is not None:
            from rich.text import Text

            self._live.console.print(Text(safe_text(line)))
            self._live.refresh()
            return
        self.out.write(safe_text(line) + "\n")
        self.out.flush()

    def close(self) -> None:
        for frame in self._held.values():  # a reviewer no gate decided on (dispatched on its own)
            self.out.write(tile_line(frame) + "\n")
        if self._held:
            self.out.flush()
            self._held.clear()
        if self._live is not None:
            self._live.stop()
            self._live = None
        self.tiles.clear()
