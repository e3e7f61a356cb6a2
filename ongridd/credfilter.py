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
  ``mongo``/``mongosh -p X``;
- the same names in configuration files and JSON: ``password = X``, ``password= X``,
  ``db_password: X`` (INI, YAML, TOML, shell), and a quoted value holding
  spaces (``password: "a b c"``, ``DB_PASSWORD="a b"``) is hidden up to
  its closing quote on the same line.

:func:`redact_credentials` keeps every other character of the text,
whitespace and line breaks included, so a ``ps`` table keeps its columns'
starts.  Pure; linear in the text's length (every pattern is anchored or
bounded, so no input makes a regular expression backtrack over a word).
"""

from __future__ import annotations

import re

HIDDEN = "***"
#: what a tool's answer says (``redacted``) when this filter changed something in it
REDACTED_NOTE = "values that look like credentials (--token X, password=X, URL passwords) are ***"

#: name parts (lower case, split at anything not a letter or digit) that say the value is a credential
_SECRET_PARTS = frozenset({"pass", "passwd", "password", "passphrase", "pwd", "token", "secret", "credential",
                           "credentials", "cookie", "bearer", "auth", "authorization", "apikey", "privatekey",
                           "secretkey", "accesskey", "clientsecret", "sessionkey"})
#: endings of a name part that say so too (``PGPASSWORD``, ``MYSQL_PWD`` → ``mysql``/``pwd``, ``ghtoken``)
_SECRET_ENDINGS = ("password", "passwd", "pwd", "token", "secret", "apikey", "secretkey", "privatekey", "passphrase")
#: a ``key`` part after one of these is a credential (``api_key``, ``AWS_SECRET_ACCESS_KEY``); ``key`` alone
#: is one only as the whole name (``--key X``, ``KEY=X``), never as a part of ``key_buffer_size``
_KEY_KINDS = frozenset({"api", "access", "private", "secret", "signing", "encryption", "master", "client",
                        "account", "license", "session", "shared", "auth"})
_PARTS = re.compile(r"[^a-z0-9]+")


def _secret_name(name: str) -> bool:
    """Whether an option or key ``name`` (``--api-key``, ``DB_PASSWORD``, ``apiKey``) names a credential;
    ``--author``, ``--keyfile``, ``key_buffer_size`` do not."""
    parts = [p for p in _PARTS.split(name.lower()) if p]
    if parts == ["key"]:
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
_QUERY_SECRET = re.compile(r"([?&;,]([^=&#,\s]{1,64})=)([^&#,\s]+)")
#: a JSON member with a secret-looking name
_JSON_SECRET = re.compile(r'("([^"\s]{1,64})"\s{0,4}:\s{0,4}")([^"]*)(")')
#: a JSON member whose string value is still open at the word's end (a value holding a space)
_JSON_OPEN = re.compile(r'("([^"\s]{1,64})"\s{0,4}:\s{0,4}")[^"]*\Z')
#: schemes of an ``Authorization`` header: the credential is the word after them
_AUTH_SCHEMES = frozenset({"basic", "bearer", "token", "digest", "negotiate", "ntlm", "apikey"})
#: client programs (by file name) and their options that take a password as the next word
_PASSWORD_OPTIONS = {
    "redis-cli": ("-a",), "sshpass": ("-p",), "mongo": ("-p",), "mongosh": ("-p",),
    **{name: ("-w",) for name in ("ldapsearch", "ldapmodify", "ldapadd", "ldapdelete", "ldappasswd",
                                  "ldapwhoami", "ldapcompare", "ldapmodrdn", "ldapexop")},
}
#: programs whose ``-p`` takes the password in the same word (the MySQL and MariaDB tools)
_MYSQL = re.compile(r"(?:mysql[a-z_-]{0,16}|mariadb(?:-[a-z]{1,16})?)\Z")
_WORDS = re.compile(r"(\s+)")
#: a key standing alone as a word (``password`` of ``password = X``; quoted as in JSON or TOML)
_BARE_NAME = re.compile(r"[\"']?[A-Za-z_][A-Za-z0-9_.-]{0,127}[\"']?\Z")


def redact_credentials(text: str) -> str:
    """``text`` (one or more command lines, or a listing holding them) with secret-looking
    values replaced by ``***``; everything else unchanged."""
    return "\n".join(_redact_line(line) for line in text.split("\n"))


def _program(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _redact_line(line: str) -> str:
    parts = _WORDS.split(line)  # words at even indexes, the whitespace between them at odd ones
    programs = {_program(word) for word in parts[::2] if word}
    mysql = any(_MYSQL.match(name) for name in programs)
    password_options = {opt for name in programs for opt in _PASSWORD_OPTIONS.get(name, ())}
    hide_next = user_next = named = False
    # a hidden value's quote not yet closed: the words up to its close go too (the close itself stays
    # when the opening quote is still shown, as in a JSON member: "password":"***")
    open_quote, keep_close = "", False
    for i in range(0, len(parts), 2):
        word = parts[i]
        if not word:
            continue
        if open_quote:
            at = word.find(open_quote)
            parts[i - 1], parts[i] = "", "" if at < 0 else word[at if keep_close else at + 1:]
            open_quote = open_quote if at < 0 else ""
            continue
        if named and word in ("=", ":"):  # "password = X" of a configuration file
            hide_next, named = True, False
            continue
        if named and word[0] in "=:" and len(word) > 1:  # "password =X"
            parts[i], named, open_quote, keep_close = word[0] + HIDDEN, False, _unclosed(word[1:]), False
            continue
        named = False
        if hide_next:  # the value of a secret-named option, whatever it looks like (a token may start with -)
            if word.lower() not in _AUTH_SCHEMES:  # "Authorization: Basic X": the value is the word after
                parts[i], hide_next, open_quote, keep_close = HIDDEN, False, _unclosed(word), False
            continue
        if user_next and not word.startswith("-"):
            parts[i], user_next = _user_password(word), False
            continue
        user_next = False
        if word in password_options or (_OPTION.match(word) and _secret_name(word)) or (
                word[-1] in ":=" and _BARE_NAME.match(word[:-1]) and _secret_name(word[:-1])):
            hide_next = True
        elif word in ("-u", "--user", "-U"):
            user_next = True
        elif mysql and word.startswith("-p") and len(word) > 2:
            parts[i] = f"-p{HIDDEN}"
        else:
            named = bool(_BARE_NAME.match(word)) and _secret_name(word)
            if not named:
                parts[i], hide_next, open_quote, keep_close = _redact_word(word)
    return "".join(parts)


def _unclosed(value: str) -> str:
    """The quote ``value`` opens and does not close (``"a`` → ``"``), else ``""``."""
    quote = value[:1]
    return quote if quote in ("'", '"') and not (len(value) > 1 and value.endswith(quote)) else ""


def _redact_word(word: str, depth: int = 0) -> tuple[str, bool, str, bool]:
    """One word: ``name=value`` (and a value that is itself one), query parameters, JSON members, URL
    passwords.  Returns the word as shown, whether the next word is the value
    (``Authorization:Bearer`` then the credential), the quote a hidden value opened and
    did not close (``DB_PASSWORD="a`` of ``DB_PASSWORD="a b"``, ``{"token":"a`` of
    ``{"token":"a b"}``) or ``""``, and whether its close is to be shown (the JSON member's)."""
    assigned = _ASSIGNED.match(word)
    if assigned:
        name, sep, value = assigned.groups()
        if _secret_name(name):
            if value.lower() in _AUTH_SCHEMES:
                return word, True, "", False
            return f"{name}{sep}{HIDDEN}", False, _unclosed(value), False
        if name in ("--user", "-u", "-U") and sep == "=":
            return f"{name}={_user_password(value)}", False, "", False
        if depth < 2:  # --env=DB_PASSWORD=X, Environment="TOKEN=X"
            quote = value[:1] if value[:1] in ("'", '"') else ""
            close = quote if quote and len(value) > 1 and value.endswith(quote) else ""
            inner = value[len(quote):len(value) - len(close)]
            shown, _, _, _ = _redact_word(inner, depth + 1)
            if shown != inner:
                return f"{name}{sep}{quote}{shown}{close}", False, "", False
    word = _QUERY_SECRET.sub(lambda m: m.group(1) + HIDDEN if _secret_name(m.group(2)) else m.group(0), word)
    word = _JSON_SECRET.sub(lambda m: m.group(1) + HIDDEN + m.group(4) if _secret_name(m.group(2))
                            else m.group(0), word)
    word = _URL_PASSWORD.sub(rf"\g<1>{HIDDEN}@", word)
    member = _JSON_OPEN.search(word)
    if member and _secret_name(member.group(2)):  # {"token":"a b"} split into words: hide up to the close
        return word[:member.end(1)] + HIDDEN, False, '"', True
    return word, False, "", False


def _user_password(value: str) -> str:
    """``name:password`` (curl ``-u``) or ``name%password`` (smbclient ``-U``) with the password hidden."""
    for sep in (":", "%"):
        name, found, _ = value.partition(sep)
        if found:
            return f"{name}{sep}{HIDDEN}"
    return value
