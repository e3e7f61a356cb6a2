"""Hide secret-looking values in command lines and command output before a model sees them.

Other programs' command lines, logs and unit files are data Ongrid does not
own: a ``--token X``, ``--password=X``, ``mysql -pX`` or
``https://user:X@host`` written there by someone else would otherwise reach
the model (and its provider) through a process listing or a host command's
output (``host_bash`` passes all of its output through this filter).
Ongrid cannot know those secrets (its own are redacted everywhere by the
secret set), so this is a best-effort filter over the shapes in which
command lines carry credentials:

- an option, a ``name=value`` / ``name:value`` word (also inside another
  option's value: ``--env=DB_PASSWORD=X``, ``Environment="TOKEN=X"``), a
  query parameter or comma-separated pair (``?api_key=X``,
  ``-o user=bob,password=X``) or a JSON member (``{"password":"X"}``) whose
  name says credential — a part of it (split at ``-``, ``_``, ``.`` …) is
  ``password``, ``pwd``, ``token``, ``secret``, ``auth``, ``credential``,
  ``cookie``, ``bearer`` or ends in one of them (``PGPASSWORD``), or ``key``
  after ``api``, ``access``, ``private``, ``secret`` … (``--author`` and
  ``key_buffer_size`` are not credentials): its value, written in the same
  word or as the next word (even one starting with ``-``), becomes ``***``;
  after ``Authorization:`` the scheme (``Basic``, ``Bearer`` …) stays;
- the password of a URL's user information (``scheme://user:***@host``) and
  of ``--user``/``-u`` ``name:password`` (curl) or ``name%password``
  (smbclient ``-U``);
- a client's own password option: ``-pX`` of the MySQL/MariaDB tools,
  ``redis-cli -a X``, ``sshpass -p X``, the OpenLDAP tools' ``-w X``,
  ``mongo``/``mongosh -p X``, ``sqlcmd -P X``, ``lftp -u user,X``, a
  registry login's ``-p X`` (``docker login``, ``podman login``, ``az login``
  …), and an option's value on the next line (``- --db-password`` / ``- X``
  of a YAML list, a JSON list split over lines); Redis's ``AUTH [user] X`` (typed at
  ``redis-cli``, on its command line, or as ``MONITOR`` shows it);
- passwords fed to ``chpasswd`` (``echo 'root:X' | chpasswd``, ``<<<``, the
  ``user:X`` lines of a cloud-init ``chpasswd:`` block) and to ``passwd``
  (``echo X | passwd --stdin bob``);
- the same names in configuration files and logs: ``password = X``,
  ``password= X``, ``db_password: X`` (INI, YAML, TOML, shell), ``'password'
  => X`` (PHP), a line's first word as a key (``requirepass X``), a name set
  by ``set`` (``aws configure set aws_secret_access_key X``, ``CONFIG SET
  requirepass X``), a YAML anchor or tag before the value (``password: &pw
  X``), a network device's type digit (``secret 0 X``), ``.netrc``
  lines, ``<password>X</password>``, JSON members as loggers write them
  (``{"password": "X"}``, escaped quotes, JSON inside a JSON string), quoted
  list items (``"MYSQL_ROOT_PASSWORD=X",``); a quoted value holding spaces is
  hidden up to its closing quote on the same line, the quotes kept;
- every pair after ``Cookie:``, a token after ``Bearer`` or ``Basic`` on its
  own, ``IDENTIFIED BY 'X'``, and the lines of a PEM or PGP private key;
- application and server configuration: quoted pairs (``'PASSWORD': 'X'``,
  PHP's ``define('DB_PASSWORD', 'X')``), ``$db_pass = 'X'``, the
  ``value="X"`` of an element whose ``key=``/``name=`` says credential,
  ``;``-separated connection strings (``Password=X;``), ``fastcgi_param``,
  ``SetEnv``, ``ENV`` and ``env[NAME]`` values, npm's ``:_authToken=X``, a
  URL whose user name is a long token (``https://ghp_…@host``), a YAML block
  scalar (``password: |`` and the lines indented under it) and an XML
  element opened alone on its line (its lines up to the close, at most
  200);
- the command line of a Linux audit record (``EXECVE``'s ``a0=… a1=…``,
  ``PROCTITLE``, sudo's ``cmd=``), whose arguments the kernel writes in
  hexadecimal as soon as one holds a space: decoded and checked as a
  command (each argument one word, a script's lines as lines; an EXECVE
  record after the earlier ones of its event), and when it holds a secret
  shown decoded with the value hidden (``args (decoded): mysql -uroot
  -p***``);
- a shell command continued over lines (`` \\`` at a line's end): each line
  checked after the command's first line and the line before;
- a JSON byte array (``journalctl -o json`` writes a message holding a
  control character so): decoded, checked, and shown as a string when it
  holds a secret;
- values whose shape alone says credential, wherever they stand: GitHub,
  GitLab, Slack, Stripe, OpenAI-style, npm, Google API and AWS access key
  tokens, JWTs, a Slack webhook's secret and password hashes in crypt format
  (``$6$…``, ``$apr1$…``, PostgreSQL's ``md5…``).

:func:`redact_credentials` keeps every other character of the text,
whitespace and line breaks included, so a ``ps`` table keeps its columns'
starts.  Pure; linear in the text's length (every pattern is anchored or
bounded, so no input makes a regular expression backtrack over a word).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from ongridd.auditargs import audit_records

HIDDEN = "***"
#: what a tool's answer says (``redacted``) when this filter changed something in it
REDACTED_NOTE = "values that look like credentials (--token X, password=X, URL passwords) are ***"

#: name parts (lower case, split at anything not a letter or digit) that say the value is a credential
_SECRET_PARTS = frozenset({"pass", "passwd", "password", "passphrase", "pwd", "token", "secret", "credential",
                           "credentials", "cookie", "bearer", "auth", "authorization", "apikey", "privatekey",
                           "secretkey", "accesskey", "clientsecret", "sessionkey", "requirepass", "masterauth",
                           "signature", "sig", "psk", "dbpass", "sshpass", "rootpass",
                           "adminpass", "userpass", "ldappass", "smtppass", "mailpass", "redispass", "pgpass",
                           "authtoken", "salt", "community", "rocommunity", "rwcommunity"})
#: endings of a name part that say so too (``PGPASSWORD``, ``MYSQL_PWD`` → ``mysql``/``pwd``, ``ghtoken``)
_SECRET_ENDINGS = ("password", "passwd", "pwd", "token", "secret", "apikey", "secretkey", "privatekey", "passphrase")
#: a ``key`` part after one of these is a credential (``api_key``, ``AWS_SECRET_ACCESS_KEY``); ``key`` alone
#: is one only as the whole name (``--key X``, ``KEY=X``), never as a part of ``key_buffer_size``
_KEY_KINDS = frozenset({"api", "access", "private", "secret", "signing", "encryption", "master", "client",
                        "account", "license", "session", "shared", "auth", "app", "stripe", "nonce", "in", "hmac",
                        "jwt", "csrf", "cipher", "aes", "preshared"})
#: a name's last part that says its value is not the credential but about it (a file holding it, a
#: mode, a policy): ``--tls-private-key-file=/path``, ``password_encryption``, ``--authorization-mode``
_ABOUT_PARTS = frozenset({"file", "files", "path", "dir", "directory", "mode", "modes", "policy", "encryption",
                          "method", "methods", "type", "length", "required", "enabled", "webhook", "hash",
                          "algorithm", "format", "command", "cmd", "env", "ref", "name", "names", "id", "handle",
                          "rotation", "expiry", "expiration", "age", "lifetime", "count", "stdin"})
#: an option's first part that makes it a switch about a credential, not one (``--show-signature``,
#: ``--no-password``, ``--prompt-root-password``; a variable ``reset_password_token`` stays one)
_FLAG_VERBS = frozenset({"show", "verify", "no", "require", "check", "prompt", "print", "skip", "ask", "enable",
                         "disable"})
#: values that are never a credential (a switch)
_NOT_SECRET_VALUES = frozenset({"true", "false", "yes", "no", "on", "off", "none", "null", "enabled", "disabled",
                                "required", "optional", "0", "1"})
#: the shell's working-folder variables (``PWD=/home/bob`` in every sudo log line): a folder, not a password
_FOLDER_NAMES = frozenset({"pwd", "oldpwd"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
#: name parts that say password only as a name's last part (``PW``, ``ROOT_PW``, ``olcRootPW``;
#: not ``pw_dir`` or ``PW_HOME``)
_LAST_PARTS = frozenset({"pw", "pword", "passw", "creds"})
#: a ``pat`` (personal access token) last part counts only after these (``GITHUB_PAT``; not ``exclude_pat``)
_PAT_OWNERS = frozenset({"github", "gh", "gitlab", "gitea", "forgejo", "bitbucket", "azure", "ado", "devops", "hf",
                         "huggingface", "codeberg"})
_PARTS = re.compile(r"[^a-z0-9]+")


def _plain_value(value: str, name: str = "") -> bool:
    """Whether ``value`` cannot be a credential whatever its name says: a switch (``false``,
    ``on``), or the folder of ``PWD=/home/bob`` (a shell's working folder, not ODBC's ``Pwd=X``)."""
    bare = value.strip("\"',;").lower()
    return bare in _NOT_SECRET_VALUES or (name.lstrip("-").lower() in _FOLDER_NAMES and bare.startswith("/"))


def _secret_name(name: str) -> bool:
    """Whether an option or key ``name`` (``--api-key``, ``DB_PASSWORD``, ``apiKey``) names a credential;
    ``--author``, ``--keyfile``, ``key_buffer_size`` do not."""
    parts = [p for p in _PARTS.split(_CAMEL.sub("_", name).lower()) if p]  # AccountKey → account, key
    if parts == ["key"]:
        return True
    if not parts or parts[-1] in _ABOUT_PARTS or (name[:1] == "-" and len(parts) > 1 and parts[0] in _FLAG_VERBS):
        return False
    if parts[-1] in _LAST_PARTS or (parts[-1] == "pat" and len(parts) > 1 and parts[-2] in _PAT_OWNERS):
        return True
    for i, part in enumerate(parts):
        if part in _SECRET_PARTS or part.endswith(_SECRET_ENDINGS):
            return True
        if part == "key" and i > 0 and parts[i - 1] in _KEY_KINDS:
            return True
    return False


#: ``--name=value``, ``/name=value``, ``name=value``, ``name:value`` (a URL's ``scheme:`` is not one: ``//``
#: follows); matched from the word's start only
_ASSIGNED = re.compile(r"([-/+]{0,2}[A-Za-z_][A-Za-z0-9_.-]*)([=:])(?!//)(.+)\Z", re.DOTALL)
#: an option word standing alone: ``--token``, ``-password``
_OPTION = re.compile(r"-{1,2}[A-Za-z][A-Za-z0-9_.-]*\Z")
#: a URL's user information with a password (the scheme at most 32 characters: linear on any word)
_URL_PASSWORD = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s/:@]{0,256}:)[^\s/]*@")
#: a query parameter, or a ``name=value`` pair after a comma (``-o user=bob,password=X``)
_QUERY_SECRET = re.compile(r"([?&,#]([^=&#,\s]{1,64})=)([^&#,\s]+)")
#: a ``NAME=value`` pair after a ``;`` (an ADO.NET, ODBC or Azure connection string), the value ending at
#: the next ``;``
_CONNECTION_SECRET = re.compile(r"(;\s{0,4}([^=;&#,\s]{1,64})=)([^;\s]+)")
#: a JSON member with a secret-looking name
_JSON_SECRET = re.compile(r'("([^"\s]{1,64})"\s{0,4}:\s{0,4}")((?:[^"\\]|\\.)*)(")')
#: the same inside a JSON string (a JSON log line carried as a string: ``{"log":"{\"password\":\"X\"}"}``)
_JSON_ESCAPED = re.compile(r'(\\"([^"\\\s]{1,64})\\"\s{0,4}:\s{0,4}\\")((?:[^"\\]|\\[^"])*)(\\")')
#: the same inside a JSON string, still open at the word's end (``{"log":"{\"password\":\"a b\"}"}``)
_JSON_ESCAPED_OPEN = re.compile(r'(\\"([^"\\\s]{1,64})\\"\s{0,4}:\s{0,4}\\")(?:[^"\\]|\\[^"])*\Z')
#: a JSON member whose string value is still open at the word's end (a value holding a space)
_JSON_OPEN = re.compile(r'("([^"\s]{1,64})"\s{0,4}:\s{0,4}")(?:[^"\\]|\\.)*\Z')
#: a JSON member's name and colon ending a word: its value is the next word (``{"password": "X"}``)
_JSON_KEY_END = re.compile(r'"([^"\s]{1,64})"\s{0,4}:\Z')
#: an XML element holding a secret-named value on one line (``<password>X</password>``)
_XML_SECRET = re.compile(r"(<([A-Za-z_][\w.:-]{0,63})>)([^<]{1,1000})(</\2>)")
#: a word that is a credential on its own after ``Bearer``/``Basic`` (a token, base64)
_TOKEN_WORD = re.compile(r"([A-Za-z0-9._~+/=-]{8,})([\"',;]{0,2})\Z")
#: keys of configuration files written "key value" whose value is a credential (the whole key, any case)
_CONFIG_KEYS = frozenset({"password", "passwd", "pass", "passphrase", "requirepass", "masterauth", "auth_pass",
                          "secret", "token", "apikey", "api_key", "api_token", "access_token", "auth_token",
                          "secret_key", "client_secret", "private_key", "smtp_pass", "smtp_password",
                          "db_password", "bindpw", "bind_pw", "rootpw", "psk", "wpa_passphrase", "sasl_password",
                          "rocommunity", "rwcommunity", "rocommunity6", "rwcommunity6"})
#: configuration keys whose first argument is the secret, whatever follows it (snmpd's
#: ``rocommunity SECRET SOURCE OID``)
_FIRST_ARGUMENT_KEYS = frozenset({"rocommunity", "rwcommunity", "rocommunity6", "rwcommunity6"})
#: configuration directives whose next word is their secret, wherever they stand on the line
#: (haproxy's ``user admin insecure-password X``)
_DIRECTIVE_SECRETS = frozenset({"insecure-password", "auth-password", "bind-password", "secret-key"})
#: a Redis ACL rule's password (``>PASSWORD``) or its hash (``#<sha256>``)
_ACL_SECRET = re.compile(r"(>|#(?=[0-9a-fA-F]{64}\Z))(.+)\Z")
#: a character closing around an unquoted value (one is kept after it: a JSON member's comma, a quote)
_CLOSERS = "\"',;"
#: a JSON member's name standing alone as a word (``{"token"`` of ``{"token" : "X"}``)
_JSON_KEY_WORD = re.compile(r'[{\[,(]{0,4}"([^"\s=:]{1,64})"\Z')
#: the lines of a PEM private key between its BEGIN and END lines
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
#: schemes of an ``Authorization`` header: the credential is the word after them
_AUTH_SCHEMES = frozenset({"basic", "bearer", "token", "digest", "negotiate", "ntlm", "apikey"})
#: SQL Server's tools: ``-P X`` and ``-PX``
_ATTACHED_P = frozenset({"sqlcmd", "bcp", "isql"})
#: client programs (by file name) and their options that take a password as the next word
_PASSWORD_OPTIONS = {
    "redis-cli": ("-a",), "sshpass": ("-p",), "mongo": ("-p",), "mongosh": ("-p",), "ipmitool": ("-P",),
    **{name: ("-P",) for name in _ATTACHED_P},
    **{name: ("-c",) for name in ("snmpwalk", "snmpbulkwalk", "snmpget", "snmpgetnext", "snmpbulkget", "snmpset",
                                  "snmptable", "snmpdf", "snmpstatus")},
    **{name: ("-w",) for name in ("ldapsearch", "ldapmodify", "ldapadd", "ldapdelete", "ldappasswd",
                                  "ldapwhoami", "ldapcompare", "ldapmodrdn", "ldapexop")},
}
#: words that end one command of a command line (a ``login``'s ``-p`` is not the next command's)
_COMMAND_SEPARATORS = frozenset({"&&", "||", ";", "|", "&"})
#: a YAML node's anchor or tag before its value (``password: &pw X``, ``password: !!str X``)
_YAML_NODE_PROPERTY = re.compile(r"(?:&[A-Za-z0-9_-]{1,64}|!!?[A-Za-z0-9_.-]{0,64})\Z")
#: programs whose ``login`` subcommand takes the password after ``-p`` (``docker login -u ci -p X``)
_LOGIN_PROGRAMS = frozenset({"docker", "podman", "nerdctl", "buildah", "skopeo", "helm", "oras", "crane", "az",
                             "finch", "regctl"})
#: programs whose ``-p`` takes the password in the same word (the MySQL and MariaDB tools)
_MYSQL = re.compile(r"(?:mysql[a-z_-]{0,16}|mariadb(?:-[a-z]{1,16})?)\Z")
_WORDS = re.compile(r"(\s+)")
#: a key standing alone as a word (``password`` of ``password = X``; quoted as in JSON or TOML)
_BARE_NAME = re.compile(r"[\"']?\$?[A-Za-z_][A-Za-z0-9_.-]{0,127}[\"']?\Z")
#: ``env[NAME]`` of a php-fpm pool: the name in brackets is the key
_BRACKETED_NAME = re.compile(r"(?:env\[[\"']?|\$[A-Za-z_][A-Za-z0-9_]{0,63}"
                             r"(?:\[(?:['\"][^'\"\]]{1,64}['\"]|\$?[A-Za-z0-9_]{1,64})\]){0,8}\[['\"])"
                             r"([A-Za-z_][A-Za-z0-9_.-]{0,127})[\"']?\]\Z")
#: ``ipsec.secrets`` kinds whose next word is the secret (``%any : PSK "X"``)
_IPSEC_KINDS = frozenset({"PSK", "EAP", "XAUTH", "NTLM"})
#: Cisco-style type digits between a secret's name and its value (``username bob secret 0 X``), on
#: the lines of a device configuration that open with one of these
_TYPE_DIGITS = frozenset({"0", "5", "7", "8", "9"})
_DEVICE_DIRECTIVES = frozenset({"username", "enable", "key", "password", "secret", "tacacs-server", "radius-server",
                                "ppp", "ntp", "ip", "crypto", "server", "snmp-server", "wpa-psk", "authentication-key"})
#: words after which a secret's name is followed by its value, the line's last word (``aws configure set
#: aws_secret_access_key X``, ``CONFIG SET requirepass X``); after ``snmp-server`` the next word
#: whatever follows (``snmp-server community X RO``)
_SETTERS = frozenset({"set"})
#: a zsh history line's ``: <start>:<elapsed>;`` prefix
_ZSH_HISTORY = re.compile(r"(: [0-9]{1,12}:[0-9]{1,9};)(.*)\Z", re.DOTALL)
#: a line whose first word (after a list's ``-``) is the value of a secret option that ended the line above
_FIRST_VALUE = re.compile(r"(\s*(?:-\s{1,4})?)(\S+)")
#: directives whose next two words are a variable's name and its value (nginx ``fastcgi_param``,
#: Apache ``SetEnv``, a Dockerfile's ``ENV``)
_ENV_DIRECTIVES = frozenset({"fastcgi_param", "uwsgi_param", "scgi_param", "setenv", "env"})
#: values whose shape alone says credential, wherever they stand (a provider's token formats, JWTs,
#: password hashes in crypt format); each bounded, so linear on any input
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_])(?:"
    r"gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{30,255}|glpat-[A-Za-z0-9_-]{20,255}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,255}|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,255}"
    r"|sk-(?:ant-|proj-)?[A-Za-z0-9_-]{32,255}|npm_[A-Za-z0-9]{36}|AIza[0-9A-Za-z_-]{35}"
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}"
    r"|eyJ[A-Za-z0-9_-]{4,2000}\.eyJ[A-Za-z0-9_-]{4,4000}\.[A-Za-z0-9_-]{4,2000}"
    # password hashes in crypt format: $id$salt$hash (not awk's or a shell's $1$2$3 …)
    r"|\$(?:1|5|6|md5|apr1)\$(?:rounds=[0-9]{1,9}\$)?[./A-Za-z0-9]{1,64}\$[./A-Za-z0-9]{8,1000}"
    r"|\$2[abxy]?\$[0-9]{2}\$[./A-Za-z0-9]{53}"
    r"|\$(?:y|gy|7)\$[./A-Za-z0-9]{1,64}\$[./A-Za-z0-9]{1,64}\$[./A-Za-z0-9]{8,1000}"
    r"|\$argon2(?:id|i|d)\$v=[0-9]{1,3}\$[a-z0-9=,]{1,64}\$[A-Za-z0-9+/]{1,200}\$[A-Za-z0-9+/]{8,1000}"
    r"|\$(?:pbkdf2[a-z0-9-]{0,16}|scrypt)\$[A-Za-z0-9./+=,-]{1,64}\$[A-Za-z0-9./+=$,-]{8,1000}"
    r"|\{(?:SHA|SSHA|SHA256|SSHA256|SHA512|SSHA512|CRYPT|MD5|SMD5|PLAIN|CLEARTEXT)\}[A-Za-z0-9+/=.$]{4,1000}"
    r"|\*[0-9A-F]{40}"  # MySQL's native password hash
    r"|md5[0-9a-f]{32}"  # PostgreSQL's md5 password hash (pg_authid, pgbouncer's userlist.txt)
    # a base64 PEM private key (a Kubernetes Secret's tls.key) and a registry's auths (.dockerconfigjson)
    r"|LS0tLS1CRUdJTi[A-Za-z0-9+/]{0,40}(?:UFJJVkFURSBLRV|BSSVZBVEUgS0V|QUklWQVRFIEtFW)[A-Za-z0-9+/=]{0,100000}"
    r"|eyJhdXRocyI6[A-Za-z0-9+/=]{8,100000}"
    r"|hv[sbr]\.[A-Za-z0-9_-]{20,255}|SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}|AGE-SECRET-KEY-1[0-9A-Z]{50,70}"
    r"|SCRAM-SHA-(?:1|256)\$[0-9]{1,7}:[A-Za-z0-9+/=]{4,200}\$[A-Za-z0-9+/=]{8,200}:[A-Za-z0-9+/=]{8,200}"
    r")(?![A-Za-z0-9_])")
#: the secret part of a Slack incoming webhook's address
_SLACK_HOOK = re.compile(r"(hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9]{1,32}/[A-Za-z0-9]{1,32}/"
                         r"|discord(?:app)?\.com/api/webhooks/[0-9]{1,32}/)[A-Za-z0-9_-]{6,128}")
#: a quoted name and a quoted value: a Python or PHP dict/array member (``'password': 'X'``,
#: ``'password' => 'X'``), a PHP ``define('DB_PASSWORD', 'X')``; the value on one line
_QUOTED_PAIR = re.compile(r"""(\bdefine[ \t]{0,8}\([ \t]{0,8})?(['"])([A-Za-z_][A-Za-z0-9_.-]{0,63})\2"""
                          r"""([ \t]{0,64}(?(1),|(?::|=>))[ \t]{0,64})(['"])((?:(?!\5)[^\\\n]|\\.){0,2000})\5""")
#: an element's ``key="NAME" value="X"`` (or ``name=``) attributes: .NET appSettings, Tomcat parameters
_KEY_VALUE_ATTRS = re.compile(r"""\b((?:key|name)\s{0,4}=\s{0,4}(['"])([^'"\n]{1,64})\2\s{1,16}"""
                              r"""value\s{0,4}=\s{0,4}(['"]))([^'"\n]{0,2000})(\4)""", re.IGNORECASE)
#: a JSON object's ``"name": "X", "value": "Y"`` (a Kubernetes or ECS environment entry on one line)
_JSON_NAME_VALUE = re.compile(r'("name"\s{0,4}:\s{0,4}"([^"\n]{1,64})"\s{0,4},\s{0,4}"value"\s{0,4}:\s{0,4}")'
                              r'((?:[^"\\\n]|\\.){0,2000})(")')
#: ``- name: DB_PASSWORD`` / ``"name": "DB_PASSWORD",`` on a line of its own: its value is on the next
#: line (``value: X``, ``"value": "X"``)
_NAME_LINE = re.compile(r"""\s*(?:(?:-\s{1,4})?["']?name["']?\s{0,4}:\s{0,4}["']?([A-Za-z_][A-Za-z0-9_.-]{0,63})["']?,?"""
                        r"""|<name>([A-Za-z_][A-Za-z0-9_.-]{0,127})</name>)\s*\Z""")
_VALUE_LINE = re.compile(r"""(\s*["']?value["']?\s{0,4}:\s{0,4})(\S.{0,2000})\Z""")
#: a Hadoop-style ``<value>X</value>`` line under such a ``<name>`` line
_XML_VALUE_LINE = re.compile(r"(\s*<value>)([^<]{0,2000})(</value>\s*)\Z")
#: npm's ``//registry/:_authToken=X`` (and ``_auth``, ``_password``)
#: the ``key="NAME"``/``name="NAME"`` word of such an element: it names a setting, it is no secret
_ATTRIBUTE_NAME = re.compile(r"""(?i:key|name)=(['"])[^'"]{0,64}\1\Z""")
_NPM_AUTH = re.compile(r"(:_(?:authToken|auth|password)=)(\S+)")
#: a URL whose user information is one long word and no password: a token as the user name
#: (``https://ghp_…@github.com``); a short user name (``git@``) stays
_URL_TOKEN_USER = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]{0,31}://)"
                             r"((?=[A-Za-z]{0,255}[0-9])[A-Za-z0-9]{30,256})@")
