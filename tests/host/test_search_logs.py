"""``search_logs`` on real files the tests write: plain and rotated .gz logs,
timestamps in the common forms, a 200 MB file read in bounded memory,
binary garbage, secrets and paths outside ``logs.dirs``, a catastrophic
regex, and a real journal file made by Debian's systemd-journal-remote."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import time
import tracemalloc
from pathlib import Path

import jsonschema
import pytest

from ongridd.config import Config, HostConfig, LogsConfig
from ongridd.errors import ToolError
from ongridd.plugins.api import PluginContext
from tests.conftest import need

import ongrid_host  # noqa: E402  (tests/host/conftest.py puts plugins/ on sys.path)

JOURNAL_REMOTE = next((p for p in ("/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote")
                       if os.path.exists(p)), None)


def search_tool(dirs, journal_dirs=(), hosts=(), settings=None):
    cfg = Config(logs=LogsConfig(dirs=tuple(str(d) for d in dirs), journal_dirs=tuple(str(d) for d in journal_dirs)))
    context = PluginContext(config=cfg, plugin_name="ongrid_host", settings=settings or {},
                            hosts=(HostConfig(name="local"), *hosts))
    registered = []
    ongrid_host.ongrid_register_tools(register=registered.append, context=context)
    tool = next(t for t in registered if t.name == "search_logs")

    async def call(**args):
        args = {k: v for k, v in args.items() if v is not None}
        jsonschema.Draft202012Validator(tool.parameters).validate(args)
        return await tool.handler(args, None)

    return call


def _touch(path: Path, when: float) -> None:
    os.utime(path, (when, when))


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    """logs/app.log (newest), logs/app.log.1.gz (older, rotated), logs/nginx/access.log, logs/plain.txt."""
    d = tmp_path / "logs"
    (d / "nginx").mkdir(parents=True)
    (d / "app.log").write_text(
        "2026-03-02T10:00:00Z INFO started\n"
        "2026-03-02T10:05:00.250+02:00 ERROR upstream checkout timed out\n"
        "  at handler (checkout.py:12) ERROR context line without a timestamp\n")
    with gzip.open(d / "app.log.1.gz", "wt") as f:
        f.write("Mar  1 23:59:58 web-1 app[42]: ERROR disk full on /var\n"
                "Mar  1 23:59:59 web-1 app[42]: INFO retrying\n")
    (d / "nginx" / "access.log").write_text(
        '10.0.0.1 - - [02/Mar/2026:11:00:00 +0100] "GET /pay HTTP/1.1" 502 157 "-" "curl" ERROR-ish\n')
    now = time.time()
    _touch(d / "app.log", now - 10)
    _touch(d / "nginx" / "access.log", now - 100)
    _touch(d / "app.log.1.gz", now - 86400)
    return d


async def test_plain_and_gz_hits_with_timestamps_newest_first(logs):
    call = search_tool([logs])
    out = await call(pattern="error", source="files")
    assert out["total_matched"] == 4 and out["more_available"] is False and out["complete"] is True
    by_line = {h["line"]: h for h in out["hits"]}
    iso = by_line["2026-03-02T10:05:00.250+02:00 ERROR upstream checkout timed out"]
    assert iso == {"host": "local", "file": str(logs / "app.log"), "line_no": 2,
                   "timestamp": "2026-03-02T08:05:00.250Z",
                   "line": "2026-03-02T10:05:00.250+02:00 ERROR upstream checkout timed out"}
    nginx = next(h for h in out["hits"] if h["file"].endswith("access.log"))
    assert nginx["timestamp"] == "2026-03-02T10:00:00Z" and nginx["line_no"] == 1
    gz = next(h for h in out["hits"] if h["file"].endswith(".gz"))
    assert gz["line"].startswith("Mar  1 23:59:58") and gz["line_no"] == 1
    assert gz["timestamp"] is not None  # syslog form, read in local time
    assert by_line["  at handler (checkout.py:12) ERROR context line without a timestamp"]["timestamp"] is None
    stamped = [h["timestamp"] for h in out["hits"] if h["timestamp"]]
    assert stamped == sorted(stamped, reverse=True)  # newest first
    assert out["scanned_bytes"] == sum(s["scanned_bytes"] for s in out["sources"]) > 0


async def test_literal_is_literal_and_regex_uses_re2(logs):
    call = search_tool([logs])
    assert (await call(pattern="c.py", source="files"))["total_matched"] == 0
    out = await call(pattern=r"\b50[0-9]\b", regex=True, source="files")
    assert [h["file"].rsplit("/", 1)[-1] for h in out["hits"]] == ["access.log"]
    with pytest.raises(ToolError, match="not a valid RE2"):
        await call(pattern=r"(a)\1", regex=True, source="files")


async def test_since_until_window_and_continuation_lines(logs):
    call = search_tool([logs])
    out = await call(pattern="error", source="files", since="2026-03-02T08:00:00Z", until="2026-03-02T09:00:00Z")
    lines = sorted(h["line"][:20] for h in out["hits"])
    # the stamped 08:05 UTC line and its continuation line (which inherits that time)
    assert lines == ["  at handler (checko", "2026-03-02T10:05:00."]
    newer = await call(pattern="error", source="files", since="now-1h")
    assert newer["total_matched"] == 0


async def test_limit_keeps_the_newest_and_says_more_available(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    (d / "x.log").write_text("".join(f"2026-01-01T00:{m:02d}:00Z fail {m}\n" for m in range(50)))
    out = await search_tool([d])(pattern="fail", source="files", limit=3)
    assert [h["line_no"] for h in out["hits"]] == [50, 49, 48]
    assert out["total_matched"] == 50 and out["more_available"] is True


async def test_binary_garbage_is_skipped_and_long_lines_are_cut(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    (d / "core.bin").write_bytes(b"ERROR" + b"\0" * 10 + os.urandom(100_000))
    (d / "long.log").write_bytes(b"ERROR " + b"x" * 100_000 + b"\nnext ERROR\n\xff\xfe bad utf8 ERROR\x07\n")
    out = await search_tool([d])(pattern="error", source="files")
    skipped = {s["file"].rsplit("/", 1)[-1]: s.get("skipped") for s in out["sources"]}
    assert skipped["core.bin"].startswith("binary")
    hits = sorted(out["hits"], key=lambda h: h["line_no"])
    assert [h["line_no"] for h in hits] == [1, 2, 3]
    assert len(hits[0]["line"]) < 2200 and hits[0]["line"].endswith("more bytes cut]")
    assert hits[2]["line"] == "\ufffd\ufffd bad utf8 ERROR\ufffd"


async def test_outside_logs_dirs_and_secrets_are_refused(tmp_path, logs):
    call = search_tool([logs])
    with pytest.raises(ToolError, match="outside logs.dirs"):
        await call(pattern="root", paths=["/etc/passwd"])
    with pytest.raises(ToolError, match="outside logs.dirs"):
        await call(pattern="root", paths=[str(logs / ".." / "elsewhere.log")])
    os.symlink("/etc/hostname", logs / "sneaky.log")
    with pytest.raises(ToolError, match=r"resolves to /etc/hostname\) is outside logs.dirs"):
        await call(pattern="x", paths=[str(logs / "sneaky.log")])
    keys = logs / "backup" / ".ssh"
    keys.mkdir(parents=True)
    (keys / "id_ed25519").write_text("ERROR -----BEGIN OPENSSH PRIVATE KEY-----\n")
    with pytest.raises(ToolError, match="refused: .*ssh"):
        await call(pattern="ERROR", paths=[str(keys / "id_ed25519")])
    walked = await call(pattern="PRIVATE KEY", source="files")
    assert walked["total_matched"] == 0 and all(".ssh" not in s["file"] for s in walked["sources"])
    wide = search_tool(["/"])
    with pytest.raises(ToolError, match="password-hash"):
        await wide(pattern="root", paths=["/etc/shadow"])


async def test_catastrophic_regex_finishes_at_once(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    (d / "a.log").write_bytes((b"a" * 2000 + b"!\n") * 2000)
    started = time.monotonic()
    out = await search_tool([d])(pattern="(a+)+$", regex=True, source="files")
    assert time.monotonic() - started < 5
    assert out["total_matched"] == 0 and out["complete"] is True


async def test_a_200_mb_file_streams_in_bounded_memory(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    big = d / "big.log"
    row = b"2026-03-02T10:00:00Z INFO GET /api/items 200 12ms user=alice region=eu-west-1 trace=abcdef\n"
    block = row * 20_000
    with big.open("wb") as f:
        for _ in range(200 * 1024 * 1024 // len(block) + 1):
            f.write(block)
        last = b"2026-03-02T10:30:00Z ERROR payment gateway refused connection\n"
        f.write(last)
    size = big.stat().st_size
    assert size > 200 * 1024 * 1024
    tracemalloc.start()
    try:
        out = await search_tool([d])(pattern="gateway refused", source="files")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out["scanned_bytes"] == size and out["complete"] is True
    assert out["total_matched"] == 1 and out["hits"][0]["line_no"] == (size - len(last)) // len(row) + 1
    assert peak < 8 * 1024 * 1024, f"peak Python memory {peak} bytes"


# ---- the journal ------------------------------------------------------------


def _export_entry(cursor_i: int, usec: int, unit: str, priority: int, message: str) -> str:
    return (f"__CURSOR=s=0;i={cursor_i}\n__REALTIME_TIMESTAMP={usec}\n__MONOTONIC_TIMESTAMP={cursor_i * 1000}\n"
            f"_BOOT_ID=0123456789abcdef0123456789abcdef\n_SYSTEMD_UNIT={unit}\nSYSLOG_IDENTIFIER={unit.split('.')[0]}\n"
            f"PRIORITY={priority}\nMESSAGE={message}\n_HOSTNAME=web-1\n\n")


def write_journal(tmp_path: Path, export: str) -> Path:
    """A journal folder holding the entries of ``export`` (journal export format), written by
    Debian's systemd-journal-remote (the test is skipped, or fails in CI, without it)."""
    need(JOURNAL_REMOTE is not None and shutil.which("journalctl") is not None,
         "systemd-journal-remote and journalctl (Debian package systemd-journal-remote)")
    source = tmp_path / "export.txt"
    source.write_text(export)
    out = tmp_path / "journal"
    out.mkdir()
    subprocess.run([JOURNAL_REMOTE, f"--output={out / 'remote.journal'}", str(source)], check=True,
                   capture_output=True, timeout=30)
    return out


