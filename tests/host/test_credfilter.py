"""Secret-looking values in other processes' command lines never reach the model: the redactor,
and host_bash / get_host_processes on a real process that carries them."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from ongridd.credfilter import redact_credentials
from ongrid_host.local import redact_cmdline


@pytest.mark.parametrize(("line", "shown"), [
    ("app --token sk-live-1 --port 80", "app --token *** --port 80"),
    ("app --password=hunter2 -v", "app --password=*** -v"),
    ("app --api-key AKIA1 --access_key=AKIA2 --secret s", "app --api-key *** --access_key=*** --secret ***"),
    ("env DB_PASSWORD=hunter2 TOKEN:abc app", "env DB_PASSWORD=*** TOKEN:*** app"),
    ("psql postgres://ops:hunter2@db:5432/x", "psql postgres://ops:***@db:5432/x"),
    ("curl -H Authorization: Bearer tok123 https://x", "curl -H Authorization: Bearer *** https://x"),
    ("/usr/bin/mysql -uroot -phunter2 db", "/usr/bin/mysql -uroot -p*** db"),
    ("pgrep -p 12 nginx", "pgrep -p 12 nginx"),  # not a MySQL client: -p is not a password
    ("nginx: worker process", "nginx: worker process"),
    ("app --token -AbC9 --verbose", "app --token *** --verbose"),  # a token may start with a dash
    ("app --author alice --keyfile /etc/k.pem", "app --author alice --keyfile /etc/k.pem"),  # not credentials
    ("mysqld --key_buffer_size=16M --key abc", "mysqld --key_buffer_size=16M --key ***"),
    ("curl -H Authorization:Bearer tok123 x", "curl -H Authorization:Bearer *** x"),
    ("psql postgres://ops:p@ss@db/x", "psql postgres://ops:***@db/x"),
    ("mount -o username=bob,password=hunter2 //h/s", "mount -o username=bob,password=*** //h/s"),
    ("env PGPASSWORD=hunter2 AWS_SECRET_ACCESS_KEY=k apiKey=z", "env PGPASSWORD=*** AWS_SECRET_ACCESS_KEY=*** apiKey=***"),
    ("https://example.org/a:b@c", "https://example.org/a:b@c"),  # no user information
    ("curl -u admin:hunter2 https://x", "curl -u admin:*** https://x"),
    ("curl --user=admin:hunter2 x", "curl --user=admin:*** x"),
    ("curl -H Authorization: Basic dXNlcjpodW50ZXIy x", "curl -H Authorization: Basic *** x"),
    ("redis-cli -a hunter2 ping", "redis-cli -a *** ping"),
    ("sshpass -p hunter2 ssh h", "sshpass -p *** ssh h"),
    ("/usr/bin/ldapsearch -x -w hunter2", "/usr/bin/ldapsearch -x -w ***"),
    ("smbclient -U admin%hunter2 //h/s", "smbclient -U admin%*** //h/s"),
    ("docker run --env=MYSQL_ROOT_PASSWORD=hunter2 img", "docker run --env=MYSQL_ROOT_PASSWORD=*** img"),
    ("helm --set=db.password=hunter2", "helm --set=db.password=***"),
    ('Environment="DB_PASSWORD=hunter2" "X=1"', 'Environment="DB_PASSWORD=***" "X=1"'),
    ("curl https://api/x?api_key=hunter2&page=2", "curl https://api/x?api_key=***&page=2"),
    ("env MYSQL_PWD=hunter2 mysqlslap -phunter2", "env MYSQL_PWD=*** mysqlslap -p***"),
    ('app {"password":"hunter2","user":"ops"}', 'app {"password":"***","user":"ops"}'),
    ("curl -H Cookie: session=hunter2", "curl -H Cookie: ***"),
    ("app --token\x1chunter2", "app --token\x1c***"),  # any whitespace but a line break separates words
    ("psql -U postgres -h db", "psql -U postgres -h db"),  # a user name, no password
    ("java -cp /a/b:/c/d Main", "java -cp /a/b:/c/d Main"),
    # configuration files (host_bash output): INI, YAML, TOML and shell shapes, quoted values with spaces
    ("password = hunter2", "password = ***"),
    ("  db_password: 'hunter 2'  # rotated", "  db_password: '***'  # rotated"),  # quotes kept
    ('secret_key = "a b c"', 'secret_key = "***"'),
    ("password =hunter2", "password =***"),
    ("password= hunter2", "password= ***"),
    ('export DB_PASSWORD="hunter 2" X=1', "export DB_PASSWORD=*** X=1"),
    ('"api_key" = "k1"', '"api_key" = "***"'),
    ("app --token 'a b' -v", "app --token '***' -v"),
    ("key_buffer_size = 16M", "key_buffer_size = 16M"),  # not credentials, as on a command line
    ("author: bob", "author: bob"),
    ('{"password":"a b","x":1}', '{"password":"***","x":1}'),  # a JSON string with a space in it
    ('{"headers":{"Authorization":"Bearer tok-1"},"u":"ops"}', '{"headers":{"Authorization":"***"},"u":"ops"}'),
    ('{"msg":"a b","n":1}', '{"msg":"a b","n":1}'),
    # what real logs and configs hold
    ('{"user": "svc", "password": "hunter2"}', '{"user": "svc", "password": "***"}'),  # json.dumps spacing
    ('{"api_key": "AKIA1234567890SECRET", "user": "svc"}', '{"api_key": "***", "user": "svc"}'),
    ('{"token" : "a b", "n": 1}', '{"token" : "***", "n": 1}'),
    ('{"password":"hun\\"ter2 two","x":1}', '{"password":"***","x":1}'),  # an escaped quote inside
    ('{"log":"{\\"password\\":\\"hunter2\\"}"}', '{"log":"{\\"password\\":\\"***\\"}"}'),
    ("requirepass hunter2", "requirepass ***"), ("masterauth hunter2", "masterauth ***"),
    ("    auth_pass hunter2", "    auth_pass ***"), ("password\thunter2", "password\t***"),
    ("machine db login ops password hunter2", "machine db login ops password ***"),
    ("<password>hunter2</password>", "<password>***</password>"),
    ("<user>ops</user><secret>s3</secret>", "<user>ops</user><secret>***</secret>"),
    ('"MYSQL_ROOT_PASSWORD=hunter2",', '"MYSQL_ROOT_PASSWORD=***",'),
    ("Cookie: a=1; sessionid=hunter2; x=2", "Cookie: *** *** ***"),
    ('10.0.0.1 - - "GET / HTTP/1.1" 200 "Bearer eyJhbGciOi.x.y"', '10.0.0.1 - - "GET / HTTP/1.1" 200 "Bearer ***"'),
    ("proxy_set_header Authorization \"Basic dXNlcjpwdw==\";", "proxy_set_header Authorization \"Basic ***\";"),
    ("'password' => 'hunter2',", "'password' => '***',"),
    ("CREATE USER app IDENTIFIED BY 'hunter2';", "CREATE USER app IDENTIFIED BY '***';"),
    ('psk="hunter2-wifi"', "psk=***"),
    ("https://b.blob/x?sv=1&sig=abcDEF%2B&se=2", "https://b.blob/x?sv=1&sig=***&se=2"),
    ("https://s3/x?X-Amz-Signature=abc123&X-Amz-Date=1", "https://s3/x?X-Amz-Signature=***&X-Amz-Date=1"),
    ("the password is weak", "the password is weak"),  # prose: no separator, not a line's first word
    ("requirepass hunter2 # from the vault", "requirepass *** # from the vault"),
    ('{"log":"{\\"password\\":\\"hunter2 two\\"}","stream":"stdout"}',
     '{"log":"{\\"password\\":\\"***\\"}","stream":"stdout"}'),  # a docker json-file log line
    ('{"token_ttl": 3600, "user": 1}', '{"token_ttl": ***, "user": 1}'),  # an unquoted value's comma stays
    ('Authorization: Bearer tok-1"', 'Authorization: Bearer ***"'),
    # ordinary output with credential-like words in it stays as it is
    ("auth required pam_permit.so", "auth required pam_permit.so"),
    ("password [success=1 default=ignore] pam_unix.so obscure", "password [success=1 default=ignore] "
                                                                "pam_unix.so obscure"),
    ("PASS_MAX_DAYS 99999", "PASS_MAX_DAYS 99999"), ("google-auth 2.23.0", "google-auth 2.23.0"),
    ("tiktoken 0.5.1", "tiktoken 0.5.1"), ("password is weak", "password is weak"),
    ("auth-rpcgss-module.service loaded inactive dead", "auth-rpcgss-module.service loaded inactive dead"),
    ("docker run -d -p 27017:27017 --name db mongo", "docker run -d -p 27017:27017 --name db mongo"),
    ('requirepass "my secret pass"', 'requirepass "***"'), ('psk "my wifi key" # home', 'psk "***" # home'),
    ("--password hunter2!)", "--password ***"), ("--password ))]]", "--password ***"),  # no closer reveals it
    ("bindpw hunter2", "bindpw ***"), ("rootpw {SSHA}abc", "rootpw ***"),
])
def test_secret_looking_values_are_hidden(line, shown):
    assert redact_credentials(line) == shown


def test_long_words_cost_linear_time():
    # a local user controls their processes' arguments (128 KiB each): no pattern may backtrack over a word
    for hostile in ("sleep " + "a" * 400_000, "x " + "a" * 400_000 + "://u:p@h", 'x "a":"' * 60_000,
                    "x ?" + "a" * 400_000, "x --" + "a" * 400_000 + "=v", 'password = "' + "a " * 200_000,
                    "password " * 100_000):
        assert len(redact_credentials(hostile)) >= len(hostile) - 400_000


def test_a_listing_keeps_its_layout():
    table = "  PID CMD\n    1 /sbin/init\n  42 app --token   sk-1\n"
    assert redact_credentials(table) == "  PID CMD\n    1 /sbin/init\n  42 app --token   ***\n"
    assert redact_cmdline(["x", "--token", "sk-live-SECRET123", "-pHunter2", "--api-key", "AKIA123"]) == (
        "x --token *** -pHunter2 --api-key ***")


@pytest.fixture
def process_with_a_token():
    marker = f"ongrid-redact-{uuid.uuid4().hex[:8]}"
    # 64 MiB written: among the largest processes here, so a listing by memory shows it
    code = "import time; b = b'x' * (64 << 20); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code, marker, "--token", "sk-live-SECRET123",
                             "mysql-password=hunter2"])
    try:
        yield marker, proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("cmd", ["pgrep -af {m}", "ps -o pid,args -p {pid}", "ps uww {pid}", "ps -fp {pid}"])
async def test_host_bash_hides_them_in_process_listings(call, process_with_a_token, cmd):
    marker, pid = process_with_a_token
    out = await call("host_bash", {"cmd": cmd.format(m=marker, pid=pid)})
    assert out["class"] == "read" and out["exit_code"] == 0, out
    line = next(row for row in out["stdout"].splitlines() if marker in row)
    assert "--token *** mysql-password=***" in line, line
    assert "SECRET123" not in out["stdout"] and "hunter2" not in out["stdout"]
    assert "***" in out["redacted"]


async def test_get_host_processes_hides_them(call, process_with_a_token):
    marker, _ = process_with_a_token
    out = await call("get_host_processes", {"top_n": 100, "sort_by": "rss"})
    rows = [p for p in out["processes"] if marker in p["cmdline"]]
    assert rows and "--token *** mysql-password=***" in rows[0]["cmdline"], rows


async def test_host_bash_hides_them_in_any_output(call, tmp_path):
    unit = tmp_path / "app.service"
    unit.write_text('[Service]\nEnvironment="DB_PASSWORD=hunter2"\nExecStart=/usr/bin/app --port 80\n')
    out = await call("host_bash", {"cmd": f"cat {unit}"})
    assert out["class"] == "read" and 'Environment="DB_PASSWORD=***"' in out["stdout"], out
    assert "hunter2" not in out["stdout"] and "--port 80" in out["stdout"] and out["redacted"]
    plain = await call("host_bash", {"cmd": f"wc -l {unit}"})
    assert "redacted" not in plain  # nothing hidden, nothing said
