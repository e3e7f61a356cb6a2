"""The credential filter over a text: line by line with what a line says about the next ones
(a PEM key, a YAML block, an XML element, a value below its key), shell commands continued
over lines, strings holding commands, Linux audit records and JSON byte arrays."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from ongridd.auditargs import audit_records
from ongridd.credfilter.line import (
    BREAKS,
    WORDS,
    after_close,
    closing,
    hide_value,
    redact_line,
    shell_open_quote,
    value_first,
)
from ongridd.credfilter.names import HIDDEN, secret_name

#: the lines of a PEM private key between its BEGIN and END lines
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
#: a zsh history line's ``: <start>:<elapsed>;`` prefix
_ZSH_HISTORY = re.compile(r"(: [0-9]{1,12}:[0-9]{1,9};)(.*)\Z", re.DOTALL)
#: ``- name: DB_PASSWORD`` / ``"name": "DB_PASSWORD",`` on a line of its own: its value is on the next
#: line (``value: X``, ``"value": "X"``)
_NAME_LINE = re.compile(r"""\s*(?:(?:-\s{1,4})?["']?name["']?\s{0,4}:\s{0,4}["']?([A-Za-z_][A-Za-z0-9_.-]{0,63})["']?,?"""
                        r"""|<name>([A-Za-z_][A-Za-z0-9_.-]{0,127})</name>)\s*\Z""")
_VALUE_LINE = re.compile(r"""(\s*["']?value["']?\s{0,4}:\s{0,4})(\S.{0,2000})\Z""")
#: a Hadoop-style ``<value>X</value>`` line under such a ``<name>`` line
_XML_VALUE_LINE = re.compile(r"(\s*<value>)([^<]{0,2000})(</value>\s*)\Z")
#: a YAML key whose value is a block scalar on the lines after it (``password: |``)
_YAML_BLOCK_KEY = re.compile(r"(\s*)[\"']?([A-Za-z_][A-Za-z0-9_.-]{0,127})[\"']?\s{0,4}:\s{0,4}[|>][-+0-9]{0,3}\s*\Z")
#: an XML element opened alone on its line (its value on the next lines: ``<password>``)
_XML_OPEN_LINE = re.compile(r"\s*<([A-Za-z_][\w.:-]{0,63})>\s*\Z")
#: a cloud-init ``chpasswd:`` key, and a ``user:password`` line of its block (``    root:X``, ``    - root:X``)
_CHPASSWD_KEY = re.compile(r"\s*chpasswd\s*:\s*\Z")
_USER_PASSWORD_LINE = re.compile(r"(\s*(?:-\s{1,4})?[A-Za-z0-9_.@-]{1,64}:)(?=\S)(.+)\Z")
#: the most lines a multi-line value (a YAML block, an XML element) is hidden for
_BLOCK_LINES_MAX = 200


#: a terminal's escape sequences (colours, cursor moves, titles): ECMA-48 CSI and OSC, and two-character escapes
_TERMINAL_ESCAPE = re.compile(r"\x1b(?:\[[0-?]{0,1024}[ -/]{0,8}[@-~]|\][^\x07\x1b]{0,4096}(?:\x07|\x1b\\)"
                              r"|[()*+-./][ -/]{0,2}[0-~]|[@-Z\\-_])")


def redact_credentials(text: str) -> str:
    """``text`` (one or more command lines, or a listing holding them) with secret-looking
    values replaced by ``***``; everything else unchanged (a PEM private key's lines
    between its BEGIN and END lines each become ``***``; the argument fields of an audit
    record whose command has a secret are shown decoded, see :func:`_audit_line`), but
    for a terminal's escape sequences, which are removed first: a coloured log line
    (``\x1b[36mtoken\x1b[0m=X``) is read as the text it shows."""
    if "\x1b" in text:
        text = _TERMINAL_ESCAPE.sub("", text)
    return _redact_text(text, audit=True)


#: the lines a continued shell command's next line is checked after are cut to so many characters
_CONTINUED_CHARS = 512
#: a line going on inside its last word is checked glued to so many words before it (the word it
#: goes on and the ones that give it a meaning: ``-H Authorization: Bearer ab\\`` / ``cd``), so a
#: text of many such short lines costs no more than its length
_GLUED_WORDS = 4
#: after so many lines in a row that go on (a word or a command written a character or two a line),
#: only so many characters of the lines before are carried: the cost stays linear in the text
_GLUED_LINES = 64
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
    mine, theirs = WORDS.split(one), WORDS.split(other)
    if len(mine) != len(theirs):
        return other if len(other.replace(HIDDEN, "")) <= len(one.replace(HIDDEN, "")) else one
    return "".join(b if HIDDEN in b and HIDDEN not in a else a for a, b in zip(mine, theirs))


def _continued(above: list[str], line: str, alone: str, inside: str) -> tuple[str, str]:
    """``line`` of a shell command continued from the lines ``above`` (its first line and the
    line before), as shown: checked after them (``mysqldump -uroot \\`` / ``-pX``: what the
    command means) and on its own (``alone``: what the line's start says, ``user bob on >X``),
    a word hidden when either check hides it (should the two not line up word for word, the
    one that hides more).  ``inside``: the quote of a hidden value the line above ended in
    (:func:`_in_hidden_quote`), else ``""``.  Returns the line as shown and the quote of a hidden
    value it ends in."""
    if inside:
        return _in_hidden_quote(line, inside)
    if not _CONTINUES.sub("", line).strip():  # nothing on it but its own line break
        return alone, ""
    # the shell drops each line's ending backslash with its line break (``KEY \\`` / ``VALUE``:
    # the value follows its key)
    lines = [_CONTINUES.sub("", a) for a in (above if above[0] != above[1] else above[:1])]
    mark = next((m for m in BREAKS if m not in line and not any(m in a for a in lines)), None)
    if mark is None:
        return alone, ""
    joined, _ = redact_line(mark.join([*lines, line]))
    if joined.count(mark) != len(lines):  # a value hidden across the line break (a quote left open above)
        opened = shell_open_quote(" ".join(lines))
        return _in_hidden_quote(line, opened if opened in ("'", '"') else _SOME_QUOTE)
    after = joined.rsplit(mark, 1)[1]
    if after == alone:
        return alone, ""
    return _either_hides(alone, after), ""


#: the quote of a hidden value going on over lines when the lines kept do not say which one
_SOME_QUOTE = "?"


def _last_words(text: str, n: int) -> str:
    """The end of ``text`` from the start of its ``n``-th last word (all of it when it has fewer),
    read from the end: costs the length of what it returns, not of ``text``."""
    i, words = len(text), 0
    while i > 0:
        while i > 0 and text[i - 1].isspace():
            i -= 1
        if i == 0:
            break
        while i > 0 and not text[i - 1].isspace():
            i -= 1
        words += 1
        if words == n:
            return text[i:]
    return text


def _in_hidden_quote(line: str, quote: str) -> tuple[str, str]:
    """A continued line inside a quoted value hidden from a line above (``quote``: its quote, or
    :data:`_SOME_QUOTE`, the first of either): hidden up to that quote's close and what the word
    goes on with after it (:func:`ongridd.credfilter.line.after_close`), the rest checked as a
    line; or whole, the value going on past it (``-u "bob:a \\`` / ``b \\`` / ``c" x``: the
    shell reads one value).  Returns the line as shown and the quote the value is still in."""
    if quote == _SOME_QUOTE:
        at = min((i for i in (line.find('"'), line.find("'")) if i >= 0), default=-1)
    else:
        at = closing(line, quote, 0)
    if at < 0:
        return HIDDEN, quote
    rest = line[at + 1:]
    glued = next((k for k, c in enumerate(rest) if c.isspace()), len(rest))  # the close's word goes on
    tail, reopened = after_close(rest[:glued])
    if reopened:  # and opens another quote (or escapes the space after it): the rest of the line is in it
        return HIDDEN + line[at] + tail, reopened if reopened in ("'", '"') else _SOME_QUOTE
    return HIDDEN + line[at] + tail + redact_line(rest[glued:])[0], ""


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
            out += [redact_line(line[at:record.start])[0], record.shown(shown)]
            at = record.end
    if not out:
        return None
    return "".join(out) + redact_line(line[at:])[0]


#: a JSON member whose value is an array of byte values (``"MESSAGE":[27,91,51,50,109,…]``, as
#: journalctl writes a field that is not printable UTF-8); JSON's whitespace only (``int`` takes no other)
_BYTE_ARRAY = re.compile(r'("[A-Za-z_][A-Za-z0-9_]{0,63}"[ \t\r]{0,4}:[ \t\r]{0,4})\[((?:[ \t\r]{0,4}[0-9]{1,3}[ \t\r]{0,4},)'
                         r'{0,1000000}[ \t\r]{0,4}[0-9]{1,3}[ \t\r]{0,4})\]')


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
    hidden, _ = redact_line(raw)
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
    return HIDDEN + (redact_line(tail)[0] if tail else "") + line[end:], start


def _inside_strings(line: str, depth: int) -> str:
    """``line`` with each double-quoted string that holds an escape or a ``=``, or is a JSON
    member's value (a command inside a JSON or C string: ``{"cmd": "sshpass -p \\"a b\\" ssh"}``;
    a log line in a JSON string: ``{"log":"token=X\\n"}``, ``{"MESSAGE":"redis-cli -a X ping"}``;
    ``"Env":["DB_PASSWORD=X"]``) filtered as the text it stands for, and written back escaped as
    it was; strings inside those too, ``_QUOTED_DEPTH`` deep."""
    if depth >= _QUOTED_DEPTH or not _string_inside(line):
        return line

    def one(literal: str, member: bool) -> str:
        if "\\" not in literal and not any(secret_name(m.group(1)) for m in _PAIR_NAME.finditer(literal)) and not (
                member and _SECRETISH.search(literal)):
            return literal  # "PATH=/usr/bin": no escape, no name of a secret before a "=", no word like one
        try:
            text, as_json = json.loads(literal), True
        except ValueError:
            text, as_json = literal[1:-1].replace('\\"', '"').replace("\\u0022", '"').replace("\\u0027", "'") \
                .replace("\\\\", "\\"), False
        if not isinstance(text, str):
            return literal
        if "\x1b" in text:  # a coloured line, its escapes written as \u001b: read as it shows
            text = _TERMINAL_ESCAPE.sub("", text)
        shown = _redact_text(text, audit=False, depth=depth + 1)
        if shown == text:
            return literal
        if as_json:
            return json.dumps(shown, ensure_ascii=False)
        return '"' + shown.replace("\\", "\\\\").replace('"', '\\"') + '"'

    for parity in (0, 1):  # a stray quote before the string pairs the quotes the other way: both ways
        out, at = [], 0
        for start, end, member in _quoted_spans(line, line.find('"') + 1 if parity else 0):
            out += [line[at:start], one(line[start:end], member)]
            at = end
        line = "".join(out) + line[at:]
    return line


#: a name before a "=" inside a string (``"DB_PASSWORD=X"``, ``"a=1&token=X"``)
_PAIR_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]{0,127})=")
#: what makes a JSON member's value worth reading as text: a word a credential is named or passed by
_SECRETISH = re.compile(r"(?i)pass|pwd|token|secret|auth|bearer|key|cred|sig|login|mysql|[ \t]-[a-z]{0,3}[pwa]")


