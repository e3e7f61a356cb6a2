"""The credential filter's rules for one line: its words and the shapes found anywhere on it
(:func:`redact_line`), and the helpers the multi-line reading shares (quotes, values)."""

from __future__ import annotations

import re

from ongridd.credfilter.names import HIDDEN, NAME_PARTS, plain_value, secret_name

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
_TOKEN_WORD = re.compile(r"([A-Za-z0-9._~+/=-]{8,})([\"',;)\]}]{0,4})\Z")
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
#: schemes of an ``Authorization`` header: the credential is the word after them
_AUTH_SCHEMES = frozenset({"basic", "bearer", "token", "digest", "negotiate", "ntlm", "apikey"})
_SQL_SERVER_TOOLS = ("sqlcmd", "bcp", "isql")
_ZIP_TOOLS = ("zip", "unzip", "zipcloak")
_USER_TOOLS = ("useradd", "usermod")
_LDAP_TOOLS = ("ldapsearch", "ldapmodify", "ldapadd", "ldapdelete", "ldappasswd", "ldapwhoami", "ldapcompare",
               "ldapmodrdn", "ldapexop")
#: programs whose password option also takes its value attached (``sqlcmd -PX``, ``sshpass -pX``,
#: ``ldapsearch -wX``, ``7z x -pX``), or bundled after switches (``ldapsearch -xwX``, ``zip -rPX``,
#: ``useradd -mp X``, ``rar -hpX``): the word's shape, the value its group 1 (empty: the next word)
_ATTACHED_PASSWORD = {
    **{name: re.compile(r"-P(.*)\Z", re.DOTALL) for name in _SQL_SERVER_TOOLS},
    "sshpass": re.compile(r"-p(.*)\Z", re.DOTALL),
    **{name: re.compile(r"-[xZnvMNkKcLIOQRW]{0,8}w(.*)\Z", re.DOTALL) for name in _LDAP_TOOLS},
    **{name: re.compile(r"-p(.*)\Z", re.DOTALL) for name in ("7z", "7za", "7zr")},
    **{name: re.compile(r"-h?p(.*)\Z", re.DOTALL) for name in ("rar", "unrar")},
    **{name: re.compile(r"-[A-OQ-Za-z0-9]{0,8}P(.*)\Z", re.DOTALL) for name in _ZIP_TOOLS},
    **{name: re.compile(r"-[mMrUNlDo]{0,8}p(.*)\Z", re.DOTALL) for name in _USER_TOOLS},
}
#: client programs (by file name) and their options that take a password as the next word
_PASSWORD_OPTIONS = {
    "redis-cli": ("-a",), "sshpass": ("-p",), "mongo": ("-p",), "mongosh": ("-p",), "ipmitool": ("-P",),
    **{name: ("-P",) for name in _SQL_SERVER_TOOLS},
    **{name: ("-P", "--password") for name in _ZIP_TOOLS},
    **{name: ("-p", "--password") for name in _USER_TOOLS},  # the password's hash
    **{name: ("-c", "-A", "-X") for name in ("snmpwalk", "snmpbulkwalk", "snmpget", "snmpgetnext", "snmpbulkget",
                                             "snmpset", "snmptable", "snmpdf", "snmpstatus", "snmptrap")},
    "keytool": ("-storepass", "-keypass", "-srcstorepass", "-deststorepass", "-srckeypass", "-destkeypass", "-new"),
    "cqlsh": ("-p", "--password"), "openssl": ("-k", "-K"),
    **{name: ("-P", "--pw") for name in ("mosquitto_pub", "mosquitto_sub", "mosquitto_rr")},
    **{name: ("-w",) for name in _LDAP_TOOLS},
}
#: mysqld's first start: "A temporary password is generated for root@localhost: X"
_MYSQL_TEMPORARY = re.compile(r"(temporary password is generated for [^\s:]{1,255}:[ \t]{1,16})(\S+)")
#: a Go MySQL driver's DSN: user:X@tcp(host:3306)/db, user:X@/db (its password may hold @ and /)
_GO_DSN = re.compile(r"(?<![\w.%+-])([\w.%+-]{1,64}:)([^\s\"']{1,256}?)(@(?i:tcp6?|unix|udp6?)\(|@/)")
#: user:X after haproxy's "stats auth" (and "userlist"'s insecure-password is a directive) or squid's login=
_USER_COLON_PASSWORD = re.compile(r"((?:\bstats[ \t]{1,8}auth[ \t]{1,8}|\blogin=)[^\s:]{1,64}:)(\S+)")
#: commands whose last argument is a password: htpasswd -b … X (with a -b switch), vault/bao login X
_LAST_ARGUMENT_PROGRAMS = re.compile(
    r"\b(?:htpasswd|(?:vault|bao)[ \t]{1,8}(?:login|operator[ \t]{1,8}unseal)|wpa_passphrase"
    r"|rabbitmqctl[ \t]{1,8}(?:add_user|change_password)|mysqladmin(?=[^\n;|&]{0,512}[ \t]password[ \t]))\b")
