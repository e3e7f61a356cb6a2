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

from ongridd.credfilter.names import HIDDEN, REDACTED_NOTE
from ongridd.credfilter.text import redact_credentials

__all__ = ["HIDDEN", "REDACTED_NOTE", "redact_credentials"]