def _string_inside(text: str) -> bool:
    """Whether ``text`` may hold a double-quoted string :func:`_inside_strings` reads: a quote,
    and a backslash, a ``=`` or a JSON member's ``":``."""
    return '"' in text and ("\\" in text or "=" in text or '":' in text)


def _escaped_quote(text: str) -> bool:
    """Whether ``text`` holds a quote escaped inside a string: ``\\"``, or JSON's ``\\u0022`` or ``\\u0027``."""
    return '\\"' in text or "\\u0022" in text or "\\u0027" in text


def _quoted_spans(line: str, i: int = 0) -> Iterator[tuple[int, int, bool]]:
    """``(start, end, member)`` of each double-quoted string of ``line`` from index ``i`` on that
    is a JSON member's value (after a ``:``: ``member`` True), or holds an escape (a backslash), or
    a ``=`` and no whitespace (``"DB_PASSWORD=X"`` of a JSON list: a quoted value holding a space,
    ``-e "PASSWORD=a b"``, is the line's own to read), left to right (a backslash escapes the next
    character; an unclosed string ends the search: each character is read once)."""
    while (start := line.find('"', i)) != -1:
        string = _DOUBLE_QUOTED.match(line, start)
        if string is None:
            return
        end = i = string.end()
        body = line[start + 1:end - 1]
        member = line[max(0, start - 4):start].rstrip().endswith(":")
        if member or "\\" in body or ("=" in body and not _WHITESPACE.search(body)):
            yield start, end, member