#: an Oracle login, ``user/password@service`` or ``user/password``, where one is written: after an
#: Oracle client's name (sqlplus, expdp, rman …) or an RMAN ``target``/``catalog``, in a JDBC thin URL,
#: in a variable named for a connection (``ORACLE_CONN=``, ``DB_DSN=``)
_ORACLE_LOGIN = re.compile(
    r"((?:\b(?:sqlplus|expdp|impdp|exp|imp|sqlldr|rman|dgmgrl)(?:[ \t]{1,8}-[A-Za-z]{1,16}){0,4}[ \t]{1,8}"
    r"(?:(?i:target|auxiliary|catalog)[ \t=]{1,8})?"
    r"|\b(?i:userid)[ \t=]{1,8}|(?:^|(?<=[\s;>]))(?i:connect|conn)[ \t]{1,8}"
    r"(?:(?i:target|auxiliary|catalog)[ \t]{1,8})?"
    r"|jdbc:oracle:(?:thin|oci8?):(?:@?//)?"
    r"|\b[A-Z][A-Z0-9_]{0,63}(?:CONN|DSN|ORACLE|CONNECT|LOGIN)[A-Z0-9_]{0,63}=[\"']?)"
    r"[A-Za-z][\w$#]{0,127}/)([^\s/@'\"]{1,256})(?=@|[\s'\"]|\Z)"
    # RMAN's further logins on its command line (rman target … catalog rcat/X@rcvcat): with a service only
    r"|(\b(?i:target|auxiliary|catalog)[ \t=]{1,8}[A-Za-z][\w$#]{0,127}/)([^\s/@'\"]{1,256})(?=@)")
#: network devices' and Wi-Fi secrets: a BGP neighbour's password, a TACACS+/RADIUS key, a key chain's
#: key-string, OSPF keys, a Junos pre-shared-key; NetworkManager's Wi-Fi and 802.1X secrets (nmcli's
#: settings and its output); FreeRDP's ``/p:``
_DEVICE_SECRET = re.compile(
    r"((?:^|[\n;])[ \t]{0,64}(?:neighbor[ \t]{1,8}\S{1,255}[ \t]{1,8}password"
    r"|(?:tacacs-server|radius-server)(?:[ \t]{1,8}host[ \t]{1,8}\S{1,255})?[ \t]{1,8}key"
    r"|key-string|ip[ \t]{1,8}ospf[ \t]{1,8}(?:authentication-key|message-digest-key[ \t]{1,8}[0-9]{1,3}[ \t]{1,8}md5)"
    r"|pre-shared-key[ \t]{1,8}(?:ascii-text|hexadecimal)|authentication-key)"
    r"(?:[ \t]{1,8}[0-9])?[ \t]{1,8}[\"']?)([^\s\"']{1,1000})"
    r"|(\b(?:wifi-sec|802-11-wireless-security)\.(?:psk|wep-key[0-3]|leap-password)[ \t:]{1,16}"
    r"|\b802-1x\.(?:password|private-key-password|pin|identity-password)[ \t:]{1,16}"
    r"|\b(?:xfreerdp|wlfreerdp|sdl-freerdp)\b[^\n]{0,512}?[ \t]/p:)([^\s\"']{1,1000})")
#: a Telegram bot's token (``123456789:AAH…``), also in an API URL (``/bot123456789:AAH…/sendMessage``)
_TELEGRAM_TOKEN = re.compile(r"(?:(?<=/bot)|(?<![A-Za-z0-9_:]))([0-9]{5,12}:)AA[A-Za-z0-9_-]{30,40}(?![A-Za-z0-9_-])")
#: an XML element whose attribute names a setting (``<param name="password">X</param>``, a Java bean's
#: ``<void property="password"><string>X</string></void>``): its text
_XML_NAMED = re.compile(r"(<([A-Za-z_][\w.:-]{0,63})\b[^<>]{0,256}?\b(?:name|key|property)\s{0,4}=\s{0,4}"
                        r"[\"']([^\"'<>]{1,64})[\"'][^<>]{0,256}>[ \t]{0,64}(?:<string>)?)([^<]{1,1000})(<)")