#: a YAML key whose value is a block scalar on the lines after it (``password: |``)
_YAML_BLOCK_KEY = re.compile(r"(\s*)[\"']?([A-Za-z_][A-Za-z0-9_.-]{0,127})[\"']?\s{0,4}:\s{0,4}[|>][-+0-9]{0,3}\s*\Z")
#: an XML element opened alone on its line (its value on the next lines: ``<password>``)
_XML_OPEN_LINE = re.compile(r"\s*<([A-Za-z_][\w.:-]{0,63})>\s*\Z")
#: a WireGuard private key under netplan's ``keys: private:`` (a 32-byte key in base64)
_WG_PRIVATE = re.compile(r"(\bprivate(?:[-_]?key)?[ \t]{0,8}[:=][ \t]{0,8}['\"]?)[A-Za-z0-9+/]{42}[AEIMQUYcgkosw480]=")
#: a ``user:password`` word on a line that runs chpasswd (``echo 'root:X' | chpasswd``,
#: ``chpasswd <<< "root:X"``, ``printf '%s\\n' 'root:X' | chpasswd``)
_CHPASSWD_INPUT = re.compile(r"""(?<![\w/$.:@%-])([A-Za-z_][A-Za-z0-9_.@-]{0,63}:)([^\s\\|;&'"]+)""")
#: a line that feeds chpasswd or passwd (``… | chpasswd``, ``… | sudo /usr/sbin/passwd``, ``chpasswd <<< …``);
#: group 1 or 2 is ``chpasswd`` when it is that one
_FEEDS_PASSWD = re.compile(r"\|\s{0,8}(?:sudo\s{1,8})?(?:[^\s|]{0,64}/)?(ch)?passwd\b"
                           r"|\b(ch)passwd\s{0,8}(?:<<<|:\s{0,8}\{)")