@pytest.fixture
def journal_dir(tmp_path: Path) -> Path:
    base = 1_772_445_600  # 2026-03-02T10:00:00Z
    return write_journal(tmp_path, "".join([
        _export_entry(1, base * 10**6, "checkout.service", 6, "checkout started"),
        _export_entry(2, (base + 60) * 10**6, "checkout.service", 3, "checkout ERROR: connection to postgres-main refused"),
        _export_entry(3, (base + 120) * 10**6, "nginx.service", 4, "nginx ERROR upstream prematurely closed"),
        _export_entry(4, (base + 180) * 10**6, "checkout.service", 6, "checkout ERROR retry 1 ok"),
    ]))


async def test_journal_directory_unit_priority_and_window(tmp_path, journal_dir):
    call = search_tool([tmp_path / "nologs"], journal_dirs=[journal_dir])
    out = await call(pattern="error", source="journal")
    assert out["total_matched"] == 3
    assert [h["line"] for h in out["hits"]] == ["checkout ERROR retry 1 ok", "nginx ERROR upstream prematurely closed",
                                               "checkout ERROR: connection to postgres-main refused"]
    first = out["hits"][2]
    assert first["unit"] == "checkout.service" and first["timestamp"] == "2026-03-02T10:01:00Z"
    assert first["cursor"].startswith("s=") and "i=" in first["cursor"] and first["host"] == "local"
    unit = await call(pattern="error", source="journal", unit="checkout")
    assert {h["unit"] for h in unit["hits"]} == {"checkout.service"} and unit["total_matched"] == 2
    urgent = await call(pattern="error", source="journal", priority="warning")
    assert sorted(h["unit"] for h in urgent["hits"]) == ["checkout.service", "nginx.service"]
    window = await call(pattern="error", source="journal", since=1_772_445_600 + 90, until="2026-03-02T10:02:30Z")
    assert [h["line"] for h in window["hits"]] == ["nginx ERROR upstream prematurely closed"]
    with pytest.raises(ToolError, match="unit"):
        await call(pattern="x", source="journal", unit="--all")


