"""The vocabulary of the credential filter: which names say their value is a credential
(:func:`secret_name`), which values never are one (:func:`plain_value`), and what stands
for a hidden value."""

from __future__ import annotations

import re

HIDDEN = "***"
#: what a tool's answer says (``redacted``) when this filter changed something in it
REDACTED_NOTE = "values that look like credentials (--token X, password=X, URL passwords) are ***"
#: name parts (lower case, split at anything not a letter or digit) that say the value is a credential
_SECRET_PARTS = frozenset({"pass", "passwd", "password", "passwords", "passphrase", "pwd", "token", "tokens", "secret",
                           "secrets", "credential",
                           "credentials", "cookie", "bearer", "auth", "authorization", "apikey", "privatekey",
                           "secretkey", "accesskey", "clientsecret", "sessionkey", "requirepass", "masterauth",
                           "signature", "sig", "psk", "dbpass", "sshpass", "rootpass",
                           "adminpass", "userpass", "ldappass", "smtppass", "mailpass", "redispass", "pgpass",
                           "authtoken", "authtok", "salt", "community", "rocommunity", "rwcommunity"})
#: endings of a name part that say so too (``PGPASSWORD``, ``MYSQL_PWD`` → ``mysql``/``pwd``, ``ghtoken``)
_SECRET_ENDINGS = ("password", "passwd", "pwd", "token", "secret", "apikey", "secretkey", "privatekey", "passphrase",
                   "passwords", "tokens", "secrets", "apikeys")
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
NAME_PARTS = re.compile(r"[^a-z0-9]+")
#: parts before ``tokens`` that make it a count of a model's tokens (``max_tokens``, ``prompt_tokens``)
_TOKEN_COUNTS = frozenset({"max", "min", "num", "total", "prompt", "completion", "input", "output", "cached",
                           "reasoning", "context", "used", "remaining", "count"})


def plain_value(value: str, name: str = "") -> bool:
    """Whether ``value`` cannot be a credential whatever its name says: a switch (``false``,
    ``on``), or the folder of ``PWD=/home/bob`` (a shell's working folder, not ODBC's ``Pwd=X``)."""
    bare = value.strip("\"',;").lower()
    return bare in _NOT_SECRET_VALUES or (name.lstrip("-").lower() in _FOLDER_NAMES and bare.startswith("/"))


def secret_name(name: str) -> bool:
    """Whether an option or key ``name`` (``--api-key``, ``DB_PASSWORD``, ``apiKey``) names a credential;
    ``--author``, ``--keyfile``, ``key_buffer_size`` do not."""
    parts = [p for p in NAME_PARTS.split(_CAMEL.sub("_", name).lower()) if p]  # AccountKey → account, key
    if parts == ["key"]:
        return True
    if not parts or parts[-1] in _ABOUT_PARTS or (name[:1] == "-" and len(parts) > 1 and parts[0] in _FLAG_VERBS):
        return False
    if parts[-1] in _LAST_PARTS or (parts[-1] == "pat" and len(parts) > 1 and parts[-2] in _PAT_OWNERS):
        return True
    for i, part in enumerate(parts):
        if part == "tokens" and i > 0 and parts[i - 1] in _TOKEN_COUNTS:
            continue  # max_tokens: 4096 counts a model's tokens
        if part in _SECRET_PARTS or part.endswith(_SECRET_ENDINGS):
            return True
        if part == "key" and i > 0 and parts[i - 1] in _KEY_KINDS:
            return True
    return False
