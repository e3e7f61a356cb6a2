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
    # a quoted user:password with a space: the shell's one word, hidden to its closing quote
    ('curl -u "bob:a b" https://x', 'curl -u "bob:***" https://x'),
    ("curl -u 'bob:a b c' https://x", "curl -u 'bob:***' https://x"),
    ('curl --user="bob:a b" x', 'curl --user="bob:***" x'),
    ('lftp -u bob,"p w" h', 'lftp -u bob,***" h'),
    ('smbclient -U "dom\\bob%p w" //h/s', 'smbclient -U "dom\\bob%***" //h/s'),
    ('curl -u "bob" https://x', 'curl -u "bob" https://x'),  # no password: curl asks for it
    # what the word goes on with after the closing quote is the password too, as the shell reads it
    ('curl -u "bob:p w"TAIL x', 'curl -u "bob:***"*** x'),
    ("curl -u \"bob:p w\"' MORE' x", 'curl -u "bob:***"*** x'),
    ('x --password "a b"TAIL y', 'x --password "***"*** y'),
    ('mysql -p"a b"TAIL db', 'mysql -p"***"*** db'),
    ('{"password":"a b"},', '{"password":"***"},'),  # syntax after the close stays
    ('- --db-password\n- "a b" next', '- --db-password\n- "***" next'),
    ('- --db-password\n- "a b"TAIL next', '- --db-password\n- "***"*** next'),
    # a user name holding a space; curl's attached -u; a JSON list's "--user"
    ('smbclient //srv/share -U "CORP\\\\Jane Doe%PW1"', 'smbclient //srv/share -U "CORP\\\\Jane Doe%***"'),
    ('curl -u "John Smith:PW2" x', 'curl -u "John Smith:***" x'),
    ('lftp -u "John Smith,PW3" h', 'lftp -u "John Smith,***" h'),
    ('curl -u "John Smith" x', 'curl -u "John Smith" x'),
    ('curl -ubob:PW4 x', 'curl -ubob:*** x'),
    ("curl -u'bob:PW 5' x", "curl -u'bob:***' x"),
    ('command: ["curl", "--user", "bob:PW6"]', 'command: ["curl", "--user", "bob:***"]'),
    # a second attack: a program inside a script, an exec-form list or a JSON string keeps its options
    ('sh -c "mysql -uroot -pPW7"', 'sh -c "mysql -uroot -p***"'),
    ("ssh host 'redis-cli -a PW8'", "ssh host 'redis-cli -a ***'"),
    ('{"cmd": "sshpass -p PW9 ssh h"}', '{"cmd": "sshpass -p *** ssh h"}'),
    ('CMD ["mysql", "-uroot", "-pPW10"]', 'CMD ["mysql", "-uroot", "-p***"]'),
    ('CMD ["sqlcmd", "-PPW11 x"]', 'CMD ["sqlcmd", "-P***"]'),
    # curl's short options together; shell quoting and escaped spaces going on after a value
    ("curl -su bob:PW12 h", "curl -su bob:*** h"),
    ("curl -sSfu bob:PW13 h", "curl -sSfu bob:*** h"),
    ("mysql -p'it'\\''s PW14' db", "mysql -p'***'*** db"),
    ('curl -u "bob:p w"}PW15 x', 'curl -u "bob:***"*** x'),
    ("export DB_PASSWORD='it'\"'\"'s PW16' y", "export DB_PASSWORD=*** y"),
    ("x --password correct\\ horse\\ PW17 y", "x --password *** y"),
    ("PASSWORD=correct\\ PW18 y", "PASSWORD=*** y"),
    ("curl -u bob:correct\\ PW19 h", "curl -u bob:*** h"),
    ('mysql -p"p w"\\ PW20 x', 'mysql -p"***"*** x'),
    ('sh -c "app --password X" && ls', 'sh -c "app --password ***" && ls'),  # a quote closing around it
    # a JSON list written without spaces, or printed an item a line
    ('["curl","--user","bob:PW21"]', '["curl","--user","bob:***"]'),
    ('["app","--token","PW22"]', '["app","--token","***"]'),
    ('"Cmd": [\n    "curl",\n    "--user",\n    "bob:PW23"\n],', '"Cmd": [\n    "curl",\n    "--user",\n    "***"\n],'),
    ("- --user\n- bob:PW24", "- --user\n- ***"),
    # a third attack: a quoted NAME=value holding a space, exec-form items, a quote after a closer
    ('docker run -e "PASSWORD=a PW25" img', 'docker run -e "PASSWORD=***" img'),
    ('Environment="DB_PASSWORD=a PW26"', 'Environment="DB_PASSWORD=***"'),
    ('--env=PASSWORD="a PW27" x', "--env=PASSWORD=*** x"),
    ('["x","-e","PASSWORD=a PW28"]', '["x","-e","PASSWORD=***"]'),
    ('["curl","-ubob:PW29"]', '["curl","-ubob:***"]'),
    ("curl '-ubob:PW30'", "curl '-ubob:***'"),
    ('["curl","-su","bob:PW31"]', '["curl","-su","bob:***"]'),
    ('CMD ["sqlcmd","-P","PW32"]', 'CMD ["sqlcmd","-P","***"]'),
    ('["docker","login","-p","PW33"]', '["docker","login","-p","***"]'),
    ('--password "a")" PW34"', '--password "***"***'),
    ('--password "x","PW35"', '--password "***"***'),  # no list without a bracket: one shell value
    ('{"password":"x","note":"hi"}', '{"password":"***","note":"hi"}'),
    ("['x','--token','PW36']", "['x','--token','***']"),  # a Python list without spaces
    ("['curl','-u','bob:PW37']", "['curl','-u','bob:***']"),
    ("it's a 'a','b' test", "it's a 'a','b' test"),
    ("curl -upload x", "curl -upload x"),
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
    # application configs and logs: PHP, Python, .NET, web servers, Dockerfiles, npm, connection strings
    ("define( 'DB_PASSWORD', 'Wp-S3cret' );", "define( 'DB_PASSWORD', '***' );"),
    ("define('AUTH_KEY', 'a b c');", "define('AUTH_KEY', '***');"),
    ("DATABASES = {'default': {'PASSWORD': 'X1'}}", "DATABASES = {'default': {'PASSWORD': '***'}}"),
    ("x = {'token': 'a\\'b', 'n': 'c'}", "x = {'token': '***', 'n': 'c'}"),
    ("$db_pass = 'X3';", "$db_pass = '***';"), ('$password = "X4";', '$password = "***";'),
    ('Environment="LOG_LEVEL=info" "DB_PASSWORD=Unit-S3cret"', 'Environment="LOG_LEVEL=info" "DB_PASSWORD=***"'),
    ('<add key="DbPassword" value="Net-S3cret" />', '<add key="DbPassword" value="***" />'),
    ("<Parameter name='db.password' value='x1' override='false'/>",
     "<Parameter name='db.password' value='***' override='false'/>"),
    ("Server=db;Database=app;Password=Ado-S3cret;", "Server=db;Database=app;Password=***;"),
    ("Driver=x;Uid=a;Pwd=X15;", "Driver=x;Uid=a;Pwd=***;"),
    ("fastcgi_param DB_PASSWORD X5;", "fastcgi_param DB_PASSWORD ***;"), ("SetEnv DB_PASS X6", "SetEnv DB_PASS ***"),
    ("env[DB_PASSWORD] = X7", "env[DB_PASSWORD] = ***"), ("ENV DB_PASSWORD X8", "ENV DB_PASSWORD ***"),
    ("//registry.npmjs.org/:_authToken=X9", "//registry.npmjs.org/:_authToken=***"),
    ("https://x/cb#access_token=X10&state=1", "https://x/cb#access_token=***&state=1"),
    ("DBPASS=X11 SSHPASS=X12 PW=X13", "DBPASS=*** SSHPASS=*** PW=***"), ("--pw X14", "--pw ***"),
    ("url = https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/o/r.git", "url = https://***@github.com/o/r.git"),
    # token formats and password hashes wherever they stand
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123456789 here", "token *** here"),
    ("xoxb-123456789012-1234567890123-abcdefghijklmnop", "***"), ("key sk_live_abcdefghijklmnop1234", "key ***"),
    ("id AKIAIOSFODNN7EXAMPLE", "id ***"), ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghijk", "***"),
    ("https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX", "https://hooks.slack.com/services/T000/B000/***"),
    ("root:$6$saltsalt$abcdefghijklmnopqrstuvwxyz0123:19000:0:99999:7:::", "root:***:19000:0:99999:7:::"),
    ("admin:$apr1$abcd$efghijklmnopqrstuv1234", "admin:***"),
    # and what is not a credential stays
    ("print('password', 'is', x)", "print('password', 'is', x)"), ("git@github.com:org/repo.git", "git@github.com:org/repo.git"),
    ("https://git@github.com/x", "https://git@github.com/x"), ("ENV PATH /usr/bin", "ENV PATH /usr/bin"),
    ("SetEnv APP_ENV production", "SetEnv APP_ENV production"),
    ('<add key="Environment" value="Production" />', '<add key="Environment" value="Production" />'),
    ("price: $5 $6 each", "price: $5 $6 each"),
    # databases, directories, cloud connection strings, SNMP and IPMI, Redis ACLs, Kubernetes
    ("ALTER USER app WITH PASSWORD 'X1';", "ALTER USER app WITH PASSWORD '***';"),
    ("CREATE USER a IDENTIFIED WITH mysql_native_password BY 'X3';",
     "CREATE USER a IDENTIFIED WITH mysql_native_password BY '***';"),
    ("SET PASSWORD FOR 'app'@'%' = 'X4';", "SET PASSWORD FOR 'app'@'%' = '***';"),
    ("userPassword:: e1NTSEF9abc", "userPassword:: ***"), ("olcRootPW: {SSHA}abc", "olcRootPW: ***"),
    ("AccountName=x;AccountKey=abc123==;EndpointSuffix=core", "AccountName=x;AccountKey=***;EndpointSuffix=core"),
    ("Endpoint=sb://x/;SharedAccessKeyName=Root;SharedAccessKey=zz=",
     "Endpoint=sb://x/;SharedAccessKeyName=Root;SharedAccessKey=***"),
    ("rocommunity X7 default", "rocommunity *** default"), ("snmpwalk -v2c -c X8 host", "snmpwalk -v2c -c *** host"),
    ("ipmitool -H h -U u -P X9 power status", "ipmitool -H h -U u -P *** power status"),
    ("user default on >X5 ~* +@all", "user default on >*** ~* +@all"), ("ACL SETUSER bob on >X6 ~*", "ACL SETUSER bob on >*** ~*"),
    ('{"name":"DB_PASSWORD","value":"Tr0ub4dor"},{"name":"X","value":"y"}',
     '{"name":"DB_PASSWORD","value":"***"},{"name":"X","value":"y"}'),
    ("define( 'NONCE_SALT',       'x y' );", "define( 'NONCE_SALT',       '***' );"),
    ("APP_KEY=base64:abcdef STRIPE_KEY=pk_x", "APP_KEY=*** STRIPE_KEY=***"),
    ("tls.key: LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUV2UUlCQURBTkJna3Foa2lH", "tls.key: ***"),
    (".dockerconfigjson: eyJhdXRocyI6eyJyZWcuaW8iOnsiYXV0aCI6ImRYTmxjanB3WVhOeiJ9fX0=", ".dockerconfigjson: ***"),
    ("admin:{SHA}qvTGHdzF6KLavt4PO0gs2a6pQ00=", "admin:***"), ("*94BDCEBE19083CE2A1F959FD02F964C7AF4CFC29", "***"),
    ("$2b$12$" + "a" * 53, "***"), ("https://a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6@x.io", "https://***@x.io"),
    # and what only looks like one stays: a folder, a switch, a file holding the secret, a mode, awk
    ("sudo: bob : TTY=pts/0 ; PWD=/home/bob/app ; USER=root", "sudo: bob : TTY=pts/0 ; PWD=/home/bob/app ; USER=root"),
    ("--authorization-mode=Node,RBAC --anonymous-auth=false --client-cert-auth=true",
     "--authorization-mode=Node,RBAC --anonymous-auth=false --client-cert-auth=true"),
    ("--tls-private-key-file=/etc/k.pem", "--tls-private-key-file=/etc/k.pem"),
    ("password_file: /run/p", "password_file: /run/p"), ("automountServiceAccountToken: false",
                                                          "automountServiceAccountToken: false"),
    ("password_encryption = scram-sha-256", "password_encryption = scram-sha-256"),
    ("awk '{print $1$2$3$4$5$6}'", "awk '{print $1$2$3$4$5$6}'"),
    ("postgres://application_readonly_user@db/x", "postgres://application_readonly_user@db/x"),
    ('# a DEL operation on key "foo" stored', '# a DEL operation on key "foo" stored'),
    ("tls.crt: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1J", "tls.crt: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1J"),
    ("headers[key] = value", "headers[key] = value"), ("PW_HOME=/var/lib/app", "PW_HOME=/var/lib/app"),
    ("pwd.struct_passwd(pw_name='root', pw_passwd='x', pw_uid=0, pw_dir='/root')",
     "pwd.struct_passwd(pw_name='root', pw_passwd=*** pw_uid=0, pw_dir='/root')"),  # a closed value ends there
    ("password_policy: |", "password_policy: |"),
    # an attribute line keeps only its key="…" word as it is; other secrets on it are hidden
    ('<add key="Mode" value="x" namespace_password=hunter2 />', '<add key="Mode" value="x" namespace_password=*** />'),
    ('<add key="Mode" value="x"/> key=hunter2', '<add key="Mode" value="x"/> key=***'),
    # a ; ends a value only in ;-separated pairs: a password holding one is hidden whole after ? & ,
    ("GET /login?user=a&password=p4ss;w0rd", "GET /login?user=a&password=***"),
    ("mount -o user=bob,password=ab;cd /x", "mount -o user=bob,password=*** /x"),
    ("user admin insecure-password X4", "user admin insecure-password ***"),
    ("$db['default']['password'] = 'X5';", "$db['default']['password'] = '***';"), ("$arr[$k] = 1", "$arr[$k] = 1"),
    ("x hvs.CAESIabcdefghijklmnopqrstuv", "x ***"), ("SG.abcdefghijklmnop.qrstuvwxyzABCDEFGH", "***"),
    ('"bob" "SCRAM-SHA-256$4096:abcd$defghijk:ghijklmn"', '"bob" "***"'),
    ("https://discord.com/api/webhooks/123/abcDEF", "https://discord.com/api/webhooks/123/***"),
    ("the auto-password feature is on", "the auto-password feature is on"),
    # Redis AUTH typed at redis-cli, on its command line, and as MONITOR shows it; PAM's auth lines are no AUTH
    ("AUTH hunter2", "AUTH ***"),
    ("127.0.0.1:6379> AUTH default hunter2", "127.0.0.1:6379> AUTH default ***"),
    ('1700000000.1 [0 127.0.0.1:5555] "AUTH" "hunter2"', '1700000000.1 [0 127.0.0.1:5555] "AUTH" "***"'),
    ("redis-cli -h db AUTH hunter2", "redis-cli -h db AUTH ***"),
    ("auth required pam_unix.so", "auth required pam_unix.so"),
    ("auth [success=1 default=ignore] pam_unix.so", "auth [success=1 default=ignore] pam_unix.so"),
    ("Auth failed for user bob", "Auth failed for user bob"), ("[INFO] AUTH success", "[INFO] AUTH success"),
    # passwords fed to chpasswd and passwd; their own log lines stay
    ("echo root:hunter2 | chpasswd", "echo root:*** | chpasswd"),
    ("printf '%s\\n' 'bob:hunter2' | sudo chpasswd", "printf '%s\\n' 'bob:***' | sudo chpasswd"),
    ('chpasswd <<< "bob:hunter2"', 'chpasswd <<< "bob:***"'),
    ("echo hunter2 | passwd --stdin bob", "echo *** | passwd --stdin bob"),
    ('echo -e "hunter2\\nhunter2" | /usr/bin/passwd bob', 'echo -e "***" | /usr/bin/passwd bob'),
    ("Dec 5 10:00:01 h chpasswd[9]: pam_unix(chpasswd:chauthtok): password changed for bob",
     "Dec 5 10:00:01 h chpasswd[9]: pam_unix(chpasswd:chauthtok): password changed for bob"),
    ("cat /etc/passwd | wc -l", "cat /etc/passwd | wc -l"),
    # PostgreSQL's md5 hash in pgbouncer's userlist.txt and in pg_authid (two quoted words alone are no secret)
    ('"green" "Green"', '"green" "Green"'),
    ('"bob" "md5d6a35858d61d85e4a82ab1fb044aaf9d"', '"bob" "***"'),
    ("bob | md5d6a35858d61d85e4a82ab1fb044aaf9d", "bob | ***"),
    ('"$EXE_PATH/heaptrack_gui" "$@"', '"$EXE_PATH/heaptrack_gui" "$@"'),  # a script's line, no user name
    # registry logins (docker run -p stays a port), SQL Server, lftp, skopeo; a PAT by name
    ("root 812 0.0 ? S 10:00 0:00 docker login -u ci -p hunter2 reg.io", "root 812 0.0 ? S 10:00 0:00 docker login -u ci -p *** reg.io"),
    ("docker run -p 80:80 nginx", "docker run -p 80:80 nginx"),
    ("docker login -u a -p X1 r && docker run -p 80:80 nginx", "docker login -u a -p *** r && docker run -p 80:80 nginx"),
    ("docker login -pX1 reg", "docker login -p*** reg"), ("sqlcmd -PX1 -S db", "sqlcmd -P*** -S db"),
    ("echo X1 | docker login -u ci --password-stdin reg.io", "echo *** | docker login -u ci --password-stdin reg.io"),
    ("az login -u a -p hunter2", "az login -u a -p ***"), ("sqlcmd -S db -U sa -P hunter2", "sqlcmd -S db -U sa -P ***"),
    ("lftp -u bob,hunter2 sftp://h", "lftp -u bob,*** sftp://h"), ("ps -u root,www-data", "ps -u root,www-data"),
    ("git log --show-signature -5", "git log --show-signature -5"), 
    # a quoted option is the option to the shell (cmd "--password" X): its next word goes, even in prose
    ('"--key" or "--verify-signature" option', '"--key" *** "--verify-signature" option'),
    ("-passwd) shift; passwd=$1 ;;", "-passwd) shift; passwd=*** ;;"), ("app --reset-password-token X1", "app --reset-password-token ***"),
    ("skopeo copy --creds u:hunter2 a b", "skopeo copy --creds *** a b"), ("GITHUB_PAT=hunter2", "GITHUB_PAT=***"),
    ('pat=""', 'pat=""'), ("exclude_pat = *.log", "exclude_pat = *.log"),  # a pattern, not a token
    # a YAML anchor or tag before the value; a JSON list of arguments; a zsh history line
    ("  password: &pw hunter2", "  password: &pw ***"), ("  password: !!str hunter2", "  password: !!str ***"),
    # a value that merely starts with ! or & is the value
    ("app --password !X1 --port 8080", "app --password *** --port 8080"), ("password = !X1   # prod", "password = ***   # prod"),
    ("password: !X1 ", "password: *** "), ("password: !X1 # c", "password: *** # c"),
    ("docker login -u ci -p &X1 reg.io", "docker login -u ci -p *** reg.io"),
    ('args: ["--token", "hunter2"]', 'args: ["--token", "***"]'),
    (": 1700000000:0;mysql -uroot -phunter2", ": 1700000000:0;mysql -uroot -p***"),
    # a setting set by name (aws, redis CONFIG SET), PHP arrays with variable indexes, IPsec and WireGuard keys
    ("aws configure set aws_secret_access_key hunter2", "aws configure set aws_secret_access_key ***"),
    ("127.0.0.1:6379> CONFIG SET requirepass hunter2", "127.0.0.1:6379> CONFIG SET requirepass ***"),
    ("$cfg['Servers'][$i]['password'] = 'hunter2';", "$cfg['Servers'][$i]['password'] = '***';"),
    ("        private: yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=", "        private: ***"),  # netplan's WireGuard key
    ("private: true", "private: true"),
    ('%any : PSK "hunter2"', '%any : PSK "***"'), ("PresharedKey = hunter2=", "PresharedKey = ***"),
    # network devices: a type digit between the name and the value
    ("username bob privilege 15 secret 0 hunter2", "username bob privilege 15 secret 0 ***"),
    ("Failed password 5 times", "Failed password 5 times"), ("Number key 9 when pressed", "Number key 9 when pressed"),
    ("Failed to set token for user bob", "Failed to set token for user bob"),
    ("snmp-server community hunter2 RO", "snmp-server community *** RO"),
    # an attached password whose own letters name a secret (-pMyPass), or quoted with a space
    ("mysql -uroot -pS3cretPass db", "mysql -uroot -p*** db"), ('mysql -p"my secret" db', 'mysql -p"***" db'),
    ("sqlcmd -S db -PTopSecretPassword", "sqlcmd -S db -P***"),
])
def test_secret_looking_values_are_hidden(line, shown):
    assert redact_credentials(line) == shown