#: the word echoed into passwd (``echo X | passwd --stdin bob``)
_PASSWD_INPUT = re.compile(r"""((?:\becho|\bprintf)(?:[ \t]{1,8}-[A-Za-z]{1,3}){0,2}[ \t]{1,8}['"]?)([^\s|;&'"]+)""")
#: a cloud-init ``chpasswd:`` block's ``user:password`` line (``    root:X``, ``    - root:X``)
_CHPASSWD_KEY = re.compile(r"\s*chpasswd\s*:\s*\Z")
_USER_PASSWORD_LINE = re.compile(r"(\s*(?:-\s{1,4})?[A-Za-z0-9_.@-]{1,64}:)(?=\S)(.+)\Z")
#: PAM's control words: ``auth required pam_unix.so`` is no Redis ``AUTH`` command
_PAM_CONTROLS = frozenset({"required", "requisite", "sufficient", "optional", "include", "substack"})
#: the most lines a multi-line value (a YAML block, an XML element) is hidden for
_BLOCK_LINES_MAX = 200


def redact_credentials(text: str) -> str:
    """``text`` (one or more command lines, or a listing holding them) with secret-looking
    values replaced by ``***``; everything else unchanged (a PEM private key's lines
    between its BEGIN and END lines each become ``***``; the argument fields of an audit
    record whose command has a secret are shown decoded, see :func:`_audit_line`)."""
    return _redact_text(text, audit=True)


