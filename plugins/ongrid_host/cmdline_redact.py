"""Hide secret-looking values in process command lines before a model sees them.

Other programs' command lines are data Ongrid does not own: a ``--token X``,
``--password=X``, ``mysql -pX`` or ``https://user:X@host`` written there by
someone else would otherwise reach the model (and its provider) through a
process listing.  Ongrid cannot know those secrets (its own are redacted
everywhere by the secret set), so this is a best-effort filter over the
shapes in which command lines carry credentials:

- an option or a ``name=value`` / ``name:value`` word whose name holds
  ``pass``, ``passwd``, ``password``, ``token``, ``secret``, ``key``
  (``api-key``, ``access_key`` …), ``auth``, ``credential`` or ``bearer``:
  its value, written in the same word or as the next word, becomes ``***``;
- the password of a URL's user information (``scheme://user:***@host``);
- ``-pVALUE`` on a line that runs a MySQL/MariaDB client, whose password
  option takes its value in the same word.

:func:`redact_command_lines` keeps every other character of the text,
whitespace and line breaks included, so a ``ps`` table keeps its columns'
starts.  Pure; bounded by the text's length (linear regular expressions).
"""

from __future__ import annotations

import re

HIDDEN = "***"

#: a name (option or key) that says its value is a credential
_SECRET_NAME = re.compile(r"(?i)(pass|token|secret|key|auth|credential|bearer)")
#: ``--name=value``, ``-name=value``, ``name=value``, ``name:value`` (a URL's ``scheme:`` is not one: ``//`` follows)
_ASSIGNED = re.compile(r"^(-{0,2}[A-Za-z_][A-Za-z0-9_.-]*)([=:])(?!//)(.+)\Z", re.DOTALL)
#: an option word standing alone: ``--token``, ``-password``
_OPTION = re.compile(r"^-{1,2}[A-Za-z][A-Za-z0-9_.-]*\Z")
#: a URL's user information with a password
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]*:)[^\s/@]+@")
#: programs whose ``-p`` takes the password in the same word
_MYSQL = re.compile(r"(?:^|/)(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mariadb|"
                    r"mariadb-dump|mariadb-admin)\Z")
_WORDS = re.compile(r"(\s+)")


def redact_command_lines(text: str) -> str:
    """``text`` (one or more command lines, or a listing holding them) with secret-looking
    values replaced by ``***``; everything else unchanged."""
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        out.append(_redact_line(line))
    return "".join(out)


def _redact_line(line: str) -> str:
    parts = _WORDS.split(line)  # words at even indexes, the whitespace between them at odd ones
    mysql = any(_MYSQL.search(word) for word in parts[::2])
    hide_next = False
    for i in range(0, len(parts), 2):
        word = parts[i]
        if not word:
            continue
        if hide_next and word.lower() == "bearer":  # "Authorization: Bearer X": the value is the word after
            continue
        if hide_next and not word.startswith("-"):
            parts[i] = HIDDEN
            hide_next = False
            continue
        hide_next = False
        assigned = _ASSIGNED.match(word)
        if assigned and _SECRET_NAME.search(assigned.group(1)):
            parts[i] = f"{assigned.group(1)}{assigned.group(2)}{HIDDEN}"
        elif (_OPTION.match(word) or word.endswith(":")) and _SECRET_NAME.search(word):
            hide_next = True
        elif mysql and word.startswith("-p") and len(word) > 2 and not word.startswith("--"):
            parts[i] = f"-p{HIDDEN}"
        else:
            parts[i] = _URL_PASSWORD.sub(rf"\g<1>{HIDDEN}@", word)
    return "".join(parts)