async def test_both_sources_merge_newest_first(logs, journal_dir):
    out = await search_tool([logs], journal_dirs=[journal_dir])(pattern="refused")
    kinds = ["unit" if "unit" in h else "file" for h in out["hits"]]
    assert kinds == ["unit"]
    out = await search_tool([logs], journal_dirs=[journal_dir])(pattern="error", limit=2)
    assert out["total_matched"] >= 7 and out["more_available"] is True and len(out["hits"]) == 2


# ---- over ssh (the test sshd of test_ssh.py: this machine as host 'lo-ssh') ----

from tests.host.test_ssh import _host, _settings, sshd  # noqa: E402,F401  (the module-scoped sshd fixture)


async def test_search_logs_over_ssh_matches_local(sshd, logs):  # noqa: F811
    remote = search_tool([logs], hosts=(_host(sshd),), settings=_settings(sshd))
    local = search_tool([logs])
    there = await remote(pattern="error", source="files", host="lo-ssh")
    here = await local(pattern="error", source="files")
    assert there["total_matched"] == here["total_matched"] == 4
    strip = [{k: v for k, v in h.items() if k != "host"} for h in there["hits"]]
    assert strip == [{k: v for k, v in h.items() if k != "host"} for h in here["hits"]]
    assert {h["host"] for h in there["hits"]} == {"lo-ssh"}
    # a file name forged to look like another listing row names nothing outside logs.dirs
    forged_dir = logs / "x\n1.0\t10\t" / "etc"
    forged_dir.mkdir(parents=True)
    (forged_dir / "hostname").write_text("error in a strangely named file\n")
    forged = await remote(pattern="e", source="files", host="lo-ssh")
    assert all(s["file"].startswith(str(logs)) for s in forged["sources"])
    assert any(h["line"] == "error in a strangely named file" for h in forged["hits"])
    with pytest.raises(ToolError, match="outside logs.dirs"):
        await remote(pattern="x", host="lo-ssh", paths=["/etc/passwd"])
    with pytest.raises(ToolError, match="password-hash"):
        await search_tool(["/etc"], hosts=(_host(sshd),), settings=_settings(sshd))(
            pattern="root", host="lo-ssh", paths=["/etc/shadow"])


