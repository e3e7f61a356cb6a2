"""Audit records: the kernel writes a command's arguments in hexadecimal as soon as one holds a
space, a quote or a control character, so a secret on such a command line is hidden only once
decoded — by the credential filter (``host_bash`` output, ``search_logs`` hits) — and
``search_logs`` finds such a record by the command it decodes to: in ``audit.log`` and in a real
journal file holding a ``_TRANSPORT=audit`` entry (made by Debian's systemd-journal-remote)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ongridd.auditargs import audit_command
from ongridd.credfilter import redact_credentials
from tests.conftest import need
from tests.host.test_search_logs import JOURNAL_REMOTE, search_tool


def hexa(*words: str) -> str:
    """Words as the kernel writes a value that needs it: upper-case hexadecimal, NUL between words."""
    return "\0".join(words).encode().hex().upper()


MYSQL_EXECVE = f'type=EXECVE msg=audit(1772445600.123:456): argc=4 a0="mysql" a1="-uroot" a2={hexa("-pcorrect horse")} a3="db"'


@pytest.mark.parametrize("line, shown", [
    # quoted arguments: the record's words are not a command line until joined
    ('type=EXECVE msg=audit(1.2:3): argc=3 a0="mysql" a1="-uroot" a2="-pS3cretPass"',
     "type=EXECVE msg=audit(1.2:3): args (decoded): mysql -uroot -p***"),
    (MYSQL_EXECVE, "type=EXECVE msg=audit(1772445600.123:456): args (decoded): mysql -uroot -p*** db"),
    # a value split into pieces (aK_len, aK[0], aK[1]…)
    (f'type=EXECVE msg=audit(1.2:3): argc=3 a0="sh" a1="-c" a2_len=26 a2[0]={hexa("echo x; mysql -p")} '
     f'a2[1]={hexa("Pw12345678")}', "type=EXECVE msg=audit(1.2:3): args (decoded): sh -c echo x; mysql -p***"),
    # an option's value holding a secret of its own goes whole
    (f'type=EXECVE argc=3 a0="su" a1={hexa("--command=mysql -pHunter2 db")} a2="bob"',
     "type=EXECVE args (decoded): su --command=*** bob"),
    # PROCTITLE: the whole argument vector, NUL-separated
    (f"type=PROCTITLE msg=audit(1.2:3): proctitle={hexa('mysql', '--password=hunter22', 'db')}",
     "type=PROCTITLE msg=audit(1.2:3): proctitle (decoded): mysql --password=*** db"),
    # sudo's USER_CMD: the rest of the record stays as it was
    (f"type=USER_CMD msg=audit(1.2:3): pid=1 uid=1000 msg='cwd=\"/root\" cmd={hexa('redis-cli -a topsecretpw ping')} "
     "terminal=pts/0 res=success'",
     "type=USER_CMD msg=audit(1.2:3): pid=1 uid=1000 msg='cwd=\"/root\" cmd (decoded): redis-cli -a *** ping "
     "terminal=pts/0 res=success'"),
    # the journal's short output, and its JSON output (quotes escaped)
    (f'Mar 02 10:00:00 web-1 audit[12]: EXECVE argc=3 a0="curl" a1="-H" a2={hexa("Authorization: Bearer abcdefgh12345678")}',
     "Mar 02 10:00:00 web-1 audit[12]: EXECVE args (decoded): curl -H Authorization:***"),
    ('{"MESSAGE":"EXECVE argc=3 a0=\\"mysql\\" a1=\\"-uroot\\" a2=\\"-pS3cretPass\\""}',
     '{"MESSAGE":"EXECVE args (decoded): mysql -uroot -p***"}'),
    # a script's newline stays on the record's line, escaped
    (f'type=EXECVE argc=3 a0="bash" a1="-c" a2={hexa("mysql -e status -pHunter2" + chr(10) + "date")}',
     "type=EXECVE args (decoded): bash -c mysql -e status -p***\\x0adate"),
    # nothing secret: the record as it was, hexadecimal included
    ('type=EXECVE msg=audit(1.2:3): argc=2 a0="ls" a1="/tmp"', 'type=EXECVE msg=audit(1.2:3): argc=2 a0="ls" a1="/tmp"'),
    (f"type=PROCTITLE msg=audit(1.2:3): proctitle={hexa('ls', '-la')}", f"type=PROCTITLE msg=audit(1.2:3): proctitle={hexa('ls', '-la')}"),
    # no audit record: a0= without argc=, a cmd= that is no hexadecimal
    ("a0=DEADBEEF without a count", "a0=DEADBEEF without a count"), ("cmd=CAFE here", "cmd=CAFE here"),
])
def test_a_secret_in_an_audit_record_is_hidden_decoded(line, shown):
    assert redact_credentials(line) == shown


def test_the_decoded_command():
    record = audit_command(MYSQL_EXECVE)
    assert record is not None and record.kind == "args" and record.text == "mysql -uroot -pcorrect horse db"
    assert MYSQL_EXECVE[record.start:record.end].startswith("argc=4") and record.end == len(MYSQL_EXECVE)
    bad = audit_command("type=EXECVE argc=1 a0=FF00")  # not UTF-8: the odd byte kept as \xNN, the NUL escaped
    assert bad is not None and bad.text == "\\xff\0" and bad.shown() == "args (decoded): \\xff\\x00"
    assert audit_command("argc=1 a0=(null)") is not None and audit_command("nothing here") is None


def test_hostile_records_cost_linear_time():
    for hostile in ("argc=1 a0=" + "4" * 400_001, 'argc=1 a0="' + "x" * 400_000, 'a0="' * 100_000 + "argc=1",
                    "argc=1 " + "a0=41 " * 60_000, "proctitle=" + "41" * 200_000 + "G", "cmd=" * 100_000,
                    "argc=1 a1[" * 50_000, f"argc=1 a0={hexa('--password=' + 'x' * 200_000)}"):
        assert len(redact_credentials(hostile)) <= 2 * len(hostile)


async def test_host_bash_hides_it_in_an_audit_log(call, tmp_path):
    log = tmp_path / "audit.log"
    log.write_text(MYSQL_EXECVE + "\n")
    out = await call("host_bash", {"cmd": f"cat {log}"})
    assert "args (decoded): mysql -uroot -p*** db" in out["stdout"] and out["redacted"], out
    assert hexa("-pcorrect horse") not in out["stdout"]


async def test_search_logs_finds_it_by_its_command_in_a_file(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "audit.log").write_text(f"type=SYSCALL msg=audit(1772445600.123:456): syscall=59 success=yes\n"
                                    f"{MYSQL_EXECVE}\n"
                                    f"type=PROCTITLE msg=audit(1772445600.123:456): proctitle={hexa('ls', '-la', '/srv')}\n")
    call = search_tool([logs])
    out = await call(pattern="mysql -uroot", source="files")
    assert [h["line"] for h in out["hits"]] == [
        "type=EXECVE msg=audit(1772445600.123:456): args (decoded): mysql -uroot -p*** db"], out
    assert out["redacted"]
    listing = await call(pattern="ls -la /srv", source="files")  # nothing secret: shown decoded all the same
    assert [h["line"] for h in listing["hits"]] == [
        "type=PROCTITLE msg=audit(1772445600.123:456): proctitle (decoded): ls -la /srv"]
    assert (await call(pattern="audit(1772445600", source="files"))["total_matched"] == 3


@pytest.fixture
def audit_journal(tmp_path: Path) -> Path:
    """A journal file holding one audit record (``_TRANSPORT=audit``), as journald stores it."""
    need(JOURNAL_REMOTE is not None and shutil.which("journalctl") is not None,
         "systemd-journal-remote and journalctl (Debian package systemd-journal-remote)")
    export = tmp_path / "export.txt"
    message = MYSQL_EXECVE.split(": ", 1)[1]  # journald keeps the record without its type= msg=audit() head
    export.write_text(f"__CURSOR=s=0;i=1\n__REALTIME_TIMESTAMP=1772445600123000\n__MONOTONIC_TIMESTAMP=1000\n"
                      f"_BOOT_ID=0123456789abcdef0123456789abcdef\n_TRANSPORT=audit\nSYSLOG_IDENTIFIER=audit\n"
                      f"_AUDIT_TYPE_NAME=EXECVE\nMESSAGE=EXECVE {message}\n_HOSTNAME=web-1\n\n")
    journal = tmp_path / "journal"
    journal.mkdir()
    subprocess.run([JOURNAL_REMOTE, f"--output={journal / 'remote.journal'}", str(export)], check=True,
                   capture_output=True, timeout=30)
    return journal


async def test_search_logs_finds_it_by_its_command_in_the_journal(tmp_path, audit_journal):
    call = search_tool([tmp_path / "nologs"], journal_dirs=[audit_journal])
    for pattern in ("mysql", "EXECVE"):
        out = await call(pattern=pattern, source="journal")
        assert [h["line"] for h in out["hits"]] == ["EXECVE args (decoded): mysql -uroot -p*** db"], out
        assert out["hits"][0]["unit"] == "audit" and out["redacted"]
    assert (await call(pattern="horse", source="journal"))["total_matched"] == 1  # found, and still hidden