#: what may stand for the line break of a continued shell command (see :func:`_continued`):
#: whitespace to the filter; the lines before it are cut to so many characters
_BREAKS = ("\u2029", "\u2028", "\x1c", "\x1d", "\x1e")
_CONTINUED_CHARS = 512
#: a line that goes on on the next line: it ends in an odd number of backslashes (the shell drops
#: the last one with the line break); right after a word (``PASSWORD=ab\\`` / ``cd``), the word goes on
_CONTINUES = re.compile(r"(?<!\\)(?:\\\\)*\\\r?\Z")
#: how deep strings inside strings are read (a JSON log line holding a JSON document…)
_QUOTED_DEPTH = 3
#: the words of an audit event kept as the context of its next EXECVE record: the first (the
#: program) and the last ones (an option whose value comes next) — words, not scripts: none holding
#: whitespace or longer than so many characters
_CONTEXT_WORDS = 8
_CONTEXT_CHARS = 256
#: every character ``str.isspace`` knows, and what stands for it inside an argument checked as one
#: word (characters of Unicode's private use area: no whitespace to the filter)
_SPACES = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + \
    "\u2028\u2029\u202f\u205f\u3000"
_ONE_WORD = {ord(c): 0xE000 + i for i, c in enumerate(_SPACES)}
_SPACED = {v: k for k, v in _ONE_WORD.items()}


def _either_hides(one: str, other: str) -> str:
    """Two filtered forms of one line: each word as hidden in either; should they not line up
    word for word (a quoted value hidden across words in one of them), the one that leaves
    fewer characters shown (``other`` when they leave as many)."""
    mine, theirs = _WORDS.split(one), _WORDS.split(other)
    if len(mine) != len(theirs):
        return other if len(other.replace(HIDDEN, "")) <= len(one.replace(HIDDEN, "")) else one
    return "".join(b if HIDDEN in b and HIDDEN not in a else a for a, b in zip(mine, theirs))


def _continued(above: list[str], line: str, alone: str) -> str:
    """``line`` of a shell command continued from the lines ``above`` (its first line and the
    line before), as shown: checked after them (``mysqldump -uroot \\`` / ``-pX``: what the
    command means) and on its own (``alone``: what the line's start says, ``user bob on >X``),
    a word hidden when either check hides it (should the two not line up word for word, the
    one that hides more)."""
    # the shell drops each line's ending backslash with its line break (``KEY \\`` / ``VALUE``:
    # the value follows its key)
    lines = [_CONTINUES.sub("", a) for a in (above if above[0] != above[1] else above[:1])]
    mark = next((m for m in _BREAKS if m not in line and not any(m in a for a in lines)), None)
    if mark is None:
        return alone
    joined, _ = _redact_line(mark.join([*lines, line]))
    if joined.count(mark) != len(lines):  # a value hidden across the line break (a quote left open above):
        quote = min((i for i in (line.find('"'), line.find("'")) if i >= 0), default=-1)
        return HIDDEN + _redact_line(line[quote:])[0] if quote >= 0 else HIDDEN  # this line's part of it too
    after = joined.rsplit(mark, 1)[1]
    if after == alone:
        return alone
    return _either_hides(alone, after)