#: a Go struct printed with %+v (``{Password:X User:bob}``): a field named for a credential
_GO_STRUCT_FIELD = re.compile(r"(?<=[{ ])([A-Za-z_][A-Za-z0-9_]{0,63}):(?!//)([^\s{}]{1,1000})")
#: one command's text: up to a command separator, a line's end or a quote closing around it
_COMMAND_TEXT = re.compile(r"[^\n;|&]{0,4096}")
#: htpasswd's switches that make it take the password as its last argument (-b, -bc, -Bb)
_HTPASSWD_BATCH = re.compile(r"-[A-Za-z]{0,7}b[A-Za-z]{0,7}")
#: an argument: a quoted one whole, or a word up to what closes around it
_ARGUMENT = re.compile(r"""'[^'\n]*'|"(?:[^"\\\n]|\\.)*"|[^\s'"\])}]+""")
#: words that end one command of a command line (a ``login``'s ``-p`` is not the next command's)
_COMMAND_SEPARATORS = frozenset({"&&", "||", ";", "|", "&"})
#: a YAML node's anchor or tag before its value (``password: &pw X``, ``password: !!str X``)
_YAML_NODE_PROPERTY = re.compile(r"(?:&[A-Za-z0-9_-]{1,64}|!!?[A-Za-z0-9_.-]{0,64})\Z")
#: programs whose ``login`` subcommand takes the password after ``-p`` (``docker login -u ci -p X``)
_LOGIN_PROGRAMS = frozenset({"docker", "podman", "nerdctl", "buildah", "skopeo", "helm", "oras", "crane", "az",
                             "finch", "regctl"})
#: programs whose ``-p`` takes the password in the same word (the MySQL and MariaDB tools)
_MYSQL = re.compile(r"(?:mysql[a-z_-]{0,16}|mariadb(?:-[a-z]{1,16})?)\Z")
#: what splits a line into words (the split keeps it: words at even indexes, whitespace at odd ones)
WORDS = re.compile(r"(\s+)")
#: :data:`WORDS`, and the place between two items of a JSON (or Python) list written without spaces
_LIST_WORDS = re.compile(r"""(\s+|(?<=",)(?=")|(?<=',)(?='))""")
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
#: the ``key="NAME"``/``name="NAME"`` word of such an element: it names a setting, it is no secret
_ATTRIBUTE_NAME = re.compile(r"""(?i:key|name)=(['"])[^'"]{0,64}\1\Z""")
#: npm's ``//registry/:_authToken=X`` (and ``_auth``, ``_password``)
_NPM_AUTH = re.compile(r"(:_(?:authToken|auth|password)=)(\S+)")
#: a URL whose user information is one long word and no password: a token as the user name
#: (``https://ghp_…@github.com``); a short user name (``git@``) stays
_URL_TOKEN_USER = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]{0,31}://)"
                             r"((?=[A-Za-z]{0,255}[0-9])[A-Za-z0-9]{30,256})@")
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
#: what stands for "the value goes on in the next word" where a quote left open is expected: a
#: backslash escaping the space after it (``--password correct\\ horse``)
GOES_ON = "\\ "
#: curl's short options written together, ``-u`` last: its value is the next word
_SHORT_OPTIONS_U = re.compile(r"-[A-Za-z0-9#:]{1,16}u\Z")
#: PAM's control words: ``auth required pam_unix.so`` is no Redis ``AUTH`` command
_PAM_CONTROLS = frozenset({"required", "requisite", "sufficient", "optional", "include", "substack"})
#: what may stand for the line break of a continued shell command, which the multi-line reading
#: checks joined to the lines before it (:mod:`ongridd.credfilter.text`): whitespace to the filter
BREAKS = ("\u2029", "\u2028", "\x1c", "\x1d", "\x1e")


def value_first(line: str) -> tuple[str, str]:
    """``line`` with its first word (after a list's ``-``) hidden: the value of a secret option
    that ended the line above.  A quoted value is hidden up to its closing quote on the line.
    Returns the line as shown and the quote the value is still in at the line's end (the rest
    of the line hidden; a line going on keeps its backslash), else ``""``."""
    first = _FIRST_VALUE.match(line)
    # a value there is a list item ("- X") or a quoted string ("X", of JSON): prose is no value
    if first is None or first.group(2)[0] in "{[" or ("-" not in first.group(1) and first.group(2)[0] not in "\"'"):
        return line, ""
    shown, quote, _ = hide_value(first.group(2))
    rest = line[first.end():]
    if quote:  # "correct horse battery": the words up to the close go too
        at = closing(rest, quote, 0)
        if at < 0:
            return first.group(1) + shown + (" \\" if rest.endswith("\\") else ""), quote
        tail = rest[at + 1:]
        glued = next((k for k, c in enumerate(tail) if c.isspace()), len(tail))  # the word's own rest
        shown_tail, reopened = after_close(tail[:glued])
        rest = rest[at] + shown_tail + ("" if reopened else tail[glued:])
    return first.group(1) + shown + rest, ""


