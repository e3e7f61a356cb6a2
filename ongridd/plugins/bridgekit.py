"""Shared pieces of the channel bridges (exported by ``ongridd.plugins.api``).

- :func:`split_text`: cut a markdown answer into chunks of at most ``limit``
  characters without breaking a fenced code block (a fence cut in two is
  closed at the end of one chunk and reopened at the start of the next).
- :func:`split_rendered`: the same for a text that is converted to platform
  markup afterwards (the converted chunk must fit, escaping included).
- :func:`markdown_blocks` / :func:`inline_spans`: a small, bounded markdown
  reader (fences, inline code, bold, italic, links, headings) the platform
  converters render from.
- :class:`PlatformHTTP`: platform API calls with bounded retries: HTTP 429
  waits ``Retry-After`` (capped), 5xx and transport errors back off; after
  the last attempt :class:`PlatformError`.  Logs name the call, never the URL
  (a Telegram URL carries the bot token) or the payload.
- :class:`Progress` and :func:`relay_turn`: follow a turn's frames and keep
  one placeholder message edited with SendMessage text and agent tiles,
  throttled; then hand over the final answer or the error.

Cancellation: every coroutine here may be cancelled at any await; nothing
is left half-registered (the relay just stops editing).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

import attrs
import trio

from ongridd.logs import get_logger
from ongridd.runtime.frames import SECRET_STOPPED, SHUTDOWN_STOPPED
from ongridd.unicodetext import visible_text, without_controls

log = get_logger(__name__)

FENCE_RE = re.compile(r"^\s{0,3}(`{3,}|~{3,})(.*)$")
MAX_ANSWER_CHARS = 200_000  # longer answers are cut (bounded work per turn)


# ---- splitting -----------------------------------------------------------------


def _lines_with_fences(text: str) -> Iterator[tuple[str, str | None]]:
    """``(line with its newline, the opening line of the fence still open
    after this line, or None)``."""
    fence: str | None = None
    marker = ""
    for line in text.splitlines(keepends=True):
        m = FENCE_RE.match(line.rstrip("\n"))
        if m and fence is None:
            fence, marker = line.strip(), m.group(1)
        elif m and m.group(1)[0] == marker[0] and len(m.group(1)) >= len(marker) and not m.group(2).strip():
            fence = None
        yield line, fence


def _closer(fence: str | None) -> str:
    if fence is None:
        return ""
    m = FENCE_RE.match(fence)
    return "\n" + (m.group(1) if m else "```")


def split_text(text: str, limit: int) -> list[str]:
    """Chunks of at most ``limit`` characters (``limit`` >= 40), cut at line
    ends where possible; a code block cut in two is closed and reopened so
    each chunk renders on its own (a block left open at the end of a long
    text is closed as well).  ``[]`` for empty text."""
    if limit < 40:
        raise ValueError("limit: at least 40 characters")
    text = text[:MAX_ANSWER_CHARS].strip("\n")
    if not text.strip():
        return []
    if len(text) <= limit:
        return [text]
    chunks: list[str] = []
    cur = ""
    fresh = True  # cur holds nothing but a reopened fence
    fence: str | None = None  # the fence open at the end of cur

    def flush() -> None:
        nonlocal cur, fresh
        if not fresh:
            chunks.append(cur.rstrip("\n") + _closer(fence))
        cur, fresh = (fence[: limit // 4 - 1] + "\n") if fence else "", True  # the fence line, bounded

    for line, fence_after in _lines_with_fences(text):
        if len(cur) + len(line) + len(_closer(fence_after)) > limit:
            flush()
        while len(cur) + len(line) + len(_closer(fence_after)) > limit:  # a line longer than a chunk
            room = max(limit - len(cur) - len(_closer(fence)), 1)
            cut = line.rfind(" ", 0, room)
            cut = cut if cut > room // 2 else room
            piece, line = line[:cut], line[cut:]
            if fence is None:
                line = line.lstrip(" ")
            cur, fresh = cur + piece, False
            flush()
        cur += line
        fresh = fresh and not line.strip()
        fence = fence_after
    if not fresh:
        chunks.append(cur.rstrip("\n") + _closer(fence))  # an unclosed block is closed too
    return [c for c in chunks if c.strip()]


def split_rendered(text: str, limit: int, render: Callable[[str], str],
                   measure: Callable[[str], int] = len) -> list[str]:
    """``render`` applied to chunks of ``text`` so every rendered chunk measures
    at most ``limit`` (``measure``: how the platform counts a message, by default
    its characters, markup and escapes included)."""
    out: list[str] = []
    pending = split_text(text, limit)
    budget = limit
    while pending:
        chunk = pending.pop(0)
        rendered = render(chunk)
        size = measure(rendered)
        if size <= limit:
            out.append(rendered)
            continue
        budget = max(40, min(budget, len(chunk)) * limit // max(size, 1) - 10)
        if budget <= 40 and len(chunk) <= 40:
            out.append(rendered[:limit])  # pathological: 40 characters still too long rendered
            continue
        pending[:0] = split_text(chunk, max(40, budget))
    return out


# ---- a small markdown reader ----------------------------------------------------


@attrs.frozen
class Block:
    """``kind``: ``code`` (``text`` = the code, ``lang``) or ``text`` (markdown lines)."""

    kind: str
    text: str
    lang: str = ""


def markdown_blocks(text: str) -> list[Block]:
    """Split markdown into fenced code blocks and the text between them
    (an unclosed fence runs to the end)."""
    blocks: list[Block] = []
    buf: list[str] = []
    fence: str | None = None
    lang = ""
    for line in text.splitlines():
        m = FENCE_RE.match(line)
        if fence is None and m:
            if buf:
                blocks.append(Block("text", "\n".join(buf)))
            buf, fence, lang = [], m.group(1), m.group(2).strip()[:30]
        elif fence is not None and m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                and not m.group(2).strip():
            blocks.append(Block("code", "\n".join(buf), lang))
            buf, fence = [], None
        else:
            buf.append(line)
    if buf or fence is not None:
        blocks.append(Block("code" if fence is not None else "text", "\n".join(buf), lang))
    return blocks


_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_TABLE_RULE = re.compile(r"^\s*\|?(\s*:?-{3,}:?\s*\|)+(\s*:?-{3,}:?\s*)?\|?\s*$")
#: a table wider than this many characters is left as it was written (a code block would only wrap)
TABLE_MAX_WIDTH = 120


def _cells(row: str) -> list[str]:
    inner = row.strip()[1:-1]
    cells = re.split(r"(?<!\\)\|", inner)
    # the markup a cell may hold would show as written inside a code block
    return [re.sub(r"\*\*|__|`", "", c.replace("\\|", "|")).strip() for c in cells]


def _alignments(rule: str, columns: int) -> list[str]:
    """Each column's alignment from a table's ``|---|`` rule: ``---:`` right, ``:---:`` centre,
    anything else left."""
    marks = [c.strip() for c in rule.strip().strip("|").split("|")]
    out = ["right" if m.endswith(":") and not m.startswith(":") else "centre" if m.startswith(":") and
           m.endswith(":") else "left" for m in marks]
    return (out + ["left"] * columns)[:columns]


def _aligned(cell: str, width: int, alignment: str) -> str:
    return cell.rjust(width) if alignment == "right" else cell.center(width) if alignment == "centre" \
        else cell.ljust(width)


def table_text(rows: list[str]) -> str | None:
    """A GFM table (a header row, a ``|---|`` rule, body rows) as plain text in columns aligned
    as the rule says (``---:`` right, ``:---:`` centre, else left), or None when it is not one or
    would be wider than TABLE_MAX_WIDTH."""
    if len(rows) < 2 or not _TABLE_RULE.match(rows[1]):
        return None
    table = [_cells(r) for r in (rows[0], *rows[2:])]
    columns = max(len(r) for r in table)
    table = [r + [""] * (columns - len(r)) for r in table]
    widths = [max(len(r[i]) for r in table) for i in range(columns)]
    if sum(widths) + 2 * (columns - 1) > TABLE_MAX_WIDTH:
        return None
    alignments = _alignments(rows[1], columns)
    lines = ["  ".join(_aligned(c, w, a) for c, w, a in zip(r, widths, alignments)).rstrip() for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def text_and_tables(lines: list[str]) -> list[tuple[str, str]]:
    """``lines`` cut into ``("text", lines)`` and ``("table", aligned text)`` pieces, in order
    (one pass; a run of ``| … |`` lines that is no table stays text)."""
    out: list[tuple[str, str]] = []
    text: list[str] = []
    i = 0
    while i < len(lines):
        if _TABLE_ROW.match(lines[i]):
            j = i
            while j < len(lines) and _TABLE_ROW.match(lines[j]):
                j += 1
            table = table_text(lines[i:j])
            if table is not None:
                if text:
                    out.append(("text", "\n".join(text)))
                    text = []
                out.append(("table", table))
            else:
                text.extend(lines[i:j])
            i = j
        else:
            text.append(lines[i])
            i += 1
    if text or not out:
        out.append(("text", "\n".join(text)))
    return out


INLINE_RE = re.compile(
    r"(?P<code>`[^`\n]+`)"
    r"|(?P<link>\[(?P<ltext>[^\]\n]{1,500})\]\((?P<url>[^)\s]{1,2000})\))"
    r"|(?P<bold>\*\*(?P<btext>[^*\n]+?)\*\*|__(?P<btext2>[^_\n]+?)__)"
    r"|(?P<italic>(?<![\w*])\*(?P<itext>[^*\n]+?)\*(?![\w*])|(?<!\w)_(?P<itext2>[^_\n]+?)_(?!\w))"
)
HEADING_RE = re.compile(r"^\s{0,3}#{1,6}\s+(.*)$")
SAFE_URL_RE = re.compile(r"^(https?://|mailto:)", re.I)


def inline_spans(line: str) -> list[tuple[str, str, str]]:
    """``(kind, text, url)`` spans of one line: ``plain``, ``code``, ``bold``,
    ``italic``, ``link`` (links with a scheme other than http(s)/mailto are
    plain text)."""
    out: list[tuple[str, str, str]] = []
    pos = 0
    for m in INLINE_RE.finditer(line):
        if m.start() > pos:
            out.append(("plain", line[pos:m.start()], ""))
        if m.group("code"):
            out.append(("code", m.group("code")[1:-1], ""))
        elif m.group("link"):
            url = m.group("url")
            if SAFE_URL_RE.match(url):
                out.append(("link", m.group("ltext"), url))
            else:
                out.append(("plain", m.group(0), ""))
        elif m.group("bold"):
            out.append(("bold", m.group("btext") or m.group("btext2") or "", ""))
        else:
            out.append(("italic", m.group("itext") or m.group("itext2") or "", ""))
        pos = m.end()
    if pos < len(line):
        out.append(("plain", line[pos:], ""))
    return out


def heading_text(line: str) -> str | None:
    """The text of a markdown heading line, else None."""
    m = HEADING_RE.match(line)
    return m.group(1).strip() if m else None


# ---- platform HTTP -----------------------------------------------------------------


class PlatformError(Exception):
    """A platform API call failed for good (after the bounded retries)."""


@attrs.define
class BotIdentity:
    """What the platform says the bot itself is (its user id, open_id…),
    asked once and kept: ``await get()`` runs ``fetch()`` (async; returns
    the value, or None when the answer does not give it; raises
    PlatformError) the first time, and again after a failure no sooner
    than ``retry_after_s`` (meanwhile None at once, so a flood of messages
    does not become a flood of calls).  Concurrent callers wait for the
    call in flight.  ``what``: for the log line of a failure.  Cancelling a
    caller cancels only its wait (a cancelled fetch keeps nothing)."""

    fetch: Callable[[], Awaitable[Any]]
    what: str
    retry_after_s: float = 60.0
    value: Any = None
    _failed_at: float | None = None
    _lock: trio.Lock = attrs.field(factory=trio.Lock)

    async def get(self) -> Any:
        async with self._lock:
            if self.value is not None:
                return self.value
            if self._failed_at is not None and trio.current_time() - self._failed_at < self.retry_after_s:
                return None
            try:
                value = await self.fetch()
            except PlatformError as exc:
                value, error = None, str(exc)
            else:
                error = "the answer does not say"
            if value is None:
                self._failed_at = trio.current_time()
                log.warning("bridge_identity_unknown", what=self.what, error=error, retry_in_s=self.retry_after_s)
                return None
            self.value = value
            return value


@attrs.define
class PlatformHTTP:
    """``http``: an ``httpx2.AsyncClient``; ``name``: the platform (for logs).
    ``attempts``: tries per call (429 and 5xx/transport failures count);
    ``max_retry_after_s``: a longer ``Retry-After`` is cut to this;
    ``backoff_s``: first back-off, doubled per retry; ``timeout_s``: per try;
    ``retry_after``: ``fn(response) -> seconds | None`` for platforms that
    put the wait in the body (Telegram's ``parameters.retry_after``); the
    ``Retry-After`` header is used otherwise."""

    http: Any
    name: str
    attempts: int = 4
    max_retry_after_s: float = 30.0
    backoff_s: float = 0.5
    timeout_s: float = 15.0
    retry_after: Any = None

    async def call(self, method: str, url: str, *, what: str, attempts: int | None = None,
                   timeout_s: float | None = None, **kwargs: Any) -> Any:
        """One API call; returns the ``httpx2.Response`` (status < 500 and not
        429).  Raises PlatformError after ``attempts`` tries (default
        ``self.attempts``)."""
        import httpx2

        delay = self.backoff_s
        last = ""
        tries = attempts or self.attempts
        for attempt in range(1, tries + 1):
            try:
                resp = await self.http.request(method, url, timeout=timeout_s or self.timeout_s, **kwargs)
            except httpx2.HTTPError as exc:
                last = f"{type(exc).__name__}"
                wait = delay
            else:
                if resp.status_code == 429:
                    hint = self.retry_after(resp) if self.retry_after else None
                    wait = _retry_after(str(hint) if hint is not None else resp.headers.get("Retry-After"),
                                        delay, self.max_retry_after_s)
                    last = "HTTP 429"
                elif resp.status_code >= 500:
                    wait, last = delay, f"HTTP {resp.status_code}"
                else:
                    return resp
            if attempt == tries:
                break
            log.warning("platform_call_retry", platform=self.name, call=what, attempt=attempt, error=last,
                        wait_s=round(wait, 2))
            await trio.sleep(wait)
            delay = min(delay * 2, 30.0)
        if tries > 1:
            log.error("platform_call_failed", platform=self.name, call=what, attempts=tries, error=last)
        raise PlatformError(f"{self.name} {what}: {last} after {tries} attempt(s)")


def _retry_after(value: str | None, default: float, cap: float) -> float:
    try:
        seconds = float(value) if value is not None else default
    except ValueError:
        seconds = default
    if not (seconds == seconds) or seconds < 0:  # NaN, negative
        seconds = default
    return min(seconds, cap)


# ---- progress of a turn ----------------------------------------------------------------

TILE_MARK = {"pending": "⏳", "running": "🔄", "completed": "✅", "failed": "❌", "killed": "⏹"}
MAX_TILES_SHOWN = 12
MAX_INTERIM_CHARS = 1500
#: what sets off each line of the model's interim text in the placeholder
INTERIM_BAR = "│ "


@attrs.define
class Progress:
    """What the placeholder shows: the last SendMessage text, or the text the
    coordinator wrote before its last tool call ("Dispatching the disk
    specialist."), and the agent tiles (``{task_id: {subagent_type,
    description, status}}``)."""

    interim: str = ""
    tiles: dict[str, dict[str, str]] = attrs.field(factory=dict)
    #: the turn's place in the admission queue (0: not queued / started)
    queue_position: int = 0
    #: text streamed since the last tool call: shown once a tool call follows it (the answer's own
    #: text is followed by none and goes out whole as the final message)
    said: str = ""

    def apply(self, frame: dict) -> bool:
        """Take one frame; True when the placeholder should change."""
        kind = frame.get("type")
        if kind == "token":
            if len(self.said) < MAX_INTERIM_CHARS:
                self.said += str(frame.get("text") or "")
            return False
        if kind == "tool":
            said, self.said = visible_text(self.said).strip(), ""
            if said and frame.get("status") == "started":
                self.interim = said[:MAX_INTERIM_CHARS]
                return True
            return False
        if kind == "interim" and isinstance(frame.get("queue_position"), int):
            self.queue_position = max(0, frame["queue_position"])
            return True
        if kind == "interim":  # the model's words: nothing invisible or blank-looking pads or reorders them
            self.interim = visible_text(str(frame.get("text") or ""))[:MAX_INTERIM_CHARS]
            return True
        if kind == "agent_tile":
            tid = str(frame.get("task_id"))
            self.tiles[tid] = {k: visible_text(str(frame.get(k) or "")) for k in (
                "subagent_type", "description", "status", "decision", "changes_not_made")}
            return True
        return False

    def lines(self) -> list[str]:
        """Markdown lines: a status line, the interim text, one line per tile.  The interim text is
        the model's: each of its lines is set off with ``│ `` so none can pose as a status or tile
        line; a tile says its persona and status before its description (the model's words)."""
        out = [QUEUED.format(position=self.queue_position) if self.queue_position else "⏳ _Working on it…_"]
        if self.interim:
            out += ["", *(f"{INTERIM_BAR}{line}" for line in self.interim.splitlines() if line.strip())]
        tiles = list(self.tiles.values())
        if tiles:
            out.append("")
            for t in tiles[:MAX_TILES_SHOWN]:
                mark = TILE_MARK.get(t["status"], "•")
                decided = f", {t['decision']}" if t["decision"] in ("approve", "reject") else ""  # a reviewer's
                if t["changes_not_made"].isdigit():  # the gate rejected or refused them: they did not run
                    n = int(t["changes_not_made"])
                    mark, decided = "⚠️", f"{decided}, {n} change{'s' if n != 1 else ''} not made"
                out.append(f"{mark} **{t['subagent_type']}** ({t['status']}{decided}) — {t['description'][:200]}")
            if len(tiles) > MAX_TILES_SHOWN:
                out.append(f"… and {len(tiles) - MAX_TILES_SHOWN} more")
        return out

    def markdown(self) -> str:
        return "\n".join(self.lines())


class Outlet(Protocol):
    """Where a relay writes: the placeholder's edits, then the end."""

    async def progress(self, markdown: str) -> None: ...

    async def final(self, markdown: str) -> None: ...

    async def failed(self, code: str, message: str) -> None: ...


#: how long the end of a turn waits for a progress edit already sent (seconds): the platform applies
#: edits of one message in the order they reach it, so the answer must not overtake one in flight
EDIT_SETTLE_S = 30.0


async def relay_turn(frames: Any, outlet: Outlet, *, min_interval_s: float = 1.0) -> str:
    """Follow ``frames`` (a :class:`~ongridd.plugins.chat.ChatTurn`) and keep
    ``outlet`` up to date: progress edits at most every ``min_interval_s``
    seconds, then ``final`` or ``failed`` — only once a progress edit in
    flight has come back (at most :data:`EDIT_SETTLE_S`), since a request
    already sent cannot be called back and a late one would replace the
    answer.  Returns ``final``, ``error`` or ``detached``.  An outlet call
    that raises is logged and does not stop the relay (the turn runs on in
    the runtime regardless)."""
    progress = Progress()
    dirty = trio.Event()
    ending, editor_done = trio.Event(), trio.Event()

    async def guarded(what: str, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        try:
            await fn(*args)
        except PlatformError as exc:
            log.warning("bridge_update_failed", step=what, error=str(exc))
        except Exception:
            log.exception("bridge_update_failed", step=what)

    async def editor() -> None:
        nonlocal dirty
        try:
            while True:
                await dirty.wait()
                if ending.is_set():
                    return
                dirty = trio.Event()
                await guarded("progress", outlet.progress, progress.markdown())
                with trio.move_on_after(min_interval_s):
                    await ending.wait()
                if ending.is_set():
                    return
        finally:
            editor_done.set()

    end: dict | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(editor)
        try:
            async for frame in frames:
                if progress.apply(frame):
                    dirty.set()
                elif frame.get("type") in ("final", "error"):
                    end = frame
                    break
        finally:
            ending.set()
            dirty.set()  # wake an editor waiting for a change: there will be none
        with trio.move_on_after(EDIT_SETTLE_S):
            await editor_done.wait()  # an edit in flight comes back before the end is sent
        nursery.cancel_scope.cancel()
    if end is None:
        outcome = "detached"
        await guarded("failed", outlet.failed, "internal", FAILED)
    elif end.get("type") == "final":
        outcome = "final"
        # the answer as text: no control or bidi character of the model's reaches the platform (a
        # right-to-left override reorders what a reader sees; the progress edits already drop them)
        await guarded("final", outlet.final, without_controls(str(end.get("text") or "")))
    else:
        outcome = "error"
        code = str(end.get("code") or "internal")
        await guarded("failed", outlet.failed, code, shown_failure(code, str(end.get("message") or "")))
    return outcome


# ---- settings common to every bridge --------------------------------------------------

MAX_MAP_ENTRIES = 10_000


def _str_map(raw: Any, key: str) -> dict[str, str]:
    from collections.abc import Mapping

    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or len(raw) > MAX_MAP_ENTRIES:
        raise ValueError(f"{key}: expected a mapping of at most {MAX_MAP_ENTRIES} entries")
    out = {}
    for k, v in raw.items():
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"{key}.{k}: expected a non-empty string")
        out[str(k)] = v.strip()
    return out


def _opt_str(raw: Any, key: str) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError(f"{key}: expected a non-empty string")
    return raw.strip()


@attrs.frozen(kw_only=True)
class BridgeSettings:
    """The settings every bridge has (``plugins.settings.<plugin>``):
    ``api_base_url``, ``users`` (``{<IM user id>: <Ongrid user>}``),
    ``default_user``, ``default_locale``, ``locales`` (``{<channel/chat id>:
    <locale>}``), the allowed channel/chat ids (``allowed``; empty = all),
    ``edit_interval_s`` (least seconds between two edits of one message)
    and ``raw`` (the whole mapping, for the plugin's own keys)."""

    api_base_url: str
    users: dict[str, str] = attrs.field(factory=dict)
    default_user: str | None = None
    default_locale: str | None = None
    locales: dict[str, str] = attrs.field(factory=dict)
    allowed: frozenset[str] = frozenset()
    edit_interval_s: float = 1.0
    raw: Any = attrs.field(factory=dict, repr=False)

    @classmethod
    def parse(cls, raw: Any, *, default_api: str, allowed_key: str,
              default_interval_s: float = 1.0) -> BridgeSettings:
        """Check ``raw``; ValueError names the bad key."""
        from collections.abc import Mapping

        if not isinstance(raw, Mapping):
            raise ValueError("expected a mapping")
        base = _opt_str(raw.get("api_base_url"), "api_base_url") or default_api
        if not base.startswith(("https://", "http://")):
            raise ValueError("api_base_url: expected an http(s) URL")
        allowed = raw.get(allowed_key)
        if allowed is not None and (not isinstance(allowed, (list, tuple)) or len(allowed) > MAX_MAP_ENTRIES):
            raise ValueError(f"{allowed_key}: expected a list of ids")
        gap = raw.get("edit_interval_s", default_interval_s)
        if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not (0 <= gap <= 60):
            raise ValueError("edit_interval_s: expected seconds between 0 and 60")
        return cls(api_base_url=base.rstrip("/"), users=_str_map(raw.get("users"), "users"),
                   default_user=_opt_str(raw.get("default_user"), "default_user"),
                   default_locale=_opt_str(raw.get("default_locale"), "default_locale"),
                   locales=_str_map(raw.get("locales"), "locales"),
                   allowed=frozenset(str(x) for x in (allowed or ())), edit_interval_s=float(gap), raw=raw)

    def ongrid_user(self, im_user: str) -> str | None:
        """The Ongrid user of an IM user id, ``default_user``, or None (refuse)."""
        return self.users.get(im_user) or self.default_user

    def locale(self, conversation: str) -> str | None:
        return self.locales.get(conversation) or self.default_locale

    def allows(self, conversation: str) -> bool:
        return not self.allowed or conversation in self.allowed


_said: set[tuple[str, str]] = set()


def say_once(plugin: str, reason: str) -> None:
    """Log ``bridge_inactive`` for ``plugin`` once per process (hooks run
    again on every registry rebuild)."""
    if (plugin, reason) in _said:
        return
    _said.add((plugin, reason))
    log.info("bridge_inactive", plugin=plugin, reason=reason)


def say_active(plugin: str, **detail: str) -> None:
    """Log ``bridge_active`` for ``plugin`` (with ``detail``: the route or
    service it registered, the mode) once per process; a bridge calls it
    when it registers its route or service."""
    key = (plugin, "active " + repr(sorted(detail.items())))
    if key in _said:
        return
    _said.add(key)
    log.info("bridge_active", plugin=plugin, **detail)


REFUSAL = ("Sorry, I can't help you here: your account is not mapped to an Ongrid user. "
           "Ask an Ongrid operator to add you to the bridge's `users` setting.")
STOP_WORDS = frozenset({"stop", "/stop", "⏹", "⏹️"})


def is_stop(text: str) -> bool:
    """Whether a message asks to stop the running turn."""
    return text.strip().lower() in STOP_WORDS


PLACEHOLDER = "⏳ _Working on it…_"
INTERJECTED = "📨 _Added to the turn already running in this thread; its answer follows there._"
STOPPED = "⏹ Stopped."
STOPPED_BY_SHUTDOWN = ("⏹ Stopped: Ongrid was restarted or shut down while working on this. Nothing more will "
                       "come here; please send your message again in a moment.")
#: the ``stopped`` messages that say more than :data:`STOPPED`, by the runtime's message
STOPPED_BECAUSE = {SHUTDOWN_STOPPED: STOPPED_BY_SHUTDOWN,
                   SECRET_STOPPED: f"⏹ Stopped: {SECRET_STOPPED.removeprefix('the turn was stopped: ')}."}
QUEUED = "⏳ _Queued (position {position}) — Ongrid is running as many requests as it may; this one starts soon._"
BUSY = ("⏳ Ongrid is busy right now (every slot is running and the queue is full, or you already have many "
        "requests waiting). Nothing was run; please send your message again in a moment.")


#: error codes whose message is written for the person who asked (a refusal of the request itself);
#: any other error's message is for operators (a provider's URL, session ids, a stored row that
#: failed) and stays in the web console and the daemon log
USER_FACING_ERRORS = frozenset({"busy", "stopped", "unauthorized", "not_found", "bad_frame"})
PROVIDER_FAILED = ("The model could not answer this time (its provider failed). Please try again in a moment; "
                   "an Ongrid operator finds the details in the web console and the daemon log.")
FAILED = "This request failed inside Ongrid. An Ongrid operator finds the details in the web console and the daemon log."


def shown_failure(code: str, message: str) -> str:
    """What a chat platform's users see of a turn's ``error`` frame: its message when the error
    is about their request (:data:`USER_FACING_ERRORS`), else a fixed text — a shared channel
    must not learn the model's address, session ids or the daemon's internals."""
    if code in USER_FACING_ERRORS:
        return message
    return PROVIDER_FAILED if code == "provider_error" else FAILED


#: an answer longer than this is converted to the platform's markup in a worker thread (a 200,000-
#: character answer dense with markup took ~2 s to convert, which on the event loop stalls every turn,
#: socket and /healthz); one conversion at a time
RENDER_INLINE_CHARS = 20_000
_RENDER_LIMITER = trio.CapacityLimiter(1)


class MessageOutlet:
    """An :class:`Outlet` over two platform calls: ``post(text) -> ref | None``
    (a new message in the conversation) and ``edit(ref, text)``.  ``render``
    turns markdown into the platform's markup; ``limit``: characters per
    message, as ``measure`` counts a rendered one (:func:`split_rendered`).  The placeholder (``ref``)
    is edited with progress and then replaced by the first part of the answer; further parts are posted."""

    def __init__(self, *, post: Callable[[str], Awaitable[Any]], edit: Callable[[Any, str], Awaitable[None]],
                 render: Callable[[str], str], limit: int, ref: Any = None, measure: Callable[[str], int] = len):
        self.post, self.edit, self.render, self.limit, self.ref = post, edit, render, limit, ref
        self.measure = measure

    def _split(self, markdown: str) -> list[str]:
        return split_rendered(markdown, self.limit, self.render, self.measure)

    async def show(self, text: str) -> None:
        if self.ref is not None:
            await self.edit(self.ref, text)
        else:
            self.ref = await self.post(text)

    async def progress(self, markdown: str) -> None:
        await self.show(self._split(markdown)[0])

    async def final(self, markdown: str) -> None:
        if len(markdown) > RENDER_INLINE_CHARS:  # converted in a worker thread: the event loop keeps going
            chunks = await trio.to_thread.run_sync(self._split, markdown, limiter=_RENDER_LIMITER)
        else:
            chunks = self._split(markdown)
        chunks = chunks or [self.render("(empty answer)")]
        await self.show(chunks[0])
        for chunk in chunks[1:]:
            await self.post(chunk)

    async def failed(self, code: str, message: str) -> None:
        if code == "stopped":
            text = STOPPED_BECAUSE.get(message, STOPPED)
        else:
            text = BUSY if code == "busy" else f"⚠️ {message[:500]}"
        await self.show(self._split(text)[0])


async def run_bridge_turn(chat: Any, *, user: str, thread: str, text: str, locale: str | None, origin: Any,
                          post: Callable[[str], Awaitable[Any]], edit: Callable[[Any, str], Awaitable[None]],
                          render: Callable[[str], str], limit: int, interval_s: float,
                          on_placeholder: Callable[[Any, str], None] | None = None,
                          measure: Callable[[str], int] = len) -> str:
    """One bridged turn: post the placeholder at once, start the turn
    (``chat.start_turn``), edit the placeholder with its progress, then the
    answer.  ``on_placeholder(ref, session_id)``: remember the placeholder
    (e.g. for a stop reaction).  Returns what :func:`relay_turn` returns, or
    ``interjected`` when a turn was already running in the thread (the text
    went to it; this placeholder says so and the running turn's placeholder
    gets the answer).
    A platform failure is logged and never stops the turn; when the turn
    cannot start (the daemon is shutting down, the database fails) the
    placeholder says so and the error propagates (the caller's task logs it) — except a full
    queue (``busy``): the placeholder asks to send again and ``busy`` is returned."""
    from ongridd.errors import Busy, OngridError

    ref = None
    try:
        ref = await post(render(PLACEHOLDER))
    except PlatformError as exc:
        log.warning("bridge_placeholder_failed", error=str(exc))
    try:
        turn = await chat.start_turn(user=user, thread=thread, text=text, locale=locale, origin=origin)
    except Busy:  # refused, nothing run or stored: the placeholder says so; not a failure of the bridge
        log.info("bridge_turn_busy", thread=thread, user=user)
        outlet = MessageOutlet(post=post, edit=edit, render=render, limit=limit, ref=ref, measure=measure)
        with trio.CancelScope(shield=True):
            with trio.move_on_after(20):
                try:
                    await outlet.failed("busy", "")
                except PlatformError:
                    pass
        return "busy"
    except OngridError:  # raised on: the daemon logs it; the channel gets the fixed text
        outlet = MessageOutlet(post=post, edit=edit, render=render, limit=limit, ref=ref, measure=measure)
        with trio.CancelScope(shield=True):
            with trio.move_on_after(20):
                try:
                    await outlet.failed("internal", FAILED)
                except PlatformError:
                    pass
        raise
    async with turn:
        outlet = MessageOutlet(post=post, edit=edit, render=render, limit=limit, ref=ref, measure=measure)
        if turn.interjected:  # the running turn's own placeholder shows its progress and answer
            try:
                await outlet.show(render(INTERJECTED))
            except PlatformError as exc:
                log.warning("bridge_update_failed", step="interjected", error=str(exc))
            return "interjected"
        if ref is not None and on_placeholder is not None:
            on_placeholder(ref, turn.session_id)
        return await relay_turn(turn, outlet, min_interval_s=interval_s)


async def stop_thread(chat: Any, *, user: str, thread: str, say: Callable[[str], Awaitable[Any]]) -> bool:
    """Stop the running turn of (user, thread) and say so with ``say(markdown)``."""
    stopped = await chat.stop_thread(user=user, thread=thread)
    try:
        await say(STOPPED if stopped else "Nothing is running in this conversation.")
    except PlatformError as exc:
        log.warning("bridge_reply_failed", error=str(exc))
    return stopped


async def say_safely(say: Callable[[str], Awaitable[Any]], markdown: str) -> None:
    """``say(markdown)``; a platform failure is logged."""
    try:
        await say(markdown)
    except PlatformError as exc:
        log.warning("bridge_reply_failed", error=str(exc))


# ---- rendering markdown into a platform's markup ---------------------------------------------


@attrs.frozen(kw_only=True)
class MarkupStyle:
    """How one platform writes each piece (every callable gets raw text and
    must escape it itself): ``text(s)``, ``code(s)``, ``bold(s)``,
    ``italic(s)``, ``link(url, text)`` (only http(s)/mailto URLs reach it;
    other links are ``text``), ``heading(rendered inline)``,
    ``code_block(code, lang)``; ``bullet``: what a ``- `` list item starts with."""

    text: Callable[[str], str]
    code: Callable[[str], str]
    bold: Callable[[str], str]
    italic: Callable[[str], str]
    link: Callable[[str, str], str]
    heading: Callable[[str], str]
    code_block: Callable[[str, str], str]
    bullet: str = "• "

    def inline(self, line: str) -> str:
        out = []
        for kind, text, url in inline_spans(line):
            if kind == "link":
                out.append(self.link(url, text))
            elif kind == "plain":
                out.append(self.text(text))
            elif kind == "code":
                out.append(self.code(text))
            else:  # a code span inside bold or italic text: its backticks would show as written
                out.append((self.bold if kind == "bold" else self.italic)(re.sub(r"`([^`\n]+)`", r"\1", text)))
        return "".join(out)

    def line(self, line: str) -> str:
        head = heading_text(line)
        if head is not None:
            return self.heading(self.inline(head)) if head else ""
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if stripped[:2] in ("- ", "* ", "+ "):
            return f"{indent}{self.bullet}{self.inline(stripped[2:])}"
        return self.inline(line)

    def render(self, markdown: str) -> str:
        """The platform rendering of ``markdown`` (one pass per line).  A table (which no chat
        platform's markup has) becomes a code block of aligned columns (:func:`table_text`)."""
        parts = []
        for block in markdown_blocks(markdown):
            if block.kind == "code":
                parts.append(self.code_block(block.text, block.lang))
                continue
            for kind, piece in text_and_tables(block.text.split("\n")):
                if kind == "table":
                    parts.append(self.code_block(piece, ""))
                else:
                    parts.append("\n".join(self.line(line) for line in piece.split("\n")))
        return "\n".join(parts)
