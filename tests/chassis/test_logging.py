"""One logging setup for everyone: a third-party plugin's stdlib ``logging``
lines reach the real daemon's stderr in the same format as Ongrid's own
(JSON lines when stderr is not a terminal, or under systemd), held secrets
redacted; the console format on a terminal."""

from __future__ import annotations

import io
import json
import logging
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from ongridd import logs
from tests.chassis.test_serve import serving
from tests.plugins.test_plugin_manager import _make_dist

LOGGING_PLUGIN = '''
import logging

from ongridd.plugins.api import hookimpl

log = logging.getLogger("acme_plugin")

@hookimpl
def ongrid_register_tools(register, context):
    log.info("acme loaded with %d probes", 3, extra={"probes": 3})
    log.warning("acme token is %s", "tok-plugin-secret-987")
'''


def test_third_party_plugin_lines_appear_like_builtins(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _make_dist(state / "plugins" / "acme", "acme_plugin", LOGGING_PLUGIN)
    with serving(tmp_path, state, ONGRID_TOKENS="alice:tok-plugin-secret-987") as d:
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=15) == 0
    err = d.proc.stderr.read()
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line is JSON
    by_event = {line["event"]: line for line in lines}
    info = by_event["acme loaded with 3 probes"]
    assert info["level"] == "info" and info["logger"] == "acme_plugin" and info["probes"] == 3
    [warning] = [line for line in lines if line["logger"] == "acme_plugin" and line["level"] == "warning"]
    assert warning["event"].startswith("acme token is ")
    assert "tok-plugin-secret-987" not in err  # redacted on the plugin's line too
    ready = by_event["daemon_ready"]
    assert ready["logger"].startswith("ongridd") and ready["level"] == "info"
    assert {"event", "level", "logger", "ts"} <= set(info) & set(warning) & set(ready)
    assert by_event["plugin_loaded"]["plugin"] == "acme_plugin"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def own_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Not under systemd for the test; the root logger's handlers and level
    as they were before it afterwards (Ongrid's handlers removed)."""
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    monkeypatch.delenv("INVOCATION_ID", raising=False)
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        yield
    finally:
        for h in root.handlers[:]:
            if getattr(h, "_ongrid", False):
                root.removeHandler(h)
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_console_format_on_a_terminal_and_bound_context(monkeypatch, own_logging) -> None:
    tty = Tty()
    logs.configure("INFO", tty)
    with logs.bound_context(session_id="S-1", agent="default", user="alice"):
        logs.get_logger("ongridd.test").info("turn_started", seq=4)
        logging.getLogger("acme").warning("disk %s full", "/var")
    out = tty.getvalue()
    assert not out.lstrip().startswith("{")
    assert "turn_started" in out and "seq=4" in out and "session_id=S-1" in out and "user=alice" in out
    assert "disk /var full" in out and "[acme]" in out
    monkeypatch.setenv("INVOCATION_ID", "abc")  # under systemd: JSON even on a terminal
    tty2 = Tty()
    logs.configure("INFO", tty2)
    logs.get_logger("ongridd.test").info("turn_started", seq=5)
    assert json.loads(tty2.getvalue().splitlines()[-1])["seq"] == 5


def test_console_lines_cannot_be_forged_and_show_no_locals(own_logging) -> None:
    """A message carrying user text with newlines or escapes stays one line;
    a traceback shows no local variables (they may hold a secret the daemon
    does not know of); JSON mode: one object per line with the text intact."""
    forged = "x\n2026-12-01T00:00:00Z [error    ] admin_granted   user=mallory\x1b[2J\r"
    tty = Tty()
    logs.configure("INFO", tty)
    logging.getLogger("acme").warning("user said %s", forged)
    logs.get_logger("ongridd.test").info("turn_started", text=forged)
    unknown_token = "local-only-value-3141"  # noqa: F841 - a local a locals dump would print
    try:
        raise ValueError("boom")
    except ValueError:
        logs.get_logger("ongridd.test").exception("failed")
    out = tty.getvalue()
    lines = out.splitlines()
    assert not any(line.startswith("2026-12-01T00:00:00Z") for line in lines), out
    assert "\x1b" not in out and "\r" not in out
    assert "admin_granted" in lines[0] and "admin_granted" in lines[1]
    assert "local-only-value-3141" not in out and "ValueError: boom" in out
    tty2 = Tty()
    logs.configure("INFO", tty2, json_lines=True)
    logging.getLogger("acme").warning("user said %s", forged)
    (line,) = tty2.getvalue().splitlines()
    assert json.loads(line)["event"] == "user said " + forged


def test_importing_the_logs_module_does_not_import_rich_and_rich_still_imports_after():
    """structlog's optional rich integration is left out of the daemon's start-up;
    exceptions are still rendered (plainly) and rich imports normally afterwards."""
    import subprocess
    import sys

    code = (
        "import sys, logging\n"
        "from ongridd import logs\n"
        "assert 'rich' not in sys.modules, 'rich was imported'\n"
        "logs.configure('INFO')\n"
        "log = logs.get_logger('t')\n"
        "try:\n"
        "    raise ValueError('boom')\n"
        "except ValueError:\n"
        "    log.exception('failed_here')\n"
        "import rich.console\n"
        "print('rich ok', rich.console.Console.__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "rich ok Console" in done.stdout
    assert "failed_here" in done.stderr and "ValueError: boom" in done.stderr


class _Opaque:
    def __str__(self) -> str:
        return "opaque<1>"


def _lines_both_ways(out: io.StringIO, log: logs.StructuredLogger, *calls: dict) -> list[tuple[dict, dict]]:
    """Each call logged twice: written directly, then through ``logging`` (a pass-all filter
    on the logger makes the direct path stand aside); the two lines parsed, ``ts`` dropped."""
    probe = logging.getLogger("ongridd.test.direct")
    pairs = []
    for fields in calls:
        before = len(out.getvalue().split("\n")) - 1
        assert logs._direct_handler(probe, logging.INFO) is not None
        log.info("direct_or_not", **fields)
        passing = logging.Filter()
        probe.addFilter(passing)
        try:
            log.info("direct_or_not", **fields)
        finally:
            probe.removeFilter(passing)
        # (split at newlines only: U+2028 is written as itself, ensure_ascii=False)
        direct, through_logging = (json.loads(line) for line in out.getvalue().split("\n")[before:-1])
        assert list(direct) == list(through_logging)  # the same keys in the same order
        pairs.append((direct, through_logging))
    return pairs


def _only_ongrid_handler() -> None:
    """The root logger's handlers without pytest's capturing ones (``own_logging`` puts them back)."""
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if getattr(h, "_ongrid", False)]


def test_lines_written_directly_are_the_lines_logging_writes(own_logging) -> None:
    from ongridd.secretset import REGISTRY

    out = io.StringIO()
    logs.configure("INFO", out, json_lines=True)
    _only_ongrid_handler()
    log = logs.get_logger("ongridd.test.direct")
    with REGISTRY.hold(["hunter2-direct-path-secret"]), logs.bound_context(session_id="S-1", user="bound"):
        pairs = _lines_both_ways(
            out, log,
            {},
            {"user": "own field wins", "count": 3, "ratio": 0.5, "flag": True, "none": None},
            {"opaque": _Opaque(), "nested": {"a": [1, "two"]}, "text": "naïve 中文 \u2028 \x1b[2J"},
            {"leak": "token=hunter2-direct-path-secret"},
            # keys the formatter's processors act on: the direct path stands aside
            {"exception": "ValueError('x')"}, {"exc_info": True}, {"_record": 1, "_from_structlog": 2},
            {"ongrid_fields": {"a": 1}}, {"stack_info": "kept as it is"},
        )
        with logs.bound_context(exception="bound"):
            pairs += _lines_both_ways(out, log, {})
    for direct, through_logging in pairs:
        assert direct.pop("ts").endswith("Z") and through_logging.pop("ts").endswith("Z")
        assert direct == through_logging
    assert [pair[0]["user"] for pair in pairs] == ["bound", "own field wins", *["bound"] * 8]
    assert pairs[2][0]["opaque"] == "opaque<1>"
    assert logs.json_line("ongridd.test.direct", logging.INFO, 1234, {}) is None  # type: ignore[arg-type]
    assert "hunter2" not in out.getvalue()


def test_a_capturing_handler_or_an_exception_takes_the_logging_path(own_logging) -> None:
    out = io.StringIO()
    logs.configure("INFO", out, json_lines=True)
    _only_ongrid_handler()
    log = logs.get_logger("ongridd.test.direct")
    captured: list[logging.LogRecord] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record)

    capture = Capture()
    logging.getLogger().addHandler(capture)
    try:
        log.info("seen_by_both", n=1)
    finally:
        logging.getLogger().removeHandler(capture)
    assert [r.getMessage() for r in captured] == ["seen_by_both"]
    assert logs._direct_handler(logging.getLogger("ongridd.test.direct"), logging.INFO) is not None
    log.info("direct_only", n=2)
    assert len(captured) == 1
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("with_traceback")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["seen_by_both", "direct_only", "with_traceback"]
    assert "RuntimeError: boom" in lines[-1]["exc"]
    logs.configure("WARNING", out, json_lines=True)
    _only_ongrid_handler()
    log.info("below_the_level")
    assert "below_the_level" not in out.getvalue()