def _audit_line(line: str, events: dict[str, list[str]], pieced: set[str]) -> str | None:
    """A line holding audit records (:func:`ongridd.auditargs.audit_records`): when the command
    line a record's fields spell (hexadecimal, quoted or as ``ausearch -i`` prints them) has a
    secret-looking value, those fields are shown decoded with the value hidden, control
    characters escaped (``argc=3 a0="mysql" a1="-uroot" a2=2D70…`` becomes ``args (decoded):
    mysql -uroot -p***``), the rest of the line filtered as any other; else None.

    ``events``: the program and the last words of the EXECVE records read so far, by event serial number (``""``:
    the last record without one, as the journal shows them), so a record that goes on from
    an earlier one (``a40=…``) is checked after them; ``pieced``: the events whose last word
    was written in pieces, which the next record may go on with (``a2[1]=…``: the word is
    checked whole, and shown whole in its place)."""
    out: list[str] = []
    at = 0
    for record in audit_records(line):
        context: list[str] = []
        words = record.words
        if record.kind == "args":
            event = record.event or ""  # the journal drops the serial: the record before goes on
            if record.first > 0 or record.first_piece > 0:
                context = events.get(event, [])
                if record.first_piece > 0 and event in pieced and context:  # an argument split between records
                    context, words = context[:-1], (context[-1] + words[0], *words[1:])
            whole = (*context, *words[:-1]) if record.last_pieced else (*context, *words)
            kept = [w for w in whole if len(w) <= _CONTEXT_CHARS and not _has_space(w)]
            if record.last_pieced:  # it may go on in the next record: kept whatever it holds
                kept.append(words[-1][-_CONTEXT_CHARS:])
                pieced.add(event)
            else:
                pieced.discard(event)
            events[event] = kept[:1] + kept[1:][-_CONTEXT_WORDS:]
        shown = _audit_cmd(words[0]) if record.kind in ("cmd", "data") else _audit_words(words, context)
        if shown is not None:
            out += [_redact_line(line[at:record.start])[0], record.shown(shown)]
            at = record.end
    if not out:
        return None
    return "".join(out) + _redact_line(line[at:])[0]


#: a JSON member whose value is an array of byte values (``"MESSAGE":[27,91,51,50,109,…]``, as
#: journalctl writes a field that is not printable UTF-8)
_BYTE_ARRAY = re.compile(r'("[A-Za-z_][A-Za-z0-9_]{0,63}"\s{0,4}:\s{0,4})\[((?:\s{0,4}[0-9]{1,3}\s{0,4},){0,1000000}'
                         r'\s{0,4}[0-9]{1,3}\s{0,4})\]')


def _byte_array(match: re.Match[str], audit: bool) -> str:
    """A JSON byte array (:data:`_BYTE_ARRAY`) as it stands, or — when the text it spells has a
    secret — as a JSON string of that text, the secret hidden."""
    values = [int(v) for v in match.group(2).split(",")]
    if any(v > 255 for v in values):
        return match.group(0)
    text = bytes(values).decode("utf-8", "backslashreplace")
    shown = _redact_text(text, audit)
    return match.group(0) if shown == text else match.group(1) + json.dumps(shown)


_has_space = re.compile(r"\s").search


def _audit_cmd(command: str) -> list[str] | None:
    """sudo's ``cmd=``, one command line as it was typed, with its secrets hidden; None when it has none."""
    shown = _redact_text(command, audit=False)
    return [shown] if shown != command else None


def _audit_argument(word: str) -> str:
    """An audit record's argument holding whitespace as :func:`_audit_words` checks it among
    the others: one word, its secrets hidden — a script's where they stand, an option's or a
    setting's value whole when it holds one of its own (``--command=mysql -pX``)."""
    setting = _SETTING.match(word)
    if setting is not None and _redact_text(word[setting.end(1):], audit=False) != word[setting.end(1):]:
        return word[:setting.end(1)] + HIDDEN
    return _redact_text(word, audit=False).translate(_ONE_WORD)


#: an argument holding a space that is an option with its value or a header (``--command=mysql -pX``,
#: ``-pcorrect horse``, ``Authorization: Bearer X``); group 1: up to its value.  (``NAME=value``
#: is checked as one word: a secret name hides it whole, a script starting so keeps its words.)
_SETTING = re.compile(r"(--?[^\s=]{1,200}=|-[A-Za-z0-9]|[^\s=:-][^\s=:]{0,200}:)(?=\S{0,10000}\s)")


def _audit_words(words: tuple[str, ...], context: list[str]) -> list[str] | None:
    """An audit record's arguments with their secrets hidden, checked after the words of the
    event's earlier records (``context``); None when none has one.

    An argument holding whitespace is checked alone first, as text (a ``sh -c`` script, line
    by line), then as one word among the others, so the value of a password option (``-a``
    ``correct horse``, ``-pcorrect horse``, ``--password=a b``) is hidden whole.  Should
    the filter hide across arguments (an unclosed quote), every argument is hidden."""
    whole = [*context, *words]
    spaced = [bool(_has_space(w)) for w in whole]
    prepared = [_audit_argument(w) if sp else w for w, sp in zip(whole, spaced)]
    shown = _redact_text(" ".join(prepared), audit=False).split(" ")
    if len(shown) != len(prepared):
        return [HIDDEN] * len(words)
    out = [w.translate(_SPACED) if sp else w for w, sp in list(zip(shown, spaced))[len(context):]]
    return None if out == list(words) else out


def _glued(before: str, line: str, shown: str) -> tuple[str, int | None]:
    """``line`` (shown as ``shown``) as the rest of a word the lines ``before`` it began (``ab\\``
    / ``cd``: the shell reads ``abcd``): checked glued to them; when that hides anything of
    this line, all of the line up to what the glued check left unchanged at its end is hidden
    (``PASSWORD=ab\\`` / ``cd x`` → ``*** x``; ``https://bob:ab\\`` / ``cd@host/`` → ``***@host/``).
    Returns the line as shown and where in ``before`` the hidden part began (None: nothing
    hidden, or it began on this line)."""
    goes_on = _CONTINUES.search(line)  # its own line break, kept as it is
    end = goes_on.start() if goes_on is not None else len(line)
    raw = before + line[:end]
    hidden, _ = _redact_line(raw)
    same = 0  # the characters at the end left as they were
    while same < end and same < len(hidden) and hidden[-1 - same] == raw[-1 - same]:
        same += 1
    lead = 0  # the characters at the start left as they were
    while lead < len(before) and lead < len(hidden) and hidden[lead] == raw[lead]:
        lead += 1
    start = lead if lead < len(before) and hidden != raw else None
    if same >= end:
        return shown, start
    tail = line[end - same:end]
    return HIDDEN + (_redact_line(tail)[0] if tail else "") + line[end:], start


def _inside_strings(line: str, depth: int) -> str:
    """``line`` with each double-quoted string that holds escaped quotes (a command inside a
    JSON or C string: ``{"cmd": "sshpass -p \\"a b\\" ssh"}``) filtered as the text it stands
    for, and written back escaped as it was; strings inside those too, ``_QUOTED_DEPTH`` deep."""
    if depth >= _QUOTED_DEPTH or '\\"' not in line:
        return line

    def one(literal: str) -> str:
        if '\\"' not in literal:
            return literal
        try:
            text, as_json = json.loads(literal), True
        except ValueError:
            text, as_json = literal[1:-1].replace('\\"', '"').replace("\\\\", "\\"), False
        if not isinstance(text, str):
            return literal
        shown = _redact_text(text, audit=False, depth=depth + 1)
        if shown == text:
            return literal
        if as_json:
            return json.dumps(shown, ensure_ascii=False)
        return '"' + shown.replace("\\", "\\\\").replace('"', '\\"') + '"'

    for parity in (0, 1):  # a stray quote before the string pairs the quotes the other way: both ways
        out, at = [], 0
        for start, end in _quoted_spans(line, line.find('"') + 1 if parity else 0):
            out += [line[at:start], one(line[start:end])]
            at = end
        line = "".join(out) + line[at:]
    return line