#: a double-quoted string (a backslash escapes the next character), and whitespace
_DOUBLE_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_WHITESPACE = re.compile(r"\s")


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
    glued_lines = 0  # how many lines in a row went on inside their last word
    continued_lines = 0  # how many lines in a row went on on the next line
    command = ""  # the line above, as checked
    in_quote = ""  # the quote of a hidden value the line above ended in (see _continued)
    for line in text.split("\n"):
        if '"' in line and "[" in line and ":" in line:  # journalctl -o json: a message with a control character is bytes
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
            hidden, _, _ = hide_value(value.group(2).rstrip())
            out.append(value.group(1) + hidden)
            continue
        if named_above and (element := _XML_VALUE_LINE.match(line)):
            named_above = False
            out.append(element.group(1) + HIDDEN + element.group(3))
            continue
        named = _NAME_LINE.match(line) if "name" in line else None
        named_above = named is not None and secret_name(named.group(1) or named.group(2))
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
        if ":" in line and (block := _YAML_BLOCK_KEY.match(line)) and secret_name(block.group(2)):
            block_indent, block_lines = len(block.group(1)), 0
            out.append(line)  # "password: |": the value is on the lines after it
            continue
        if "<" in line and (element := _XML_OPEN_LINE.match(line)) and secret_name(element.group(1)):
            xml_close, block_lines = f"</{element.group(1)}>", 0
        if audit and "=" in line and (decoded := _audit_line(line, events, pieced)) is not None:
            out.append(decoded)
            continue
        history = _ZSH_HISTORY.match(line) if line.startswith(": ") else None
        command = history.group(2) if history else line
        carried = ""  # the quote a value from the line above is still in at this line's end
        if carry:  # - --db-password / - X
            command, carried = value_first(command)
        if _string_inside(command):  # a command or a log line inside a JSON (or C) string
            command = _inside_strings(command, depth)
        shown, value_below = redact_line(command)
        # this line goes on with the command above it (a YAML list's "- X" is an item of its own)
        if above and not command.lstrip().startswith("- "):
            shown, in_quote = _continued(above, command, shown, in_quote)
        else:
            in_quote = ""
        in_quote = in_quote or (carried if carried in ("'", '"') else "")
        if before is not None:  # the line above went on inside its last word: glued to it, as the shell reads it
            shown, start = _glued(before, command, shown)
            if start is not None and out and out[-1] == prev_command:  # it began on the line above: hidden there too
                out[-1] = prev_command[:max(0, start - (len(before) - len(prev_command) + 1))] + HIDDEN + "\\"
        if (goes_on := _CONTINUES.search(command)) is not None:
            continued_lines = continued_lines + 1 if above else 1
            if continued_lines <= _GLUED_LINES:
                continued = [(above[0] if above else command)[:_CONTINUED_CHARS], command[-_CONTINUED_CHARS:]]
            else:  # a long run of them: the last words of the line before are the context
                tail = _last_words(command, 2)[-_GLUED_LINES:]
                continued = [tail, tail]
            if goes_on.start() == 0 or not command[goes_on.start() - 1].isspace():  # inside its last word
                glued_lines = glued_lines + 1 if before is not None else 1
                cap = _CONTINUED_CHARS if glued_lines <= _GLUED_LINES else _GLUED_LINES
                glued = _last_words((before or "") + command[:goes_on.start()], _GLUED_WORDS)[-cap:]
        out.append(history.group(1) + shown if history else shown)
    return "\n".join(out)