def _option_item(word: str, bare: str) -> bool:
    """Whether ``word`` is a list item holding a two-letter option alone (``"-P",`` of
    ``["sqlcmd","-P","X"]``: its value is the next item), ``bare`` being it without its lead."""
    lead = word[:len(word) - len(bare)]
    return bool(lead) and lead[-1] in "\"'" and bare[2:3] == lead[-1]


def _program(word: str) -> str:
    """A command word's program name: its path's last part, without the quotes, brackets or ``$(``
    of a script, a JSON or exec-form list around it (``sh -c "mysql``, ``CMD ["mysql",``)."""
    return word.strip("\"'[]{}(),;$`").rsplit("/", 1)[-1]


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
        line = _XML_SECRET.sub(lambda m: m.group(1) + HIDDEN + m.group(4) if secret_name(m.group(2))
                               else m.group(0), line)
    if "'" in line or '"' in line:
        line = _QUOTED_PAIR.sub(lambda m: m.group(0)[:m.start(6) - m.start(0)] + HIDDEN + m.group(5)
                                if secret_name(m.group(3)) else m.group(0), line)
        if '"name"' in line:
            line = _JSON_NAME_VALUE.sub(lambda m: m.group(1) + HIDDEN + m.group(4) if secret_name(m.group(2))
                                        else m.group(0), line)
        if "=" in line:
            line = _KEY_VALUE_ATTRS.sub(lambda m: m.group(1) + HIDDEN + m.group(6) if secret_name(m.group(3))
                                        else m.group(0), line)
    if ":_" in line:
        line = _NPM_AUTH.sub(rf"\g<1>{HIDDEN}", line)
    if "rivate" in line:
        line = _WG_PRIVATE.sub(rf"\g<1>{HIDDEN}", line)
    if "password is generated" in line:  # mysqld's first start
        line = _MYSQL_TEMPORARY.sub(rf"\g<1>{HIDDEN}", line)
    if "@" in line and ":" in line:  # a Go MySQL DSN
        line = _GO_DSN.sub(rf"\g<1>{HIDDEN}\g<3>", line)
    if "auth" in line or "login=" in line:  # haproxy's stats auth, squid's cache_peer login=
        line = _USER_COLON_PASSWORD.sub(rf"\g<1>{HIDDEN}", line)
    if ("htpasswd" in line or "login" in line or "unseal" in line or "wpa_passphrase" in line
            or "rabbitmqctl" in line or "mysqladmin" in line):
        line = _last_argument_hidden(line)
    if "/" in line:
        line = _ORACLE_LOGIN.sub(lambda m: (m.group(1) if m.group(1) is not None else m.group(3)) + HIDDEN, line)
    if "key" in line or "password" in line or "psk" in line or "/p:" in line or "802-1x" in line or "wep" in line:
        line = _DEVICE_SECRET.sub(lambda m: (m.group(1) + HIDDEN) if m.group(1) is not None
                                  else (m.group(3) + HIDDEN), line)
    if ":" in line:
        line = _TELEGRAM_TOKEN.sub(rf"\g<1>{HIDDEN}", line)
        if "{" in line:
            line = _GO_STRUCT_FIELD.sub(lambda m: f"{m.group(1)}:{HIDDEN}" if secret_name(m.group(1))
                                        else m.group(0), line)
    if "<" in line and "=" in line:
        line = _XML_NAMED.sub(lambda m: m.group(1) + HIDDEN + m.group(5) if secret_name(m.group(3))
                              else m.group(0), line)
    if "passwd" in line or "-stdin" in line:
        fed = [bool(m.group(1) or m.group(2)) for m in _FEEDS_PASSWD.finditer(line)]
        if any(fed):
            line = _CHPASSWD_INPUT.sub(rf"\g<1>{HIDDEN}", line)
        elif fed or "--stdin" in line or "--password-stdin" in line:  # echo X | passwd --stdin; docker login
            line = _PASSWD_INPUT.sub(rf"\g<1>{HIDDEN}", line)
    return line


def _last_argument_hidden(line: str) -> str:
    """``line`` with the password that is the last argument of ``htpasswd -b …`` (a ``-b`` switch
    given) or ``vault login …`` / ``bao login …`` (an argument that is no option and no ``K=V``)
    hidden, each time such a command appears."""
    out, at = [], 0
    for program in _LAST_ARGUMENT_PROGRAMS.finditer(line):
        if program.start() < at:
            continue
        text = _COMMAND_TEXT.match(line, program.end())
        assert text is not None  # it matches the empty string
        args = list(_ARGUMENT.finditer(line, program.end(), text.end()))
        if not args:
            continue
        last = args[-1]
        if program.group(0) == "htpasswd":
            ok = any(_HTPASSWD_BATCH.fullmatch(a.group(0)) for a in args[:-1])
        else:
            ok = not last.group(0).startswith("-") and "=" not in last.group(0)
        if ok:
            out += [line[at:last.start()], HIDDEN]
            at = last.end()
    return "".join(out) + line[at:]


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


