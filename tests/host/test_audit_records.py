"""Audit records: the kernel writes a command's arguments in hexadecimal as soon as one holds a
space, a quote or a control character, so a secret on such a command line is hidden only once
decoded — by the credential filter (``host_bash`` output, ``search_logs`` hits) — and
``search_logs`` finds such a record by the command it decodes to: in ``audit.log`` and in a real
journal file holding a ``_TRANSPORT=audit`` entry (made by Debian's systemd-journal-remote)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ongridd.auditargs import audit_records
from ongridd.credfilter import redact_credentials
from tests.host.test_search_logs import search_tool, write_journal


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
     f'a2[1]={hexa("Pw12345678")}', "type=EXECVE msg=audit(1.2:3): args (decoded): sh -c 'echo x; mysql -p***'"),
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
     "type=EXECVE args (decoded): bash -c 'mysql -e status -p***\\x0adate'"),
    # an argument holding a space, after a password option, goes whole (the decoded words keep their ends)
    (f'type=EXECVE msg=audit(1.2:3): argc=4 a0="mysql" a1="--password" a2={hexa("correct horse")} a3="db"',
     "type=EXECVE msg=audit(1.2:3): args (decoded): mysql --password *** db"),
    (f"type=PROCTITLE msg=audit(1.2:3): proctitle={hexa('redis-cli', '-a', 'correct horse', 'ping')}",
     "type=PROCTITLE msg=audit(1.2:3): proctitle (decoded): redis-cli -a *** ping"),
    (f'type=EXECVE argc=3 a0="mysql" a1="-uroot" a2={hexa("-pcorrect" + chr(9) + "horse")}',
     "type=EXECVE args (decoded): mysql -uroot -p***"),
    # a script's continued line is one command; a script's quoted words keep their quotes
    (f'type=EXECVE argc=3 a0="/bin/sh" a1="-c" a2={hexa("mysqldump -uroot " + chr(92) + chr(10) + "  -pS3cretPass --all")}',
     "type=EXECVE args (decoded): /bin/sh -c 'mysqldump -uroot \\\\x0a  -p*** ***'"),  # alone, -pS3cretPass names a secret
    # ausearch -i prints the arguments decoded, unquoted
    ("type=EXECVE msg=audit(03/02/2026 10:00:00.123:456) : argc=3 a0=mysql a1=-uroot a2=-pS3cretPass",
     "type=EXECVE msg=audit(03/02/2026 10:00:00.123:456) : args (decoded): mysql -uroot -p***"),
    ("type=PROCTITLE msg=audit(03/02/2026 10:00:00.123:456) : proctitle=mysql -uroot -pS3cretPass db",
     "type=PROCTITLE msg=audit(03/02/2026 10:00:00.123:456) : proctitle (decoded): 'mysql -uroot -p*** db'"),
    # a JSON string's escaped backslash; the kernel log's line cut in the middle of a digit pair
    ('{"MESSAGE":"EXECVE argc=4 a0=\\"curl\\" a1=\\"-u\\" a2=\\"bob:p\\\\w0rd\\" a3=\\"https://h\\""}',
     '{"MESSAGE":"EXECVE args (decoded): curl -u bob:*** https://h"}'),
    (f'[ 12.3] audit: type=1309 audit(1.2:3): argc=3 a0="bash" a1="-c" a2={hexa("mysql -pS3cretPass -e status")[:-1]}',
     "[ 12.3] audit: type=1309 audit(1.2:3): args (decoded): bash -c 'mysql -p*** -e statu'"),
    # several records on one line: each on its own (a SYSCALL's a0= … are no arguments)
    (f'type=SYSCALL msg=audit(1.2:3): syscall=59 a0=55d5 a1=1000 type=EXECVE msg=audit(1.2:3): argc=2 a0="mysql" '
     f'a1="-pS3cretPass" type=PROCTITLE msg=audit(1.2:3): proctitle={hexa("mysql", "-pS3cretPass")}',
     "type=SYSCALL msg=audit(1.2:3): syscall=59 a0=55d5 a1=1000 type=EXECVE msg=audit(1.2:3): args (decoded): "
     "mysql -p*** type=PROCTITLE msg=audit(1.2:3): proctitle (decoded): mysql -p***"),
    # nothing secret: the record as it was, hexadecimal included
    ('type=EXECVE msg=audit(1.2:3): argc=2 a0="ls" a1="/tmp"', 'type=EXECVE msg=audit(1.2:3): argc=2 a0="ls" a1="/tmp"'),
    (f"type=PROCTITLE msg=audit(1.2:3): proctitle={hexa('ls', '-la')}", f"type=PROCTITLE msg=audit(1.2:3): proctitle={hexa('ls', '-la')}"),
    # no audit record: a0= without argc=, a cmd= that is no hexadecimal
    ("a0=DEADBEEF without a count", "a0=DEADBEEF without a count"), ("cmd=CAFE here", "cmd=CAFE here"),
])
def test_a_secret_in_an_audit_record_is_hidden_decoded(line, shown):
    assert redact_credentials(line) == shown


S = "Zq9xTrv7Lm"


@pytest.mark.parametrize("text, shown", [
    # ausearch -i: arguments decoded with their spaces, up to the next argument's field
    (f"type=EXECVE msg=audit(11/14/2023 10:00:00.123:456) : argc=3 a0=bash a1=-c a2=mysql -uroot -p{S}",
     "type=EXECVE msg=audit(11/14/2023 10:00:00.123:456) : args (decoded): bash -c 'mysql -uroot -p***'"),
    (f"type=EXECVE msg=audit(11/14/2023 10:00:00.123:456) : argc=4 a0=mysql a1=-uroot a2=--password a3=correct {S}",
     "type=EXECVE msg=audit(11/14/2023 10:00:00.123:456) : args (decoded): mysql -uroot --password ***"),
    (f"type=EXECVE msg=audit(11/14/2023 10:00:00.123:456) : argc=3 a0=bash a1=-c a2=mysql\\ -uroot\\ -p{S}",
     "type=EXECVE msg=audit(11/14/2023 10:00:00.123:456) : args (decoded): bash -c 'mysql -uroot -p***'"),
    # … and sudo's command up to the fields sudo writes after it (cn=admin is part of it)
    (f"type=USER_CMD msg=audit(11/14/2023 10:00:00.123:456) : pid=1 uid=bob msg='cwd=/root cmd=ldapsearch -x -D "
     f"cn=admin,dc=example,dc=com -w {S} -b dc=example,dc=com terminal=pts/0 res=success'",
     "type=USER_CMD msg=audit(11/14/2023 10:00:00.123:456) : pid=1 uid=bob msg='cwd=/root cmd (decoded): ldapsearch "
     "-x -D cn=admin,dc=example,dc=com -w *** -b dc=example,dc=com terminal=pts/0 res=success'"),
    # an argument holding "type=" starts no record
    (f'type=EXECVE msg=audit(1.2:456): argc=5 a0="curl" a1="-d" a2="type=deploy" a3="-H" '
     f'a4={hexa("Authorization: Bearer q8Xw2LmZp0RtY7vK")}',
     "type=EXECVE msg=audit(1.2:456): args (decoded): curl -d type=deploy -H Authorization:***"),
    # a line cut by the kernel log or by search_logs, in a quoted value or between two hex digits
    (f'[ 12.3] audit: type=1309 audit(1.2:3): argc=3 a0="sshpass" a1="-p" a2="{S}',
     "[ 12.3] audit: type=1309 audit(1.2:3): args (decoded): sshpass -p ***"),
    (f'type=EXECVE argc=3 a0="bash" a1="-c" a2={hexa("mysql -uroot -p" + S)[:-1]} …[99 more bytes cut]',
     "type=EXECVE args (decoded): bash -c 'mysql -uroot -p***' …[99 more bytes cut]"),
    # the journal drops the event's serial: the record before goes on
    (f'Mar 02 10:00:00 web-1 audit[12]: EXECVE argc=4 a0="mysql" a1="-uroot" a2="-e"\n'
     f'Mar 02 10:00:00 web-1 audit[12]: EXECVE a3="-p{S}"',
     'Mar 02 10:00:00 web-1 audit[12]: EXECVE argc=4 a0="mysql" a1="-uroot" a2="-e"\n'
     "Mar 02 10:00:00 web-1 audit[12]: EXECVE args (decoded): -p***"),
    # an argument split between two records is checked whole, and shown whole where it ends
    (f'type=EXECVE msg=audit(1.2:3): argc=3 a0="sh" a1="-c" a2_len=40 a2[0]={hexa("echo x; mysql -uroot -p")}\n'
     f'type=EXECVE msg=audit(1.2:3): a2[1]={hexa(S + "; date")}',
     f'type=EXECVE msg=audit(1.2:3): argc=3 a0="sh" a1="-c" a2_len=40 a2[0]={hexa("echo x; mysql -uroot -p")}\n'
     "type=EXECVE msg=audit(1.2:3): args (decoded): 'echo x; mysql -uroot -p***; date'"),
    # what was typed at a terminal (pam_tty_audit)
    (f'type=TTY msg=audit(1.2:3): tty pid=1 comm="bash" data={hexa("mysql -uroot -p" + S)}0D',
     'type=TTY msg=audit(1.2:3): tty pid=1 comm="bash" data (decoded): mysql -uroot -p***\\x0a'),
    (f'Mar 02 10:00:00 web-1 audit[12]: USER_TTY pid=1 uid=0 msg=\'data={hexa("redis-cli -a " + S)}0D\'',
     "Mar 02 10:00:00 web-1 audit[12]: USER_TTY pid=1 uid=0 msg='data (decoded): redis-cli -a ***\\x0a'"),
    # an argument split between two records: the option before it stays its context
    ('type=EXECVE msg=audit(1.2:3): argc=4 a0="mysql" a1="--password" a2_len=12 a2[0]="Sec"\n'
     'type=EXECVE msg=audit(1.2:3): a2[1]="retPass99" a3="db"',
     'type=EXECVE msg=audit(1.2:3): args (decoded): mysql --password ***\n'
     "type=EXECVE msg=audit(1.2:3): args (decoded): *** db"),
    ('type=EXECVE msg=audit(1.2:8): argc=1 a0_len=20 a0[0]="--pass"\ntype=EXECVE msg=audit(1.2:8): a0[1]="word=Secret12"',
     'type=EXECVE msg=audit(1.2:8): argc=1 a0_len=20 a0[0]="--pass"\n'
     "type=EXECVE msg=audit(1.2:8): args (decoded): --password=***"),
    # a script starting with an assignment keeps its words; an argument's own private-use characters stay
    (f'type=EXECVE argc=3 a0="bash" a1="-c" a2={hexa("DEBUG=1 ./deploy.sh --token " + S + " && echo done")}',
     "type=EXECVE args (decoded): bash -c 'DEBUG=1 ./deploy.sh --token *** && echo done'"),
    (f'type=EXECVE argc=3 a0="x\ue005y" a1="--token" a2="{S}"', "type=EXECVE args (decoded): x\ue005y --token ***"),
    # journalctl -o json writes a message with a control character as its bytes
    ('{"MESSAGE":' + str(list(f"\x1b[32mconnect postgres://app:{S}@db/app".encode())).replace(" ", "") + '}',
     '{"MESSAGE":"\\u001b[32mconnect postgres://app:***@db/app"}'),
    ('{"MESSAGE":[104,105],"x":[1,2,300]}', '{"MESSAGE":[104,105],"x":[1,2,300]}'),
    # spaces around the colon and the numbers, as older journalctl writes them
    ('{ "MESSAGE" : [ ' + ", ".join(str(b) for b in f"mysql -p{S}".encode()) + ' ] }',
     '{ "MESSAGE" : "mysql -p***" }'),
    # whitespace JSON does not know between the numbers: no byte array, and no error
    *((f'{{"MESSAGE":[{c}49]}}', f'{{"MESSAGE":[{c}49]}}') for c in "\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0"),
    # a shell command continued over lines; a line ending in a Windows folder continues nothing
    (f"mysql \\\n  -h db \\\r\n  -uroot \\\n  -p{S} \\\n  --batch",
     "mysql \\\n  -h db \\\r\n  -uroot \\\n  -p*** \\\n  --batch"),
    (f"- name: LOG_DIR\n  value: C:\\logs\\\n- name: DB_PASSWORD\n  value: {S}",
     "- name: LOG_DIR\n  value: C:\\logs\\\n- name: DB_PASSWORD\n  value: ***"),
    (f"log_dir: C:\\logs\\\nssh_password: |\n  {S}", "log_dir: C:\\logs\\\nssh_password: |\n  ***"),
    (f"backup_dir D:\\backup\\\nauth_pass {S}", "backup_dir D:\\backup\\\nauth_pass ***"),
    (f"  - --token \\\n  - {S}", "  - --token \\\n  - ***"),
])
def test_shapes_an_attack_found(text, shown):
    assert redact_credentials(text) == shown


def test_an_event_goes_on_in_its_next_record():
    # the kernel starts a new EXECVE record after some 7,500 bytes: only the first has argc=
    first = 'type=EXECVE msg=audit(1772445600.1:77): argc=203 a0="mysql" ' + " ".join(f'a{i}="f{i}"' for i in range(1, 200))
    second = 'type=EXECVE msg=audit(1772445600.1:77): a200="db" a201="-uroot" a202="-pS3cretPass"'
    shown = redact_credentials(first + "\n" + second).split("\n")
    assert shown[0] == first and shown[1] == "type=EXECVE msg=audit(1772445600.1:77): args (decoded): db -uroot -p***"
    other = second.replace(":77)", ":78)")  # another event: no mysql before it
    assert redact_credentials(first + "\n" + other).split("\n")[1] == other


def test_a_continued_shell_line_is_one_command():
    script = "mysqldump -uroot \\\n  -pS3cretPass --all-databases > /backup/all.sql\nredis-cli --pass \\\n  hunter22 ping"
    # a word either reading hides is hidden: in the command, -pX is mysqldump's password; on its own line,
    # -pS3cretPass reads as an option naming a secret, so the word after it goes too
    assert redact_credentials(script) == ("mysqldump -uroot \\\n  -p*** *** > /backup/all.sql\n"
                                          "redis-cli --pass \\\n  *** ping")
    assert redact_credentials("redis-cli -a \\\n  --password Zq9xTrv7Lm") == "redis-cli -a \\\n  *** ***"


def test_the_decoded_command():
    (record,) = audit_records(MYSQL_EXECVE)
    assert record.kind == "args" and record.words == ("mysql", "-uroot", "-pcorrect horse", "db")
    assert record.event == "456" and record.first == 0
    assert MYSQL_EXECVE[record.start:record.end].startswith("argc=4") and record.end == len(MYSQL_EXECVE)
    assert record.shown() == "args (decoded): mysql -uroot '-pcorrect horse' db"  # where each argument ends
    (bad,) = audit_records("type=EXECVE argc=1 a0=FF00")  # not UTF-8: the odd byte kept as \xNN, the NUL escaped
    assert bad.words == ("\\xff\0",) and bad.shown() == "args (decoded): '\\xff\\x00'"
    # a character split between two pieces stays whole; a line cut in the middle of a digit pair
    (split,) = audit_records("type=EXECVE argc=2 a0=\"echo\" a1_len=4 a1[0]=6361C3 a1[1]=A920")
    assert split.words == ("echo", "ca\u00e9 ")
    (cut,) = audit_records(f"audit: type=1309 audit(1.2:3): argc=2 a0=\"echo\" a1={hexa('ok then')}4")
    assert cut.words == ("echo", "ok then")
    assert audit_records("nothing here") == [] and audit_records("ioctl cmd=5401 arg=0") == []
@pytest.mark.timeout(120)  # each input takes well under 5 s here; one quadratic in its length takes minutes
def test_hostile_records_cost_linear_time():
    for hostile in ("argc=1 a0=" + "4" * 400_001, 'argc=1 a0="' + "x" * 400_000, 'a0="' * 100_000 + "argc=1",
                    "argc=1 " + "a0=41 " * 60_000, "proctitle=" + "41" * 200_000 + "G", "cmd=" * 100_000,
                    "argc=1 a1[" * 50_000, f"argc=1 a0={hexa('--password=' + 'x' * 200_000)}",
                    "audit(1:2) proctitle=" + "a " * 200_000, "audit(1:2) cmd=" + "x " * 200_000,
                    "audit(1:2) " + "type=EXECVE argc=1 a0=x " * 20_000, "audit(1:2) argc=1 " + "a1=-p\\\n" * 60_000,
                    "audit(1:2) argc=2 a0=sh a1=" + hexa("--x=" + "a b " * 100_000), "EXECVE a0=" + "\\\n" * 100_000,
                    "type=PROCTITLE msg=audit(1.2:3) : proctitle=x" + " " * 400_000 + "y",
                    "type=USER_CMD msg=audit(1.2:3) : cmd=x" + " \t" * 200_000 + "y",
                    'type=EXECVE msg=audit(1.2:3): argc=3 a0=' + hexa("m y" * 33_000) + "\n"
                    + 'type=EXECVE msg=audit(1.2:3): a5="x"\n' * 5_000, '{"M":[' + "1," * 200_000,
                    '{"M":[' + "65," * 130_000 + "1]}", "mysql \\\n" * 60_000,
                    "x bob[77]: EXECVE argc=1 " + "(a1=y " * 60_000, "EXECVE argc=1 " + '"a1=y ' * 60_000,
                    "\\ x " * 100_000):
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
    message = MYSQL_EXECVE.split(": ", 1)[1]  # journald keeps the record without its type= msg=audit() head
    return write_journal(tmp_path, f"__CURSOR=s=0;i=1\n__REALTIME_TIMESTAMP=1772445600123000\n__MONOTONIC_TIMESTAMP=1000\n"
                                   f"_BOOT_ID=0123456789abcdef0123456789abcdef\n_TRANSPORT=audit\nSYSLOG_IDENTIFIER=audit\n"
                                   f"_AUDIT_TYPE_NAME=EXECVE\nMESSAGE=EXECVE {message}\n_HOSTNAME=web-1\n\n")


async def test_search_logs_finds_it_by_its_command_in_the_journal(tmp_path, audit_journal):
    call = search_tool([tmp_path / "nologs"], journal_dirs=[audit_journal])
    for pattern in ("mysql", "EXECVE"):
        out = await call(pattern=pattern, source="journal")
        assert [h["line"] for h in out["hits"]] == ["EXECVE args (decoded): mysql -uroot -p*** db"], out
        assert out["hits"][0]["unit"] == "audit" and out["redacted"]
    assert (await call(pattern="horse", source="journal"))["total_matched"] == 1  # found, and still hidden