async def test_search_logs_time_limit_gives_a_partial_result(tmp_path, monkeypatch):
    from ongrid_host import logs_tool
    d = tmp_path / "logs"
    d.mkdir()
    (d / "busy.log").write_bytes(b"2026-03-02T10:00:00Z ERROR busy\n" * 2_000_000)
    monkeypatch.setattr(logs_tool, "DEFAULT_TIME_LIMIT_S", 0.2)
    started = time.monotonic()
    out = await search_tool([d])(pattern="error", source="files", since="2026-01-01T00:00:00Z")
    assert time.monotonic() - started < 3
    assert out["complete"] is False and out["more_available"] is True
    assert 0 < out["total_matched"] < 2_000_000 and out["sources"][0]["partial"] is True


async def test_journal_over_ssh(sshd, tmp_path, journal_dir):  # noqa: F811
    remote = search_tool([tmp_path / "nologs"], journal_dirs=[journal_dir], hosts=(_host(sshd),),
                         settings=_settings(sshd))
    out = await remote(pattern="refused", source="journal", host="lo-ssh", unit="checkout.service")
    assert [(h["host"], h["unit"], h["line"]) for h in out["hits"]] == [
        ("lo-ssh", "checkout.service", "checkout ERROR: connection to postgres-main refused")]


async def test_credentials_in_log_lines_are_hidden(tmp_path):
    # another program's log holds its connection string, a header and a config dump: the hits show the lines
    # with the values hidden and say so; a search that finds none of them has no "redacted"
    d = tmp_path / "logs"
    d.mkdir()
    (d / "app.log").write_text(
        "2026-03-02T10:00:00Z ERROR connect postgres://app:s3cr3t-pw@db:5432/x failed\n"
        '2026-03-02T10:00:01Z DEBUG request headers Authorization: Bearer tok-AbC123 "x-trace: 1"\n'
        "2026-03-02T10:00:02Z INFO config db_password = hunter2-long retries = 3\n"
        "2026-03-02T10:00:03Z INFO nothing secret here\n")
    call = search_tool([d])
    out = await call(pattern="2026-03-02", source="files")
    lines = "\n".join(h["line"] for h in out["hits"])
    assert out["total_matched"] == 4 and out["redacted"].startswith("values that look like credentials")
    assert all(s not in lines for s in ("s3cr3t-pw", "tok-AbC123", "hunter2-long"))
    assert "postgres://app:***@db:5432/x" in lines and "Authorization: Bearer ***" in lines
    assert "db_password = *** retries = 3" in lines and "nothing secret here" in lines
    assert "redacted" not in await call(pattern="nothing secret", source="files")