def redact_line(line: str) -> tuple[str, bool]:
    """One line with its secrets hidden, and whether it ended with a secret option or JSON key
    whose value is the next line's first word (``- --db-password`` / ``- X`` of a YAML list)."""
    line = _known_shapes(line)
    # words at even indexes, the whitespace between them at odd ones (a JSON or Python list written
    # without spaces, ["curl","--user","bob:X"], is split between its items)
    listed = ('","' in line and '["' in line) or ("','" in line and "['" in line)
    parts = (_LIST_WORDS if listed else WORDS).split(line)
    positions = [i for i in range(0, len(parts), 2) if parts[i]]  # the words' indexes in parts
    order = {i: k for k, i in enumerate(positions)}  # a word's part index → its place among the words
    words = [parts[i] for i in positions]
    # a client's password options count after that client's name only (docker run -p 80:80 … mongo: a port)
    mysql = login_program = login_p = lftp = curl = yaml_key = False
    attached: re.Pattern[str] | None = None  # this line's program's attached password option (-PX)
    from_option = False  # hide_next was set by an option or a JSON key: its value may be on the next line
    password_options: set[str] = set()
    netrc = bool(words) and words[0] == "machine"  # machine H login U password X
    # "requirepass X" (redis), "auth_pass X" (keepalived): a known key, then one value (and a comment)
    key_value = len(words) == 2 or (len(words) > 2 and words[2].startswith(("#", ";"))) or _quoted_value_line(line)
    # <add key="DbPassword" value="***"/>: the pre-pass hid the value; key="…" there names a setting
    attributes = "value" in line and "=" in line and _KEY_VALUE_ATTRS.search(line) is not None
    hide_next = user_next = named = named_value = token_next = hide_rest = sql_password = False
    # a configuration line's key opening the line, then ": " or " = " (password: correct horse,
    # password = correct horse of an ini file): its unquoted value is the rest of the line, up to a comment
    config_line = rest_value = False
    user_quote = ""  # the quote a user name opened and did not close (see user_next)
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
        if word == "\\" and (i == positions[-1] or any(m in parts[i + 1] for m in BREAKS)):
            continue  # a backslash continuing the line is no word (no option's value)
        was_first, first = first, False
        before, previous = previous, word
        if i == auth_password:  # Redis AUTH [user] X
            parts[i] = hide_value(word)[0]
            continue
        program = _program(word)
        if program in _PASSWORD_OPTIONS:
            password_options.update(_PASSWORD_OPTIONS[program])
        elif not mysql and _MYSQL.match(program):
            mysql = True
        elif program in _LOGIN_PROGRAMS:
            login_program = True
        elif program == "login" and login_program:  # docker login -u ci -p X (docker run -p is a port)
            login_p = True
        elif word in _COMMAND_SEPARATORS:
            login_program = login_p = False
        elif program == "lftp":
            lftp = True
        elif program == "curl":
            curl = True
        if program in _ATTACHED_PASSWORD:
            attached = _ATTACHED_PASSWORD[program]
        if hide_rest:  # a cookie header: every pair after it
            parts[i] = HIDDEN if word != HIDDEN else word
            continue
        if rest_value:  # the value of a configuration line goes on to its end, or to a comment
            if word[0] in "#;":
                rest_value = False
            else:
                parts[i - 1], parts[i] = "", ""
                continue
        if open_quote == GOES_ON:  # the value went on past an escaped space: this word is part of it
            parts[i - 1], parts[i] = "", ""
            open_quote, keep_close = shell_open_quote(word), False
            continue
        if open_quote:
            at = closing(word, open_quote, 0)
            parts[i - 1], parts[i] = "", ""
            if at >= 0:  # the close: shown when the opening quote is, then what the word goes on with
                close = word[at:at + len(open_quote)]
                tail, open_quote = after_close(word[at + len(close):])
                parts[i] = (close if keep_close else "") + tail
                keep_close = False
            continue
        if named:
            named, key_first, config_line = False, config_line, False
            if (word in _TYPE_DIGITS and len(positions) - order[i] == 2  # username bob secret 0 X (X last)
                    and words[0].lower() in _DEVICE_DIRECTIVES):
                named = named_value = True
                continue
            if word in ("=", ":", "=>", ":=", "?=", "+="):  # "password = X" of a configuration file, "=>" of PHP, make's :=
                hide_next, config_line = True, key_first and word != "=>"
                continue
            if word[0] in "=:" and len(word) > 1:  # "password =X"
                parts[i], open_quote, keep_close = hide_value(word[1:], word[0])
                continue
            # "requirepass X" opening a line, "password X" of a .netrc line, SQL's PASSWORD 'X'
            if named_value or (word[0] in "'\"" and sql_password):
                parts[i], open_quote, keep_close = hide_value(word)
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
            if plain_value(word):  # automountServiceAccountToken: false
                hide_next = config_line = False
                continue
            if (yaml_key and _YAML_NODE_PROPERTY.match(word) and order[i] + 1 < len(positions)
                    and not parts[positions[order[i] + 1]].startswith("#")):  # password: &pw X, password: !!str X
                continue
            if from_option and word[0] == ",":  # [ "--token" , "X" ]: the list's comma, then the item
                if word == ",":
                    continue
                parts[i], open_quote, keep_close = hide_value(word[1:], ",")
                hide_next = False
                continue
            if word.lower() not in _AUTH_SCHEMES:  # "Authorization: Basic X": the value is the word after
                parts[i], open_quote, keep_close = hide_value(word)
                hide_next = False
                rest_value = config_line and not open_quote and word[0] not in "'\"[{" and word[-1] not in _CLOSERS
            continue
        if user_next and (user_quote or not word.startswith("-")):
            # user_quote: a quoted user name holding a space ("CORP\\Jane Doe%X"): this word goes on inside it
            shown, open_quote = _user_password(user_quote + word, ",:" if lftp else ":%")
            parts[i], keep_close = shown[len(user_quote):], True
            user_quote = shell_open_quote(user_quote + word) if shown == user_quote + word else ""
            user_next = bool(user_quote)
            continue
        user_next, user_quote = False, ""
        if word.lstrip("\"'").lower() in ("bearer", "basic"):
            token_next = True
        elif word.lower() == "by" and identified:  # SQL: IDENTIFIED [WITH plugin] BY 'X'
            hide_next = True
        elif word == "=" and set_password:  # SQL: SET PASSWORD [FOR 'u'@'h'] = 'X'
            hide_next, set_password = True, False
        elif redis_acl and (acl := _ACL_SECRET.match(word)):  # user default on >PASSWORD ~* +@all
            parts[i] = acl.group(1) + HIDDEN
        elif (attached is not None and (bare := word.lstrip("[\"'"))[:1] == "-" and (m := attached.match(bare))
              and not m.group(1) and bare[m.start(1) - 2:m.start(1)] not in ("-p", "-P", "-w")):
            hide_next, from_option, yaml_key = True, True, False  # ldapsearch -xw X, useradd -mp X: the next word
        elif ((mysql or login_p) and (bare := word.lstrip("[\"'")).startswith("-p") and (at := 2)
              or attached is not None and (bare := word.lstrip("[\"'"))[:1] == "-" and (m := attached.match(bare))
              and (at := m.start(1))) and len(bare) > at and not _option_item(word, bare):
            # -pX (-pMyPass), sqlcmd -PX, ldapsearch -xwX; "-pX"] of an exec-form list: the value up to that
            # list item's quote
            lead = word[:len(word) - len(bare)]
            quote = next((c for c in lead if c in "\"'"), "")
            end = closing(bare, quote, at) if quote else -1
            if not quote:
                shown, open_quote, keep_close = hide_value(bare[at:], bare[:at])
            elif end < 0:
                shown, open_quote, keep_close = bare[:at] + HIDDEN, quote, True
            else:
                tail, open_quote = after_close(bare[end + 1:])
                shown, keep_close = bare[:at] + HIDDEN + quote + tail, False
            parts[i] = lead + shown
        elif (core := word if word[-1] != "," and word[0] not in "[\"'" else word.strip("[],\"'")) and (
                core in password_options or (login_p and core == "-p") or (_OPTION.match(core) and secret_name(core))):
            hide_next, from_option, yaml_key = True, True, False  # --token X; ["--token", "X"] of a JSON list
        elif word in _IPSEC_KINDS and before == ":":  # ipsec.secrets: %any : PSK "X"
            hide_next, from_option, yaml_key = True, False, False
        elif word[-1] in ":=" and _BARE_NAME.match(key := word.rstrip(":=")) and secret_name(key):
            hide_next = True  # "password:", "userPassword::" (LDIF's base64 form)
            from_option = key[:1] in "\"'"  # a JSON member's name: its value may be on the next line
            yaml_key = word[-1] == ":" and not from_option
            config_line = (was_first or (before == "-" and order[i] == 1)) and yaml_key  # "- password: X" too
            hide_rest = NAME_PARTS.sub("", key.lower()) in ("cookie", "setcookie")
        elif word.strip("[],\"'") in ("-u", "--user", "-U"):  # also an item of a JSON list: "--user",
            user_next = True
        elif curl and _SHORT_OPTIONS_U.match(word.strip("[],\"'")):  # curl -su bob:X, -sSfu bob:X
            user_next = True
        elif curl and (bare := word.lstrip("[\"'")).startswith("-u") and len(bare) > 2 and not _option_item(word, bare):
            lead = word[:len(word) - len(bare)]  # curl -ubob:X; "-ubob:X" of a list: read inside its quote
            quote = lead[-1:] if lead[-1:] in ("'", '"') else ""
            shown, open_quote = _user_password(quote + bare[2:])
            parts[i], keep_close = lead + "-u" + shown[len(quote):], True
        elif _BARE_NAME.match(word) and ((config_key := word.strip("\"'").lower() in _CONFIG_KEYS)
                                         or secret_name(word)):
            named, config_line = True, was_first or (before == "-" and order[i] == 1)
            sql_password = NAME_PARTS.sub("", word.lower()) in ("password", "passwd")
            named_value = ((was_first and config_key and (key_value or word.lower() in _FIRST_ARGUMENT_KEYS))
                           or word.lower() in _DIRECTIVE_SECRETS
                           or before.lower() in _ENV_DIRECTIVES
                           or (before.lower() in _SETTERS and not set_password and len(positions) - order[i] == 2)
                           or before.lower() == "snmp-server"
                           or (netrc and NAME_PARTS.sub("", word.lower()) == "password"))
        elif (bracketed := _BRACKETED_NAME.match(word)) and secret_name(bracketed.group(1)):
            named, named_value = True, False  # env[DB_PASSWORD] = X
        elif (key := _JSON_KEY_WORD.match(word)) and secret_name(key.group(1)):
            named, named_value = True, False  # {"token" : "X"}
        elif (key := _JSON_KEY_END.search(word)) and secret_name(key.group(1)):
            hide_next, from_option, yaml_key = True, True, False  # {"password": "X"}
        else:
            parts[i], hide_next, open_quote, keep_close = _redact_word(word)
            from_option = False
    # the value is on the next line only when the option or key stands alone on this one ("- --db-password")
    own = words[:-1] if words and words[-1] == "\\" else words  # a continued line: the backslash is no word
    alone = (len(own) == 1 or (len(own) == 2 and own[0] == "-")
             or (bool(own) and own[-1].endswith(('",', "',")) and "[" in line))  # args: ["--password",
    # a user option standing alone too ("--user", of a JSON list printed an item a line)
    return "".join(parts), (hide_next and from_option or user_next and not user_quote) and alone and not hide_rest