def test_values_on_the_lines_after_their_key_are_hidden():
    # a YAML block scalar, an XML element opened alone on its line, a PGP private key block
    assert redact_credentials("password: |\n  X17\n  X18\nuser: bob") == "password: |\n  ***\n  ***\nuser: bob"
    assert redact_credentials("db:\n  token: >-\n    a\n    b\n  port: 5") == "db:\n  token: >-\n    ***\n    ***\n  port: 5"
    assert redact_credentials("<password>\n  X19\n</password>\n<user>bob</user>") == (
        "<password>\n  ***\n</password>\n<user>bob</user>")
    assert redact_credentials("-----BEGIN PGP PRIVATE KEY BLOCK-----\nX20\n-----END PGP PRIVATE KEY BLOCK-----\nafter") == (
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\n***\n-----END PGP PRIVATE KEY BLOCK-----\nafter")
    assert redact_credentials("script: |\n  echo hi\nuser: bob") == "script: |\n  echo hi\nuser: bob"
    # a Kubernetes env entry: the name on one line, its value on the next
    assert redact_credentials("  - name: DB_PASSWORD\n    value: X\n  - name: LOG\n    value: info") == (
        "  - name: DB_PASSWORD\n    value: ***\n  - name: LOG\n    value: info")
    assert redact_credentials('  {\n    "name": "API_TOKEN",\n    "value": "a b"\n  },') == (
        '  {\n    "name": "API_TOKEN",\n    "value": "***"\n  },')
    # a Hadoop property: <name> on one line, <value> on the next
    assert redact_credentials("  <name>fs.s3a.secret.key</name>\n  <value>X1</value>\n  <name>fs.s3a.endpoint</name>\n"
                              "  <value>s3.example</value>") == ("  <name>fs.s3a.secret.key</name>\n  <value>***</value>\n"
                                                                 "  <name>fs.s3a.endpoint</name>\n  <value>s3.example</value>")

    # cloud-init's chpasswd list, as a block and as a list; the keys after it are left alone
    assert redact_credentials("chpasswd:\n  list: |\n    root:X21\n    ubuntu:RANDOM\n  expire: False\nruncmd:\n  - a:b") == (
        "chpasswd:\n  list: |\n    root:***\n    ubuntu:***\n  expire: False\nruncmd:\n  - a:b")
    assert redact_credentials("chpasswd:\n  list:\n    - root:X22\n  expire: false") == (
        "chpasswd:\n  list:\n    - root:***\n  expire: false")
    # a secret option or JSON member ending its line: the value is the next line's first word
    assert redact_credentials("args:\n- --db-password\n- X23\n- --port\n- 80") == (
        "args:\n- --db-password\n- ***\n- --port\n- 80")
    assert redact_credentials('        "--token",\n        "X24",\n        "--v"') == (
        '        "--token",\n        "***",\n        "--v"')
    assert redact_credentials('{\n  "password":\n    "X25"\n}') == '{\n  "password":\n    "***"\n}'
    assert redact_credentials('"secrets":\n  {"a": 1}\npassword:\n  user: x') == '"secrets":\n  {"a": 1}\npassword:\n  user: x'
    assert redact_credentials('["--password",\n "correct horse battery"]') == '["--password",\n "***"]'
    assert redact_credentials('\t"key":\n\t  Send a low-level event') == '\t"key":\n\t  Send a low-level event'  # prose
    # only an option standing alone carries: a unit's line, a ps row, a cookie, a zsh history line
    assert redact_credentials("ExecStart=/bin/firstboot --prompt-root-password\nStandardOutput=tty") == (
        "ExecStart=/bin/firstboot --prompt-root-password\nStandardOutput=tty")
    assert redact_credentials('"Cookie": "sid=abc",\n "User-Agent": "x"').endswith('\n "User-Agent": "x"')
    assert redact_credentials(": 1:0;docker login --password-stdin\n: 2:0;mysql -uroot -pX26") == (
        ": 1:0;docker login --password-stdin\n: 2:0;mysql -uroot -p***")
    assert "hunter2" not in redact_credentials('chpasswd: {list: "root:hunter2"}')


def test_a_command_continued_with_a_backslash_hides_what_goes_on():
    """The shell drops a backslash and the line break after it: a value
    after its key on the next line, or the rest of a value continued inside
    its word, is hidden there."""
    bs = "\\"
    assert redact_credentials(f"aws configure set aws_secret_access_key {bs}\n    X27\n") == (
        f"aws configure set aws_secret_access_key {bs}\n    ***\n")
    assert redact_credentials(f"psql --password {bs}\n  X28 -h db") == f"psql --password {bs}\n  *** -h db"
    # inside a word: PASSWORD=ab\ / cd is PASSWORD=abcd
    assert redact_credentials(f"export DB_PASSWORD={bs}\nX29\n") == "export DB_PASSWORD=***\n***\n"
    assert redact_credentials(f"export DB_PASSWORD=X3{bs}\n0 and more") == "export DB_PASSWORD=***\n*** and more"
    assert redact_credentials(f"curl -u admin:X3{bs}\n1 http://x") == "curl -u admin:***\n*** http://x"
    # no secret before it, or the backslash escaped (an even number): the next line is left alone
    assert redact_credentials(f"echo C:{bs}\nnext line") == f"echo C:{bs}\nnext line"
    assert redact_credentials(f"ls {bs}\n -la /tmp") == f"ls {bs}\n -la /tmp"
    assert redact_credentials(f"export DB_PASSWORD=X32{bs}{bs}\nnext line") == "export DB_PASSWORD=***\nnext line"
    # no space before the backslash, the value's space on the next line; a value over three lines
    assert "X40" not in redact_credentials(f"aws configure set aws_secret_access_key{bs}\n X40abc")
    assert "X41" not in redact_credentials(f"sshpass -p{bs}\n X41 ssh")
    assert redact_credentials(f"PASSWORD=ab{bs}\ncd{bs}\nef") == f"PASSWORD=***\n***{bs}\n***"
    # a header's value after its name's line; a line that is only a backslash; a URL password
    # split by the break (hidden on both lines); a quoted value going on on the next line
    assert "X43" not in redact_credentials(f'curl -H "Authorization:{bs}\nBearer X43abcdefghijkl" http://x')
    assert redact_credentials(f"mysql -uroot -p{bs}\n{bs}\nX44") == f"mysql -uroot -p***\n{bs}\n***"
    assert redact_credentials(f"curl https://bob:X45{bs}\n@host/") == f"curl https://bob:***{bs}\n@host/"
    assert redact_credentials(f"https://bob:X4{bs}\n6@host/") == f"https://bob:***{bs}\n***@host/"
    assert "X47" not in redact_credentials(f'sshpass -p "correct {bs}\nX47 battery" ssh')
    # a quoted value going on over three lines and more: the shell reads one value
    assert redact_credentials(f'curl {bs}\n-u "bob:p1 {bs}\np2 {bs}\nX52" x') == (
        f'curl {bs}\n-u "bob:*** {bs}\n***\n***" x')
    assert "X53" not in redact_credentials(f'mysql {bs}\n-p"a {bs}\nb {bs}\nc {bs}\nX53" db {bs}\n--batch')
    assert redact_credentials(f'echo "a {bs}\nb {bs}\nc" x') == f'echo "a {bs}\nb {bs}\nc" x'
    # the value's own quote closes it (not the first quote of either kind), and what is glued after goes too
    assert redact_credentials(f'mysql -p"a {bs}\nit\'s X54" x') == f'mysql -p"*** {bs}\n***" x'
    assert redact_credentials(f'PASSWORD="a {bs}\nb"X55 x') == f'PASSWORD=*** {bs}\n***"*** x'
    assert "X56" not in redact_credentials(f'curl -u "bob:a {bs}\nb\\"X56 dd" x')
    # the value of an option that ended the line above, going on over the lines after it
    assert redact_credentials(f'curl {bs}\n  --password {bs}\n  "a {bs}\n  b X57" {bs}\n  https://h/') == (
        f'curl {bs}\n  --password {bs}\n  "*** {bs}\n***" {bs}\n  https://h/')
    # a first line cut to its first 512 characters (the backslash cut off with them)
    assert redact_credentials("x" * 600 + f" {bs}\nmysql -pX42") == "x" * 600 + f" {bs}\nmysql -p***"


def test_a_command_inside_a_string_with_escaped_quotes_hides_its_quoted_values():
    """A command line inside a JSON (or C) string quotes its values with
    escaped quotes (journalctl -o json, container logs): a quoted value holding
    spaces is hidden whole, the string's escapes kept."""
    assert redact_credentials('{"command": "sshpass -p \\"X3 3 a\\" ssh host"}') == (
        '{"command": "sshpass -p \\"***\\" ssh host"}')
    assert "X3" not in redact_credentials('{"MESSAGE": "run: mysql -p\\"X3 4\\" db"}')
    # the other members of the object are read as before, whatever they hold; a string in a string too
    assert redact_credentials('{"password": "a b c d", "cmd": "sshpass -p \\"X37 two\\" ssh"}') == (
        '{"password": "***", "cmd": "sshpass -p \\"***\\" ssh"}')
    assert redact_credentials('{"authorization": "Bearer abcdefghijklmnop", "cmd": "sshpass -p \\"X38 two\\" ssh"}') == (
        '{"authorization": "***", "cmd": "sshpass -p \\"***\\" ssh"}')
    nested = '{"log": "{\\"cmd\\": \\"sshpass -p \\\\\\"X39 two\\\\\\" ssh\\"}"}'
    assert "X39" not in redact_credentials(nested) and redact_credentials(nested).startswith('{"log": "{\\"cmd\\"')
    assert "X35" not in redact_credentials('cmd="mysql --password=\\"X35 b\\" db"')
    assert redact_credentials('{"a": "curl -H \\"Authorization: Bearer X36\\" http://x"}') == (
        '{"a": "curl -H \\"Authorization: Bearer ***\\" http://x"}')
    # a stray quote before the string (the quotes pair the other way) changes nothing
    assert redact_credentials('size=5" {"cmd": "sshpass -p \\"X48 b\\" ssh"}') == (
        'size=5" {"cmd": "sshpass -p \\"***\\" ssh"}')
    # nothing secret in the string: left as it was
    assert redact_credentials('{"msg": "say \\"hello world\\" twice"}') == '{"msg": "say \\"hello world\\" twice"}'
    # JSON's \u0022 and \u0027 are quotes too
    assert redact_credentials('{"cmd": "mysql -p\\u0022X49 b\\u0022 db"}') == '{"cmd": "mysql -p\\"***\\" db"}'
    assert "X50" not in redact_credentials('{"cmd": "sh -c \\u0027mysql --password=\\u0022X50 b\\u0022\\u0027"}')
    assert "X51" not in redact_credentials('{"m": "curl -u \\u0022bob:X51 b\\u0022 x"}')
    assert redact_credentials('{"cmd": "echo \\u0022hi\\u0022"}') == '{"cmd": "echo \\u0022hi\\u0022"}'


def test_long_words_cost_linear_time():
    # a local user controls their processes' arguments (128 KiB each): no pattern may backtrack over a word
    # (a pattern quadratic in these ~400 KB inputs runs for hours: the suite's per-test timeout fails it)
    for hostile in ("sleep " + "a" * 400_000, "x " + "a" * 400_000 + "://u:p@h", 'x "a":"' * 60_000,
                    "x ?" + "a" * 400_000, "x --" + "a" * 400_000 + "=v", 'password = "' + "a " * 200_000,
                    "password " * 100_000, "'password': '" * 30_000, "'password': '" + "\\'" * 200_000,
                    "define('a', " * 30_000, "eyJ" + "a" * 400_000, "$6$" + "a" * 400_000, 'key="password" ' * 30_000,
                    'key="password" value="' + "a" * 400_000, "https://" + "a" * 400_000, "env[" * 100_000,
                    '"name":"password","value":"' + "a" * 400_000, "- name: password\n" * 40_000,
                    "$1$" + "a" * 400_000, "https://" + "1" * 400_000, "LS0tLS1CRUdJTi" + "A" * 400_000,
                    "define( 'a'" + " " * 400_000, "echo " + "a:" * 200_000 + " | chpasswd",
                    "| passwd " + "echo " * 80_000, '"a" "' + "b" * 400_000, "AUTH " * 100_000,
                    "chpasswd:\n" + "  a:b\n" * 60_000, '"--token", ' * 60_000, "password: " + "&a " * 100_000,
                    ": 1:1;" * 60_000, "- --token\n" * 60_000, "docker login " * 40_000 + "-p " * 40_000,
                    "a" + "\\" * 400_001, "PASSWORD=a\\\n" * 30_000, "x \\\n" * 60_000,
                    'x -p \\"' * 60_000, '"a": "mysql -p\\"' + "b " * 200_000,
                    "xfreerdp " * 50_000, "{a:" * 130_000, "{" + " password:" * 40_000, "sqlplus a/" * 40_000,
                    "<x name='password'>" * 20_000, "mysqladmin " * 40_000, "bot1234567:" * 40_000,
                    " key-string" * 40_000, "ORACLE_CONN=" * 40_000, "neighbor " * 50_000):
        assert len(redact_credentials(hostile)) >= len(hostile) - 400_000


def test_lines_going_on_cost_linear_time():
    # many short lines each going on in the next (inside their last word, or after a long first line):
    # each is checked with a bounded context, not with all the lines before it
    for hostile in (" a\\\n" * 100_000, '"\\\n' * 133_000, " a=\\\"b\\\n" * 40_000,
                    '"a ' * 170 + " \\\n" + "\\\n" * 200_000, '"a ' * 170 + " \\\n" + "a\\\n" * 133_000,
                    "x" * 510 + " \\\n" + " a \\\n" * 80_000, '-U "' + "w " * 200_000, '"--user","' * 40_000):
        assert len(redact_credentials(hostile)) >= len(hostile) - 400_000


def test_a_listing_keeps_its_layout():
    table = "  PID CMD\n    1 /sbin/init\n  42 app --token   sk-1\n"
    assert redact_credentials(table) == "  PID CMD\n    1 /sbin/init\n  42 app --token   ***\n"
    assert redact_cmdline(["x", "--token", "sk-live-SECRET123", "-pHunter2", "--api-key", "AKIA123"]) == (
        "x --token *** -pHunter2 --api-key ***")


@pytest.mark.parametrize(("argv", "shown"), [
    (["mysql", "-uroot", "-pcorrect horse battery", "db"], "mysql -uroot '-p***' db"),
    (["app", "--password", "correct horse battery"], "app --password '***'"),
    (["curl", "-u", "bob:pass word two", "https://x"], "curl -u 'bob:***' https://x"),
    (["app", "--db-url=postgres://u:pw@db/x"], "app --db-url=postgres://u:***@db/x"),
    (["app", "--token", "a\nb c"], "app --token '***'"),
])
def test_a_process_argument_holding_spaces_is_hidden_whole(argv: list[str], shown: str) -> None:
    assert redact_cmdline(argv) == shown


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


@pytest.mark.parametrize(("text", "shown"), [
    # a configuration line's unquoted value is the rest of its line (ini, my.cnf, YAML plain scalars), up to a comment
    ("[client]\npassword = correct horse battery", "[client]\npassword = ***"),
    ("password: correct horse battery", "password: ***"),
    ("  db_password: correct horse # rotated monthly", "  db_password: *** # rotated monthly"),
    ("ldap_default_authtok = correct horse", "ldap_default_authtok = ***"),
    ('password = "a b" ; x', 'password = "***" ; x'),
    ("token: abc, user: bob", "token: ***, user: bob"),  # a log line's pairs: the comma ends the value
    ("sshpass -p hunter2 ssh h", "sshpass -p *** ssh h"),  # a command, not a key: one word
    ("PGPASSWORD=hunter2 psql -h db", "PGPASSWORD=*** psql -h db"),
    # list items spaced or split around their comma, over two lines, or a quoted option word
    ('[ "--token" , "SECRET1" ]', '[ "--token" , "***" ]'),
    ('["curl", "--token" ,"SECRET2"]', '["curl", "--token" ,"***"]'),
    ('args: ["--password",\n  "SECRET3"]', 'args: ["--password",\n  "***"]'),
    ('cmd "--password" SECRET5 -v', 'cmd "--password" *** -v'),
])
def test_values_of_configuration_lines_and_spaced_list_items_are_hidden(text: str, shown: str) -> None:
    assert redact_credentials(text) == shown


@pytest.mark.parametrize(("text", "shown"), [
    # a log line inside a JSON string (docker's json-file logs, structured loggers), compact JSON lists
    ('{"log":"token=SECRET1\\n","stream":"stdout","time":"2026-12-06T10:00:00Z"}',
     '{"log":"token=***\\n","stream":"stdout","time":"2026-12-06T10:00:00Z"}'),
    ('{"msg":"token=SECRET2"}', '{"msg":"token=***"}'),
    ('{"msg":"login failed\\npassword=SECRET5"}', '{"msg":"login failed\\npassword=***"}'),
    ('"Env":["POSTGRES_PASSWORD=SECRET4","PATH=/usr/bin"]', '"Env":["POSTGRES_PASSWORD=***","PATH=/usr/bin"]'),
    ('docker run -e "PASSWORD=a PW25" img', 'docker run -e "PASSWORD=***" img'),
    # a coloured log line is read as the text it shows (the terminal's escapes go)
    ("\x1b[36mINFO\x1b[0m[0000] starting \x1b[36mtoken\x1b[0m=SECRET7", "INFO[0000] starting token=***"),
    ("\x1b[32mDATABASE_URL=postgres://u:SECRET8@db\x1b[0m", "DATABASE_URL=postgres://u:***@db"),
    # shapes of their own
    ("[Server] A temporary password is generated for root@localhost: SECRETA",
     "[Server] A temporary password is generated for root@localhost: ***"),
    ('DSN="app:SECRETD@tcp(db:3306)/app"', 'DSN="app:***@tcp(db:3306)/app"'),
    ("  stats auth admin:SECRETE", "  stats auth admin:***"),
    ("cache_peer p parent 3128 0 login=user:SECRETK", "cache_peer p parent 3128 0 login=user:***"),
    ("htpasswd -bc /etc/nginx/.htpasswd bob SECRETH", "htpasswd -bc /etc/nginx/.htpasswd bob ***"),
    ("htpasswd -nb bob SECRETH3", "htpasswd -nb bob ***"), ("htpasswd -c f bob", "htpasswd -c f bob"),
    ("vault login -no-print s.SECRETJ", "vault login -no-print ***"), ("vault status", "vault status"),
    # a password option's value attached to it
    ("sshpass -pSECRETB ssh db", "sshpass -p*** ssh db"), ("ldapsearch -x -D cn=admin -wSECRETC", "ldapsearch -x -D cn=admin -w***"),
    ("7z x -pSECRETF a.7z", "7z x -p*** a.7z"), ("7z a -mx=9 -t7z x.7z", "7z a -mx=9 -t7z x.7z"),
    ("zip -P SECRETG a.zip f", "zip -P *** a.zip f"), ("useradd -p SECRETI bob", "useradd -p *** bob"),
])
def test_json_log_lines_coloured_lines_and_more_tools_are_hidden(text: str, shown: str) -> None:
    assert redact_credentials(text) == shown


@pytest.mark.parametrize(("text", "shown"), [
    # colours written inside a JSON string (docker writes ESC as \u001b), a charset escape, a long CSI
    ('{"log":"\\u001b[32mtoken\\u001b[0m=S3cretZq\\n"}', '{"log":"token=***\\n"}'),
    ('{"log":"\\u001b[1mPassword:\\u001b[0m S3cretZq\\n"}', '{"log":"Password: ***\\n"}'),
    ("\x1b[31mpassword\x1b(B\x1b[m=S3cretZq", "password=***"),
    ("\x1b[" + "1;" * 100 + "1mtoken\x1b[0m: X", "token: ***"),
    # a bearer token closing a JSON object
    ('{"level":"info","headers":"Authorization: Bearer S3cretZq"}',
     '{"level":"info","headers":"Authorization: Bearer ***"}'),
    # bundled and attached forms of the password options
    ("zip -rPS3cretZq out.zip f", "zip -rP*** out.zip f"), ("unzip -PS3cretZq a.zip", "unzip -P*** a.zip"),
    ("useradd -mp S3cretZq bob", "useradd -mp *** bob"), ("ldapsearch -xwS3cretZq -D cn=a", "ldapsearch -xw*** -D cn=a"),
    ("ldapsearch -xw S3cretZq", "ldapsearch -xw ***"), ("rar a -hpS3cretZq a.rar f", "rar a -hp*** a.rar f"),
    ("zip -r out.zip dir", "zip -r out.zip dir"), ("useradd -m bob", "useradd -m bob"),
    # the last argument, wherever the options are
    ("htpasswd -B -b -C 10 /etc/x admin S3cretZq", "htpasswd -B -b -C 10 /etc/x admin ***"),
    ("htpasswd -b -- /etc/x admin X1", "htpasswd -b -- /etc/x admin ***"),
    ("htpasswd -b /etc/x admin 'pass word X'", "htpasswd -b /etc/x admin ***"),
    ("htpasswd -b f u X4; echo done", "htpasswd -b f u ***; echo done"),
    ("vault login -address https://v:8200 S3cretZq", "vault login -address https://v:8200 ***"),
    ("bao login X2", "bao login ***"), ('{"MESSAGE":"vault login X3"}', '{"MESSAGE":"vault login ***"}'),
    # Go DSNs as the driver takes them
    ("user:S3cretZq@/dbname", "user:***@/dbname"), ("root:p@ss/X@tcp(db:3306)/app", "root:***@tcp(db:3306)/app"),
    ("user:X@tcp6(::1)/db", "user:***@tcp6(::1)/db"), ("git@github.com:org/repo.git", "git@github.com:org/repo.git"),
    ("A temporary password is generated for root@localhost:\tSECRETT",
     "A temporary password is generated for root@localhost:\t***"),
    # a YAML list item's value to the line's end; make's assignments
    ("- password: hello S3cretZq", "- password: ***"), ("DB_PASSWORD := S3cretZq", "DB_PASSWORD := ***"),
    ("DB_PASSWORD ?= S3cretZq", "DB_PASSWORD ?= ***"),
])
def test_variants_of_json_colours_bundled_options_last_arguments_and_dsns(text: str, shown: str) -> None:
    assert redact_credentials(text) == shown


@pytest.mark.parametrize(("text", "shown"), [
    # a JSON member's value is read as the text it stands for (journalctl -o json, structured app logs)
    ('{"MESSAGE":"redis-cli -a S3cretZq ping"}', '{"MESSAGE":"redis-cli -a *** ping"}'),
    ('{"MESSAGE":"password: S3cretZq"}', '{"MESSAGE":"password: ***"}'),
    ('{"log":"mysql -pS3cretZq"}', '{"log":"mysql -p***"}'),
    ('{"level":"info","msg":"user logged in"}', '{"level":"info","msg":"user logged in"}'),
    ('x "unclosed "a=b"', 'x "unclosed "a=b"'),
])
def test_a_json_members_value_is_read_as_text(text: str, shown: str) -> None:
    assert redact_credentials(text) == shown


@pytest.mark.parametrize(("text", "shown"), [
    # Oracle logins: clients, RMAN, JDBC thin URLs, connection variables — not Go modules, image digests or OS auth
    ("sqlplus -s system/S3cretZq@ORCL", "sqlplus -s system/***@ORCL"),
    ("expdp system/S3cretZq directory=d dumpfile=x.dmp", "expdp system/*** directory=d dumpfile=x.dmp"),
    ("rman target sys/S3cretZq@orcl", "rman target sys/***@orcl"),
    ("jdbc:oracle:thin:scott/S3cretZq@db:1521:ORCL", "jdbc:oracle:thin:scott/***@db:1521:ORCL"),
    ("ORACLE_CONN=system/S3cretZq@ORCL", "ORACLE_CONN=system/***@ORCL"),
    ("github.com/foo/bar@v1.2.3", "github.com/foo/bar@v1.2.3"), ("sqlplus / as sysdba", "sqlplus / as sysdba"),
    ("docker.io/library/nginx@sha256:abc", "docker.io/library/nginx@sha256:abc"),
    ("rman target sys/S3cretZq@orcl catalog rcat/S3cretZr@rcv", "rman target sys/***@orcl catalog rcat/***@rcv"),
    ("SQL> conn scott/S3cretZq@db", "SQL> conn scott/***@db"),
    ("Building target app/main", "Building target app/main"), ("run sql app/main", "run sql app/main"),
    # clients' password options and last arguments
    ("mysqladmin -uroot password S3cretZq", "mysqladmin -uroot password ***"), ("mysqladmin status", "mysqladmin status"),
    ("cqlsh -u cassandra -p S3cretZq", "cqlsh -u cassandra -p ***"),
    ("mosquitto_sub -h h -u u -P S3cretZq -t t", "mosquitto_sub -h h -u u -P *** -t t"),
    ("snmpwalk -v3 -u u -A S3cretZq -X S3cretZr host", "snmpwalk -v3 -u u -A *** -X *** host"),
    ("keytool -list -keystore k.jks -storepass S3cretZq", "keytool -list -keystore k.jks -storepass ***"),
    ("openssl enc -aes-256-cbc -k S3cretZq -in f", "openssl enc -aes-256-cbc -k *** -in f"),
    ("xfreerdp /v:host /u:bob /p:S3cretZq", "xfreerdp /v:host /u:bob /p:***"),
    ("rabbitmqctl add_user bob S3cretZq", "rabbitmqctl add_user bob ***"),
    ("rabbitmqctl change_password bob S3cretZq", "rabbitmqctl change_password bob ***"),
    ("vault operator unseal S3cretZq", "vault operator unseal ***"), ("wpa_passphrase MySSID S3cretZq",
                                                                      "wpa_passphrase MySSID ***"),
    # Wi-Fi and network devices
    ("nmcli con modify wifi wifi-sec.psk S3cretZq", "nmcli con modify wifi wifi-sec.psk ***"),
    ("802-11-wireless-security.psk:          S3cretZq", "802-11-wireless-security.psk:          ***"),
    (" neighbor 10.0.0.1 password S3cretZq", " neighbor 10.0.0.1 password ***"),
    ("tacacs-server host 10.1.1.1 key 7 0822455D0A16", "tacacs-server host 10.1.1.1 key 7 ***"),
    (" ip ospf authentication-key S3cretZq", " ip ospf authentication-key ***"),
    (" key-string 7 0822455D0A16", " key-string 7 ***"),
    ('  pre-shared-key ascii-text "S3cretZq";', '  pre-shared-key ascii-text "***";'),
    # a Telegram bot's token, XML settings by attribute, a Go struct printed with %+v
    ("TELEGRAM_BOT=123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw", "TELEGRAM_BOT=123456789:***"),
    ("GET https://api.telegram.org/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/getMe",
     "GET https://api.telegram.org/bot123456789:***/getMe"),
    ('<param name="password">S3cretZq</param>', '<param name="password">***</param>'),
    ('<void property="password"><string>S3cretZq</string></void>',
     '<void property="password"><string>***</string></void>'),
    ('<param name="timeout">30</param>', '<param name="timeout">30</param>'),
    ('level=info config="{Password:S3cretZq User:bob}"', 'level=info config="{Password:*** User:bob}"'),
    ("{Name:web Port:80}", "{Name:web Port:80}"),
    # plural names (Ongrid's own ONGRID_TOKENS), not a model's token counts
    ("ONGRID_TOKENS=alice:S3cretZqS3cretZq", "ONGRID_TOKENS=***"), ("api_tokens: S3cretZq", "api_tokens: ***"),
    ("max_tokens: 4096", "max_tokens: 4096"), ('"prompt_tokens": 123', '"prompt_tokens": 123'),
])
def test_oracle_logins_device_secrets_and_more_clients_are_hidden(text: str, shown: str) -> None:
    assert redact_credentials(text) == shown