def test_debug_level_keeps_chatty_libraries_quiet(own_logging) -> None:
    out = io.StringIO()
    logs.configure("DEBUG", out, json_lines=True)
    _only_ongrid_handler()
    from ongridd.render import markdown_html

    markdown_html("# a title, not seen before by this process\n\n```\ncode\n```\n")
    logs.get_logger("ongridd.test").debug("ours_still_shows")
    events = [json.loads(line)["event"] for line in out.getvalue().split("\n") if line]
    assert events == ["ours_still_shows"], events[:5]


def test_a_library_repeating_a_line_in_a_tight_loop_is_logged_once_per_few_seconds(own_logging, monkeypatch) -> None:
    # trio's listener logs an ERROR with a traceback every 0.1 s while accept fails with EMFILE
    out = io.StringIO()
    logs.configure("INFO", out, json_lines=True)
    logs.configure("INFO", out, json_lines=True)  # idempotent: one filter, not two
    listener = logging.getLogger("trio.serve_listeners")
    assert sum(isinstance(f, logs.AtMostEvery) for f in listener.filters) == 1
    clock = [1000.0]
    monkeypatch.setattr(logs.time, "monotonic", lambda: clock[0])
    listener.filters[:] = [f for f in listener.filters if not isinstance(f, logs.AtMostEvery)]
    listener.addFilter(logs.AtMostEvery(5.0))
    try:
        for _ in range(120):  # 12 s of a 0.1 s loop
            try:
                raise OSError(24, "Too many open files")
            except OSError:
                listener.error("accept returned %s (%s); retrying in %s seconds", "EMFILE", "Too many open files",
                               0.1, exc_info=True)
            clock[0] += 0.1
    finally:
        listener.filters[:] = [f for f in listener.filters if not isinstance(f, logs.AtMostEvery)]
        listener.addFilter(logs.AtMostEvery(5.0))
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line]
    said = "accept returned EMFILE (Too many open files); retrying in 0.1 seconds"
    events = [line["event"] for line in lines]
    assert events == [said, f"{said} (49 more like it since, not logged)",
                      f"{said} (49 more like it since, not logged)"], events
    assert all("OSError: [Errno 24]" in line["exc"] for line in lines)  # the traceback kept, once per line