def _quoted_value_line(line: str) -> bool:
    """Whether ``line`` is ``key "a quoted value"`` with at most a comment after it (a
    configuration file's key-value line whose value holds spaces)."""
    _, _, rest = line.strip().partition(" ")
    rest = rest.strip()
    quote = rest[:1]
    if quote not in ("'", '"'):
        return False
    end = closing(rest, quote, 1)
    return end > 0 and (not rest[end + 1:].strip() or rest[end + 1:].strip().startswith(("#", ";")))


def closing(word: str, quote: str, start: int) -> int:
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


def hide_value(word: str, lead: str = "") -> tuple[str, str, bool]:
    """A value word hidden: a quoted one keeps its quotes and what follows its close
    (``"hunter2"},`` → ``"***"},``).  Returns the word as shown, the quote it opened and did
    not close (the next words are hidden up to it), and True (that close is shown)."""
    quote = '\\"' if word.startswith('\\"') else word[:1]  # \"X\": a string's quotes inside a JSON string
    if quote not in ("'", '"', '\\"'):  # a separator or quote closing around it stays (3600, → ***,  X" → ***")
        if shell_open_quote(word) == GOES_ON:  # correct\ horse: the next word goes on with it
            return lead + HIDDEN, GOES_ON, False
        return lead + HIDDEN + (word[-1] if len(word) > 1 and word[-1] in _CLOSERS else ""), "", False
    end = closing(word, quote, len(quote))
    if end < 0:
        return lead + quote + HIDDEN, quote, True
    tail, reopened = after_close(word[end + len(quote):])
    return lead + quote + HIDDEN + quote + tail, reopened, False