def _quoted_spans(line: str, i: int = 0) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each double-quoted string of ``line`` from index ``i`` on holding an
    escaped quote, left to right (a backslash escapes the next character; an unclosed string
    ends the search).  One pass over the line."""
    n = len(line)
    while (start := line.find('"', i)) != -1:
        j, escaped = start + 1, False
        while j < n:
            c = line[j]
            if c == "\\":
                j, escaped = j + 2, True
                continue
            if c == '"':
                break
            j += 1
        if j >= n:
            return
        if escaped:
            yield start, j + 1
        i = j + 1


def _redact_text(text: str, audit: bool, depth: int = 0) -> str:
    """:func:`redact_credentials`; ``audit``: whether audit records' argument fields are
    decoded and checked (not again inside what they decoded to).

    A shell command continued on the next line (its line ends in a backslash:
    ``mysqldump -uroot \\`` / ``-pX``) is read on with the next line, which is checked
    after the command's first line and the line before it (:func:`_continued`); a hidden
    value that goes on inside its word (``PASSWORD=ab\\`` / ``cd``) hides the next line's
    first word.  A double-quoted string holding escaped quotes is also read as the text it
    stands for (:func:`_inside_strings`).  ``depth``: how deep inside such strings this text is."""
    events: dict[str, list[str]] = {}  # the EXECVE records' words by event (see _audit_line)
    pieced: set[str] = set()
    out = []
    in_key = False
    block_indent: int | None = None  # a YAML block scalar's key indentation: deeper lines are its value
    xml_close = ""  # a secret element opened alone on its line: its lines up to this close tag
    block_lines = 0
    named_above = False  # the line above was "- name: DB_PASSWORD": this one's "value: X" is its value
    chpasswd_indent: int | None = None  # a cloud-init "chpasswd:" key's indentation: deeper lines are its users
    value_below = False  # the line above ended with a secret option: this line's first word is its value
    continued: list[str] = []  # the command a line ending in " \\" goes on: its first line and the line before
    glued: str | None = None  # the command so far when the line above went on inside its last word ("ab\\")
    command = ""  # the line above, as checked
    for line in text.split("\n"):
        if '":' in line and "[" in line:  # journalctl -o json: a message with a control character is bytes
            line = _BYTE_ARRAY.sub(lambda m: _byte_array(m, audit), line)
        above, continued = continued, []
        carry, value_below = value_below, False
        before, glued = glued, None
        prev_command, command = command, ""
        if chpasswd_indent is not None:
            if line.strip() and len(line) - len(line.lstrip()) <= chpasswd_indent:
                chpasswd_indent = None
            elif pair := _USER_PASSWORD_LINE.match(line):  # "    root:X" of its list
                out.append(pair.group(1) + HIDDEN)
                continue
        if "chpasswd" in line and _CHPASSWD_KEY.match(line):
            chpasswd_indent = len(line) - len(line.lstrip())
        if named_above and (value := _VALUE_LINE.match(line)):
            named_above = False
            hidden, _, _ = _hide_value(value.group(2).rstrip())
            out.append(value.group(1) + hidden)
            continue
        if named_above and (element := _XML_VALUE_LINE.match(line)):
            named_above = False
            out.append(element.group(1) + HIDDEN + element.group(3))
            continue
        named = _NAME_LINE.match(line) if "name" in line else None
        named_above = named is not None and _secret_name(named.group(1) or named.group(2))
        if in_key:
            in_key = not _PEM_END.search(line)
            out.append(line if not in_key else HIDDEN)
            continue
        indent = len(line) - len(line.lstrip())
        inside = ((block_indent is not None and (indent > block_indent or not line.strip()))
                  or (bool(xml_close) and xml_close not in line))
        if inside and block_lines < _BLOCK_LINES_MAX:  # a value's line of a YAML block or an XML element
            block_lines += 1
            out.append(line[:indent] + HIDDEN if line.strip() else line)
            continue
        block_indent, xml_close = None, ""
        in_key = bool(_PEM_BEGIN.search(line)) and not _PEM_END.search(line)
        if ":" in line and (block := _YAML_BLOCK_KEY.match(line)) and _secret_name(block.group(2)):
            block_indent, block_lines = len(block.group(1)), 0
            out.append(line)  # "password: |": the value is on the lines after it
            continue
        if "<" in line and (element := _XML_OPEN_LINE.match(line)) and _secret_name(element.group(1)):
            xml_close, block_lines = f"</{element.group(1)}>", 0
        if audit and "=" in line and (decoded := _audit_line(line, events, pieced)) is not None:
            out.append(decoded)
            continue
        history = _ZSH_HISTORY.match(line) if line.startswith(": ") else None
        command = history.group(2) if history else line
        if carry:  # - --db-password / - X
            command = _value_first(command)
        if '\\"' in command:  # a command inside a JSON (or C) string: its own quotes escaped
            command = _inside_strings(command, depth)
        shown, value_below = _redact_line(command)
        # this line goes on with the command above it (a YAML list's "- X" is an item of its own)
        if above and not command.lstrip().startswith("- "):
            shown = _continued(above, command, shown)
        if before is not None:  # the line above went on inside its last word: glued to it, as the shell reads it
            shown, start = _glued(before, command, shown)
            if start is not None and out and out[-1] == prev_command:  # it began on the line above: hidden there too
                out[-1] = prev_command[:max(0, start - (len(before) - len(prev_command) + 1))] + HIDDEN + "\\"
        if (goes_on := _CONTINUES.search(command)) is not None:
            continued = [above[0] if above else command[:_CONTINUED_CHARS], command[-_CONTINUED_CHARS:]]
            if goes_on.start() == 0 or not command[goes_on.start() - 1].isspace():  # inside its last word
                glued = ((before or "") + command[:goes_on.start()])[-_CONTINUED_CHARS:]
        out.append(history.group(1) + shown if history else shown)
    return "\n".join(out)


def _value_first(line: str) -> str:
    """``line`` with its first word (after a list's ``-``) hidden: the value of a secret option
    that ended the line above.  A quoted value is hidden up to its closing quote on the line."""
    first = _FIRST_VALUE.match(line)
    # a value there is a list item ("- X") or a quoted string ("X", of JSON): prose is no value
    if first is None or first.group(2)[0] in "{[" or ("-" not in first.group(1) and first.group(2)[0] not in "\"'"):
        return line
    shown, quote, _ = _hide_value(first.group(2))
    rest = line[first.end():]
    if quote:  # "correct horse battery": the words up to the close go too
        at = _closing(rest, quote, 0)
        rest = "" if at < 0 else rest[at:]
    return first.group(1) + shown + rest


def _program(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _known_shapes(line: str) -> str:
    """The shapes found anywhere on a line, before it is split into words: token formats,
    quoted name-value pairs, key/value attributes, one-line XML elements, npm auth and URL
    token users."""
    line = _TOKEN_SHAPES.sub(HIDDEN, line)
    if "://" in line:
        line = _URL_TOKEN_USER.sub(rf"\g<1>{HIDDEN}@", line)
        if "hooks.slack" in line or "/webhooks/" in line:
            line = _SLACK_HOOK.sub(rf"\g<1>{HIDDEN}", line)
    if "<" in line:
        line = _XML_SECRET.sub(lambda m: m.group(1) + HIDDEN + m.group(4) if _secret_name(m.group(2))
                               else m.group(0), line)
    if "'" in line or '"' in line:
        line = _QUOTED_PAIR.sub(lambda m: m.group(0)[:m.start(6) - m.start(0)] + HIDDEN + m.group(5)
                                if _secret_name(m.group(3)) else m.group(0), line)
        if '"name"' in line:
            line = _JSON_NAME_VALUE.sub(lambda m: m.group(1) + HIDDEN + m.group(4) if _secret_name(m.group(2))
                                        else m.group(0), line)
        if "=" in line:
            line = _KEY_VALUE_ATTRS.sub(lambda m: m.group(1) + HIDDEN + m.group(6) if _secret_name(m.group(3))
                                        else m.group(0), line)
    if ":_" in line:
        line = _NPM_AUTH.sub(rf"\g<1>{HIDDEN}", line)
    if "rivate" in line:
        line = _WG_PRIVATE.sub(rf"\g<1>{HIDDEN}", line)
    if "passwd" in line or "-stdin" in line:
        fed = [bool(m.group(1) or m.group(2)) for m in _FEEDS_PASSWD.finditer(line)]
        if any(fed):
            line = _CHPASSWD_INPUT.sub(rf"\g<1>{HIDDEN}", line)
        elif fed or "--stdin" in line or "--password-stdin" in line:  # echo X | passwd --stdin; docker login
            line = _PASSWD_INPUT.sub(rf"\g<1>{HIDDEN}", line)
    return line


def _redis_auth(parts: list[str], at: list[int]) -> int:
    """The index in ``parts`` (the words at the indexes ``at``) of the password of a Redis ``AUTH
    [user] password`` command — typed at a ``redis-cli`` prompt or on its command line, or shown
    by ``MONITOR`` (``[0 127.0.0.1:5555] "AUTH" "X"``) — else -1."""
    for j, i in enumerate(at):
        if parts[i].strip('"').lower() != "auth" or len(at) - j - 1 not in (1, 2):
            continue
        after = parts[at[j + 1]].lower()
        if after in _PAM_CONTROLS or after.startswith("["):
            return -1
        if (j == 0 and parts[i] in ("AUTH", "auth")) or (j and parts[at[j - 1]].endswith(">")) \
                or (j and parts[at[j - 1]].endswith("]") and parts[i] == '"AUTH"') \
                or any(_program(parts[k]) == "redis-cli" for k in at[:j]):
            return at[-1]
    return -1


def _redact_line(line: str) -> tuple[str, bool]:
    """One line with its secrets hidden, and whether it ended with a secret option or JSON key
    whose value is the next line's first word (``- --db-password`` / ``- X`` of a YAML list)."""
    line = _known_shapes(line)
    parts = _WORDS.split(line)  # words at even indexes, the whitespace between them at odd ones
    positions = [i for i in range(0, len(parts), 2) if parts[i]]  # the words' indexes in parts
    order = {i: k for k, i in enumerate(positions)}  # a word's part index → its place among the words
    words = [parts[i] for i in positions]
    # a client's password options count after that client's name only (docker run -p 80:80 … mongo: a port)
    mysql = login_program = login_p = attached_p = lftp = yaml_key = False
    from_option = False  # hide_next was set by an option or a JSON key: its value may be on the next line
    password_options: set[str] = set()
    netrc = bool(words) and words[0] == "machine"  # machine H login U password X
    # "requirepass X" (redis), "auth_pass X" (keepalived): a known key, then one value (and a comment)
    key_value = len(words) == 2 or (len(words) > 2 and words[2].startswith(("#", ";"))) or _quoted_value_line(line)
    # <add key="DbPassword" value="***"/>: the pre-pass hid the value; key="…" there names a setting
    attributes = "value" in line and "=" in line and _KEY_VALUE_ATTRS.search(line) is not None
    hide_next = user_next = named = named_value = token_next = hide_rest = sql_password = False
    upper = line.upper()
    auth_password = _redis_auth(parts, positions) if "AUTH" in upper else -1
    identified = "IDENTIFIED" in upper  # IDENTIFIED … BY 'X'
    set_password = "SET PASSWORD" in upper
    redis_acl = (bool(words) and words[0].lower() == "user") or "SETUSER" in upper
    # a hidden value's quote not yet closed: the words up to its close go too (the close itself stays
    # when the opening quote is still shown, as in a JSON member: "password":"***")
    open_quote, keep_close = "", False
    previous = ""
    first = True  # the line's first word: a configuration file's "key value" (requirepass X)
    for i in range(0, len(parts), 2):
        word = parts[i]
        if not word:
            continue
        if word == "\\" and (i == positions[-1] or any(m in parts[i + 1] for m in _BREAKS)):
            continue  # a backslash continuing the line is no word (no option's value)
        was_first, first = first, False
        before, previous = previous, word
        if i == auth_password:  # Redis AUTH [user] X
            parts[i] = _hide_value(word)[0]
            continue
        program = _program(word)
        if program in _PASSWORD_OPTIONS:
            password_options.update(_PASSWORD_OPTIONS[program])
        elif not mysql and _MYSQL.match(program):
            mysql = True
        elif program in _LOGIN_PROGRAMS:
            login_program = True
        elif word == "login" and login_program:  # docker login -u ci -p X (docker run -p is a port)
            login_p = True
        elif word in _COMMAND_SEPARATORS:
            login_program = login_p = False
        elif program == "lftp":
            lftp = True
        if program in _ATTACHED_P:
            attached_p = True
        if hide_rest:  # a cookie header: every pair after it
            parts[i] = HIDDEN if word != HIDDEN else word
            continue
        if open_quote:
            at = _closing(word, open_quote, 0)
            parts[i - 1], parts[i] = "", "" if at < 0 else word[at if keep_close else at + 1:]
            open_quote = open_quote if at < 0 else ""
            continue
        if named:
            named = False
            if (word in _TYPE_DIGITS and len(positions) - order[i] == 2  # username bob secret 0 X (X last)
                    and words[0].lower() in _DEVICE_DIRECTIVES):
                named = named_value = True
                continue
            if word in ("=", ":", "=>"):  # "password = X" of a configuration file, "'password' => X" of PHP
                hide_next = True
                continue
            if word[0] in "=:" and len(word) > 1:  # "password =X"
                parts[i], open_quote, keep_close = _hide_value(word[1:], word[0])
                continue
            # "requirepass X" opening a line, "password X" of a .netrc line, SQL's PASSWORD 'X'
            if named_value or (word[0] in "'\"" and sql_password):
                parts[i], open_quote, keep_close = _hide_value(word)
                continue
        if attributes and _ATTRIBUTE_NAME.match(word):
            continue
        if token_next:
            token_next = False
            token = _TOKEN_WORD.match(word)
            if token:  # "Bearer eyJ…" in an access log
                parts[i] = HIDDEN + token.group(2)
                continue
        if hide_next:  # the value of a secret-named option, whatever it looks like (a token may start with -)
            if _plain_value(word):  # automountServiceAccountToken: false
                hide_next = False
                continue
            if (yaml_key and _YAML_NODE_PROPERTY.match(word) and order[i] + 1 < len(positions)
                    and not parts[positions[order[i] + 1]].startswith("#")):  # password: &pw X, password: !!str X
                continue
            if word.lower() not in _AUTH_SCHEMES:  # "Authorization: Basic X": the value is the word after
                parts[i], open_quote, keep_close = _hide_value(word)
                hide_next = False
            continue
        if user_next and not word.startswith("-"):
            parts[i], open_quote = _user_password(word, ",:" if lftp else ":%")
            user_next, keep_close = False, True
            continue
        user_next = False
        if word.lstrip("\"'").lower() in ("bearer", "basic"):
            token_next = True
        elif word.lower() == "by" and identified:  # SQL: IDENTIFIED [WITH plugin] BY 'X'
            hide_next = True
        elif word == "=" and set_password:  # SQL: SET PASSWORD [FOR 'u'@'h'] = 'X'
            hide_next, set_password = True, False
        elif redis_acl and (acl := _ACL_SECRET.match(word)):  # user default on >PASSWORD ~* +@all
            parts[i] = acl.group(1) + HIDDEN
        elif ((mysql or login_p) and word.startswith("-p") or attached_p and word.startswith("-P")) and len(word) > 2:
            parts[i], open_quote, keep_close = _hide_value(word[2:], word[:2])  # -pX (-pMyPass), sqlcmd -PX
        elif (core := word if word[-1] != "," and word[0] != "[" else word.strip("[],\"'")) and (
                core in password_options or (login_p and core == "-p") or (_OPTION.match(core) and _secret_name(core))):
            hide_next, from_option, yaml_key = True, True, False  # --token X; ["--token", "X"] of a JSON list
        elif word in _IPSEC_KINDS and before == ":":  # ipsec.secrets: %any : PSK "X"
            hide_next, from_option, yaml_key = True, False, False
        elif word[-1] in ":=" and _BARE_NAME.match(key := word.rstrip(":=")) and _secret_name(key):
            hide_next = True  # "password:", "userPassword::" (LDIF's base64 form)
            from_option = key[:1] in "\"'"  # a JSON member's name: its value may be on the next line
            yaml_key = word[-1] == ":" and not from_option
            hide_rest = _PARTS.sub("", key.lower()) in ("cookie", "setcookie")
        elif word in ("-u", "--user", "-U"):
            user_next = True
        elif _BARE_NAME.match(word) and ((config_key := word.strip("\"'").lower() in _CONFIG_KEYS)
                                         or _secret_name(word)):
            named = True
            sql_password = _PARTS.sub("", word.lower()) in ("password", "passwd")
            named_value = ((was_first and config_key and (key_value or word.lower() in _FIRST_ARGUMENT_KEYS))
                           or word.lower() in _DIRECTIVE_SECRETS
                           or before.lower() in _ENV_DIRECTIVES
                           or (before.lower() in _SETTERS and not set_password and len(positions) - order[i] == 2)
                           or before.lower() == "snmp-server"
                           or (netrc and _PARTS.sub("", word.lower()) == "password"))
        elif (bracketed := _BRACKETED_NAME.match(word)) and _secret_name(bracketed.group(1)):
            named, named_value = True, False  # env[DB_PASSWORD] = X
        elif (key := _JSON_KEY_WORD.match(word)) and _secret_name(key.group(1)):
            named, named_value = True, False  # {"token" : "X"}
        elif (key := _JSON_KEY_END.search(word)) and _secret_name(key.group(1)):
            hide_next, from_option, yaml_key = True, True, False  # {"password": "X"}
        else:
            parts[i], hide_next, open_quote, keep_close = _redact_word(word)
            from_option = False
    # the value is on the next line only when the option or key stands alone on this one ("- --db-password")
    own = words[:-1] if words and words[-1] == "\\" else words  # a continued line: the backslash is no word
    alone = len(own) == 1 or (len(own) == 2 and own[0] == "-")
    return "".join(parts), hide_next and from_option and alone and not hide_rest


def _quoted_value_line(line: str) -> bool:
    """Whether ``line`` is ``key "a quoted value"`` with at most a comment after it (a
    configuration file's key-value line whose value holds spaces)."""
    _, _, rest = line.strip().partition(" ")
    rest = rest.strip()
    quote = rest[:1]
    if quote not in ("'", '"'):
        return False
    end = _closing(rest, quote, 1)
    return end > 0 and (not rest[end + 1:].strip() or rest[end + 1:].strip().startswith(("#", ";")))


def _closing(word: str, quote: str, start: int) -> int:
    """The index of the first ``quote`` in ``word`` from ``start`` that a backslash does not
    escape (``\\"``, the quote of a JSON string inside a JSON string, as written), else -1."""
    if len(quote) > 1:
        return word.find(quote, start)
    i = start
    while i < len(word):
        c = word[i]
        if c == "\\":
            i += 2
        elif c == quote:
            return i
        else:
            i += 1
    return -1


def _hide_value(word: str, lead: str = "") -> tuple[str, str, bool]:
    """A value word hidden: a quoted one keeps its quotes and what follows its close
    (``"hunter2"},`` → ``"***"},``).  Returns the word as shown, the quote it opened and did
    not close (the next words are hidden up to it), and True (that close is shown)."""
    quote = word[:1]
    if quote not in ("'", '"'):  # a separator or quote closing around it stays (3600, → ***,  X" → ***")
        return lead + HIDDEN + (word[-1] if len(word) > 1 and word[-1] in _CLOSERS else ""), "", False
    end = _closing(word, quote, 1)
    if end < 0:
        return lead + quote + HIDDEN, quote, True
    return lead + quote + HIDDEN + word[end:], "", False


def _unclosed(value: str) -> str:
    """The quote ``value`` opens and does not close (``"a`` → ``"``), else ``""``."""
    quote = value[:1]
    return quote if quote in ("'", '"') and _closing(value, quote, 1) < 0 else ""  # 'x', is closed


def _redact_word(word: str, depth: int = 0) -> tuple[str, bool, str, bool]:
    """:func:`_redact_word_as_is`, and for a word that changes nothing so but opens with
    quotes or brackets, the same of what follows them (``"MYSQL_ROOT_PASSWORD=X",`` of a
    JSON list)."""
    out = _redact_word_as_is(word, depth)
    lead = len(word) - len(word.lstrip("\"'[({"))
    if out[0] != word or not lead or depth:
        return out
    body, tail = word[lead:], ""
    quote = next((c for c in word[:lead] if c in "\"'"), "")
    end = _closing(body, quote, 0) if quote else -1
    if end >= 0:  # up to the quote that closes the opening one: what follows it stays
        body, tail = body[:end], body[end:]
    shown, hide_next, opened, keep = _redact_word_as_is(body, depth + 1)
    return word[:lead] + shown + tail, hide_next, opened, keep


def _redact_word_as_is(word: str, depth: int = 0) -> tuple[str, bool, str, bool]:
    """One word: ``name=value`` (and a value that is itself one), query parameters, JSON members, URL
    passwords.  Returns the word as shown, whether the next word is the value
    (``Authorization:Bearer`` then the credential), the quote a hidden value opened and
    did not close (``DB_PASSWORD="a`` of ``DB_PASSWORD="a b"``, ``{"token":"a`` of
    ``{"token":"a b"}``) or ``""``, and whether its close is to be shown (the JSON member's)."""
    assigned = _ASSIGNED.match(word)
    if assigned:
        name, sep, value = assigned.groups()
        if _secret_name(name) and not _plain_value(value, name):
            if value.lower() in _AUTH_SCHEMES:
                return word, True, "", False
            return f"{name}{sep}{HIDDEN}", False, _unclosed(value), False
        if name in ("--user", "-u", "-U") and sep == "=":
            shown, opened = _user_password(value)
            return f"{name}={shown}", False, opened, True
        if depth < 2:  # --env=DB_PASSWORD=X, Environment="TOKEN=X"
            quote = value[:1] if value[:1] in ("'", '"') else ""
            close = quote if quote and len(value) > 1 and value.endswith(quote) else ""
            inner = value[len(quote):len(value) - len(close)]
            shown, _, _, _ = _redact_word(inner, depth + 1)
            if shown != inner:
                return f"{name}{sep}{quote}{shown}{close}", False, "", False
    for pairs in (_QUERY_SECRET, _CONNECTION_SECRET):
        word = pairs.sub(lambda m: m.group(1) + HIDDEN if _secret_name(m.group(2))
                         and not _plain_value(m.group(3), m.group(2)) else m.group(0), word)
    word = _JSON_SECRET.sub(lambda m: m.group(1) + HIDDEN + m.group(4) if _secret_name(m.group(2))
                            else m.group(0), word)
    word = _JSON_ESCAPED.sub(lambda m: m.group(1) + HIDDEN + m.group(4) if _secret_name(m.group(2))
                             else m.group(0), word)
    word = _URL_PASSWORD.sub(rf"\g<1>{HIDDEN}@", word)
    for pattern, quote in ((_JSON_ESCAPED_OPEN, '\\"'), (_JSON_OPEN, '"')):
        member = pattern.search(word)
        if member and _secret_name(member.group(2)):  # {"token":"a b"} split into words: hide up to the close
            return word[:member.end(1)] + HIDDEN, False, quote, True
    return word, False, "", False


def _user_password(value: str, separators: str = ":%") -> tuple[str, str]:
    """``name:password`` (curl ``-u``), ``name%password`` (smbclient ``-U``) or ``name,password``
    (lftp ``-u``, when ``separators`` holds ``,``) with the password hidden.  Returns the word as
    shown and the quote the word opened and did not close as the shell reads it (``"bob:a`` of
    ``-u "bob:a b"``, ``bob,"p`` of ``-u bob,"p w"``: the next words are hidden up to that quote),
    else ``""``."""
    for sep in separators:
        name, found, _ = value.partition(sep)
        if found:
            opened = _shell_open_quote(value)
            close = value[0] if not opened and len(value) > 1 and value[0] in "'\"" and value[-1] == value[0] else ""
            return f"{name}{sep}{HIDDEN}{close}", opened
    return value, ""


def _shell_open_quote(word: str) -> str:
    """The quote ``word`` leaves open as a POSIX shell reads it (``'`` or ``"``), else ``""``:
    a backslash escapes the next character outside quotes and inside double quotes."""
    quote, i = "", 0
    while i < len(word):
        c = word[i]
        if c == "\\" and quote != "'":
            i += 2
            continue
        if quote and c == quote:
            quote = ""
        elif not quote and c in "'\"":
            quote = c
        i += 1
    return quote