def test_a_throttle_writes_one_line_a_second_and_counts_the_rest(monkeypatch) -> None:
    clock = [50.0]
    monkeypatch.setattr(logs.time, "monotonic", lambda: clock[0])
    refusals = logs.Throttle(1.0)
    written = []
    for _ in range(25):  # 2.5 s of a flood, a request every 0.1 s
        fields = refusals.fields(reason="bad signature")
        if fields is not None:
            written.append(fields)
        clock[0] += 0.1
    assert written == [{"reason": "bad signature"}, {"reason": "bad signature", "not_logged": 9},
                       {"reason": "bad signature", "not_logged": 9}], written
    clock[0] += 60  # quiet; then the four held back since are told with the next line
    assert refusals.fields(reason="x") == {"reason": "x", "not_logged": 4}
    refusals.reset()
    assert refusals.fields(reason="y") == {"reason": "y"}  # reset: written at once, nothing carried over


def test_what_throttles_still_hold_back_is_taken_by_name_once(monkeypatch) -> None:
    clock = [50.0]
    monkeypatch.setattr(logs.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(logs, "_THROTTLES", logs.weakref.WeakSet())  # this test's throttles only
    slack, slack_too = logs.Throttle(1.0, "slack_request_refused"), logs.Throttle(1.0, "slack_request_refused")
    hello, unnamed, quiet = logs.Throttle(1.0, "connection_refused"), logs.Throttle(1.0), logs.Throttle(1.0, "q")
    for throttle, n in ((slack, 4), (slack_too, 2), (hello, 3), (unnamed, 2), (quiet, 1)):
        for _ in range(n):  # the first is written, the rest held back
            throttle.fields(reason="x")
    hello.fields("invalid token", reason="invalid token")  # a key of its own: written
    hello.fields("invalid token", reason="invalid token")  # held back, in that key
    assert logs.take_held_back() == {"slack_request_refused": 4, "connection_refused": 2,
                                     "connection_refused: invalid token": 1, "(unnamed)": 1}
    assert logs.take_held_back() == {}  # told once
    clock[0] += 5
    assert slack.fields(reason="x") == {"reason": "x"}  # taken: not told again with the next line


def test_a_throttle_keyed_by_reason_lets_each_reason_through_and_bounds_its_keys(monkeypatch) -> None:
    clock = [50.0]
    monkeypatch.setattr(logs.time, "monotonic", lambda: clock[0])
    refused = logs.Throttle(1.0, "request_unauthorized", max_keys=2)
    written = []
    for n in range(30):  # a stream without a token, a guess every tenth request
        key = "invalid token" if n % 10 == 5 else "a token is required"
        if (fields := refused.fields(key, reason=key)) is not None:
            written.append(fields)
        clock[0] += 0.0625  # (exact in binary: 16 steps are one second)
    # the stream's one line a second, and each guess that is the first of its second
    assert written == [{"reason": "a token is required"}, {"reason": "invalid token"},
                       {"reason": "a token is required", "not_logged": 13},
                       {"reason": "invalid token", "not_logged": 1}], written
    # keys a sender might vary past max_keys share the lines without a key: memory stays bounded
    assert refused.fields("k3", reason="k3") == {"reason": "k3"}
    assert refused.fields("k4", reason="k4") is None and len(refused._windows) == 3


def test_a_json_line_holds_no_character_that_reads_as_a_line_break_or_a_control() -> None:
    # raw, JSON may carry U+0085, U+2028, U+2029 (line breaks to str.splitlines and older JavaScript),
    # C1 controls (U+009B opens a terminal escape) and bidi overrides: a value a client chose (a path)
    # would cut the line in pieces that are not JSON, or act on the terminal that shows it
    hostile = "/api/a\u2028b\u2029c\x85d\x9b31me\u202ef\u2066g\x7fh\ufeffi\u200bj\U000e0041k\xadl"
    line = logs.json_line("ongridd.test", logging.WARNING, "request_unauthorized", {"path": hostile, "who": "é中"})
    assert line is not None and len(line.splitlines()) == 1 and line.isprintable(), line
    assert json.loads(line)["path"] == hostile and "é中" in line  # the same text; other letters stay readable
    stream = io.StringIO()
    handler = logs._OngridHandler(stream, json_lines=True)  # the formatter's path (a LogRecord)
    handler.emit(logging.makeLogRecord({"name": "lib", "levelno": logging.WARNING, "msg": hostile}))
    written = stream.getvalue()
    assert len(written.splitlines()) == 1 and json.loads(written)["event"] == hostile, written