#: what may follow a hidden value's closing quote in its word and still be shown: the syntax around
#: a value (``"***"},`` of JSON, ``"***";`` of a statement, ``"***")`` of a call) — nothing else, not a
#: quote either (``"a")" X"`` is the one value ``a) X`` to the shell)
_SYNTAX_AFTER = re.compile(r"[,;:)\]}>]*\Z")


def after_close(tail: str) -> tuple[str, str]:
    """What follows a hidden quoted value's closing quote in the same word, as shown, and the
    quote it opens and does not close (``""`` if none).  Syntax stays (``},``); anything else
    goes on with the value as the shell reads it (``"p w"TAIL`` is the one word ``p wTAIL``,
    ``"p w"' MORE'`` is ``p w MORE``, ``'it'\\''s'`` is ``it's``) and is hidden too."""
    if _SYNTAX_AFTER.match(tail):
        return tail, ""
    return HIDDEN, shell_open_quote(tail)


def _unclosed(value: str) -> str:
    """What ``value`` leaves open as the shell reads it (:func:`shell_open_quote`: ``"a`` → ``"``,
    ``'it'"'"'s`` → ``'``, ``a\\`` → :data:`GOES_ON`), when it starts with a quote or ends in
    a backslash (a quote after its start stands for itself: ``X"`` of ``sh -c "… X"``), else ``""``."""
    opened = shell_open_quote(value)
    return opened if value[:1] in ("'", '"') or opened == GOES_ON else ""


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
    end = closing(body, quote, 0) if quote else -1
    if end >= 0:  # up to the quote that closes the opening one: what follows it stays
        body, tail = body[:end], body[end:]
    shown, hide_next, opened, keep = _redact_word_as_is(body, depth + 1)
    if quote and end < 0 and shown != body and not opened:  # "PASSWORD=a SECRET": hidden to the quote's close
        opened, keep = quote, True
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
        if secret_name(name) and not plain_value(value, name):
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
            shown, _, opened, keep = _redact_word(inner, depth + 1)
            if shown != inner:  # a quote not closed in this word: the value goes on to its close
                if quote and not close:
                    opened, keep = quote, True
                return f"{name}{sep}{quote}{shown}{close}", False, opened, keep
    for pairs in (_QUERY_SECRET, _CONNECTION_SECRET):
        word = pairs.sub(lambda m: m.group(1) + HIDDEN if secret_name(m.group(2))
                         and not plain_value(m.group(3), m.group(2)) else m.group(0), word)
    word = _JSON_SECRET.sub(lambda m: m.group(1) + HIDDEN + m.group(4) if secret_name(m.group(2))
                            else m.group(0), word)
    word = _JSON_ESCAPED.sub(lambda m: m.group(1) + HIDDEN + m.group(4) if secret_name(m.group(2))
                             else m.group(0), word)
    word = _URL_PASSWORD.sub(rf"\g<1>{HIDDEN}@", word)
    for pattern, quote in ((_JSON_ESCAPED_OPEN, '\\"'), (_JSON_OPEN, '"')):
        member = pattern.search(word)
        if member and secret_name(member.group(2)):  # {"token":"a b"} split into words: hide up to the close
            return word[:member.end(1)] + HIDDEN, False, quote, True
    return word, False, "", False


