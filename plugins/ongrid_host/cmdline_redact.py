"""Hide secret-looking values in process command lines before a model sees them.

Other programs' command lines are data Ongrid does not own: a ``--token X``,
``--password=X``, ``mysql -pX`` or ``https://user:X@host`` written there by
someone else would otherwise reach the model (and its provider) through a
process listing.  Ongrid cannot know those secrets (its own are redacted
everywhere by the secret set), so this is a best-effort filter over the
shapes in which command lines carry credentials:

- an option, a ``name=value`` / ``name:value`` word (also inside another
  option's value: ``--env=DB_PASSWORD=X``, ``Environment="TOKEN=X"``), a
  query parameter (``?api_key=X``) or a JSON member (``{"password":"X"}``)
  whose name holds ``pass``, ``pwd``, ``token``, ``secret``, ``key``,
  ``auth``, ``credential``, ``cookie`` or ``bearer``: its value, written in
  the same word or as the next word, becomes ``***``; after
  ``Authorization:`` the scheme (``Basic``, ``Bearer`` …) stays;
- the password of a URL's user information (``scheme://user:***@host``) and
  of ``--user``/``-u`` ``name:password`` (curl) or ``name%password``
  (smbclient ``-U``);
- a client's own password option: ``-pX`` of the MySQL/MariaDB tools,
  ``redis-cli -a X``, ``sshpass -p X``, the OpenLDAP tools' ``-w X``,
  ``mongo``/``mongosh -p X``.

:func:`redact_command_lines` keeps every other character of the text,
whitespace and line breaks included, so a ``ps`` table keeps its columns'
starts.  Pure; linear in the text's length (every pattern is anchored or
bounded, so no input makes a regular expression backtrack over a word).
"""

from __future__ import annotations

import re

HIDDEN = "***"

#: a name (option or key) that says its value is a credential
_SECRET_NAME = re.compile(r"(?i)(pass|pwd|token|secret|key|auth|credential|cookie|bearer)")
#: ``--name=value``, ``/name=value``, ``name=value``, ``name:value`` (a URL's ``scheme:`` is not one: ``//``
#: follows); matched from the word's start only
_ASSIGNED = re.compile(r"([-/+]{0,2}[A-Za-z_][A-Za-z0-9_.-]*)([=:])(?!//)(.+)\Z", re.DOTALL)
#: an option word standing alone: ``--token``, ``-password``
_OPTION = re.compile(r"-{1,2}[A-Za-z][A-Za-z0-9_.-]*\Z")
#: a URL's user information with a password (the scheme at most 32 characters: linear on any word)
_URL_PASSWORD = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s/:@]{0,256}:)[^\s/@]+@")
#: a query parameter with a secret-looking name
_QUERY_SECRET = re.compile(r"([?&;][^=&#\s]{0,64}=)([^&#\s]+)")
#: a JSON member with a secret-looking name
_JSON_SECRET = re.compile(r'("[^"\s]{1,64}"\s{0,4}:\s{0,4}")([^"]*)(")')
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


def redact_command_lines(text: str) -> str:
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
    hide_next = user_next = False
    for i in range(0, len(parts), 2):
        word = parts[i]
        if not word:
            continue
        if hide_next and word.lower() in _AUTH_SCHEMES:  # "Authorization: Basic X": the value follows
            continue
        if hide_next and not word.startswith("-"):
            parts[i], hide_next = HIDDEN, False
            continue
        if user_next and not word.startswith("-"):
            parts[i], user_next = _user_password(word), False
            continue
        hide_next = user_next = False
        if word in password_options or ((_OPTION.match(word) or word.endswith(":")) and _SECRET_NAME.search(word)):
            hide_next = True
        elif word in ("-u", "--user", "-U"):
            user_next = True
        elif mysql and word.startswith("-p") and len(word) > 2:
            parts[i] = f"-p{HIDDEN}"
        else:
            parts[i] = _redact_word(word)
    return "".join(parts)


def _redact_word(word: str, depth: int = 0) -> str:
    """One word: ``name=value`` (and a value that is itself one), query parameters, JSON members, URL
    passwords."""
    assigned = _ASSIGNED.match(word)
    if assigned:
        name, sep, value = assigned.groups()
        if _SECRET_NAME.search(name):
            return f"{name}{sep}{HIDDEN}"
        if name in ("--user", "-u", "-U") and sep == "=":
            return f"{name}={_user_password(value)}"
        if depth < 2:  # --env=DB_PASSWORD=X, Environment="TOKEN=X"
            quote = value[:1] if value[:1] in ("'", '"') else ""
            close = quote if quote and len(value) > 1 and value.endswith(quote) else ""
            inner = value[len(quote):len(value) - len(close)]
            shown = _redact_word(inner, depth + 1)
            if shown != inner:
                return f"{name}{sep}{quote}{shown}{close}"
    word = _QUERY_SECRET.sub(lambda m: m.group(1) + HIDDEN if _SECRET_NAME.search(m.group(1)) else m.group(0), word)
    word = _JSON_SECRET.sub(lambda m: m.group(1) + HIDDEN + m.group(3) if _SECRET_NAME.search(m.group(1))
                            else m.group(0), word)
    return _URL_PASSWORD.sub(rf"\g<1>{HIDDEN}@", word)


def _user_password(value: str) -> str:
    """``name:password`` (curl ``-u``) or ``name%password`` (smbclient ``-U``) with the password hidden."""
    for sep in (":", "%"):
        name, found, _ = value.partition(sep)
        if found:
            return f"{name}{sep}{HIDDEN}"
    return value