def _user_password(value: str, separators: str = ":%") -> tuple[str, str]:
    """``name:password`` (curl ``-u``), ``name%password`` (smbclient ``-U``) or ``name,password``
    (lftp ``-u``, when ``separators`` holds ``,``) with the password hidden.  Returns the word as
    shown and the quote the word opened and did not close as the shell reads it (``"bob:a`` of
    ``-u "bob:a b"``, ``bob,"p`` of ``-u bob,"p w"``: the next words are hidden up to that quote),
    else ``""``.  A quoted word keeps its close and the syntax after it (``"bob:***"],``)."""
    for sep in separators:
        name, found, _ = value.partition(sep)
        if found:
            opened = shell_open_quote(value)
            if opened:
                return f"{name}{sep}{HIDDEN}", opened
            quote = value[0] if value[0] in "'\"" else ""
            end = closing(value, quote, 1) if quote else -1
            if end > len(name):  # the quote around the whole word: its close shown, then its syntax
                tail, reopened = after_close(value[end + 1:])
                return f"{name}{sep}{HIDDEN}{quote}{tail}", reopened
            return f"{name}{sep}{HIDDEN}", ""
    return value, ""


def shell_open_quote(word: str) -> str:
    """The quote ``word`` leaves open as a POSIX shell reads it (``'`` or ``"``), :data:`GOES_ON`
    when it ends in a backslash that escapes the space after it (``correct\\`` of
    ``correct\\ horse``), else ``""``: a backslash escapes the next character outside quotes
    and inside double quotes."""
    quote, i = "", 0
    while i < len(word):
        c = word[i]
        if c == "\\" and quote != "'":
            if i + 1 >= len(word) and not quote:
                return GOES_ON
            i += 2
            continue
        if quote and c == quote:
            quote = ""
        elif not quote and c in "'\"":
            quote = c
        i += 1
    return quote
