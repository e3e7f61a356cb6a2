"""``openssl x509``: the one ``openssl`` shape ``host_bash`` runs read-only.

    openssl x509 -in FILE [-inform PEM|DER] [PRINT OPTION ...]

is rebuilt as ``openssl x509 -noout`` followed by the options in the order
given.  It prints a certificate's fields — when it expires (``-enddate``,
``-dates``, ``-checkend SECONDS``), whom it names (``-subject``, ``-ext
subjectAltName``), who signed it, its fingerprint, the whole ``-text`` —
and never a private key: given a key, a password file or anything else that
is not a certificate it prints ``Could not read certificate`` and none of
the file.  That is why its ``-in`` file is checked with the ``certificate``
role (:meth:`ongrid_host.path_policy.PathPolicy.certificate_problem`): the
folders and names of TLS material (``/etc/letsencrypt``, ``*.pem``,
``privkey*``) are allowed, every other forbidden area still is not.

Every other word is off the table, a ``write`` proposal: another ``openssl``
command, an option that writes (``-out``), signs (``-signkey``, ``-CA``),
reads a key or a password (``-key``, ``-passin``), loads code (``-engine``,
``-provider``) or reads standard input (no ``-in``); ``--opt`` and
``-opt=value`` spellings too (the rebuilt command uses none of them).
"""

from __future__ import annotations

import re

from ongrid_host.optspec import REFUSED, WRITE, Refusal

#: options that print a field and take no value
PRINT_FLAGS = frozenset({
    "-text", "-dates", "-startdate", "-enddate", "-subject", "-issuer", "-serial", "-fingerprint", "-hash",
    "-subject_hash", "-issuer_hash", "-ocspid", "-ocsp_uri", "-email", "-purpose", "-pubkey", "-modulus",
    "-sha1", "-sha256", "-sha384", "-sha512", "-noout",
})
_NAMES = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_,+-]*")
#: options with a value: the check of the value and what it should look like
VALUE_OPTIONS: dict[str, tuple[re.Pattern[str], str]] = {
    "-inform": (re.compile(r"PEM|DER|pem|der"), "PEM or DER"),
    "-checkend": (re.compile(r"[0-9]{1,10}"), "seconds, such as 2592000"),
    "-ext": (_NAMES, "extension names, such as subjectAltName,keyUsage"),
    "-nameopt": (_NAMES, "name options, such as RFC2253 or oneline"),
    "-certopt": (_NAMES, "certificate options, such as no_pubkey,no_sigdump"),
    "-dateopt": (re.compile(r"rfc_822|iso_8601"), "rfc_822 or iso_8601"),
}
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
SHAPE = "openssl x509 -in FILE [-inform PEM|DER] [-noout -enddate -dates -subject -issuer -ext NAMES -text …]"


def parse_openssl(args: list[str]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    """(canonical argv, [(certificate file, "certificate")]) for ``openssl ARGS``.

    Raises :class:`~ongrid_host.optspec.Refusal`: ``write`` for anything off
    the shape in the module docstring, ``refused`` for an ``-in`` value that
    is not a file path (standard input, an option, a URI)."""
    if not args or args[0] != "x509":
        sub = args[0] if args else ""
        raise Refusal(WRITE, f"openssl: only 'openssl x509' is read-only (it prints a certificate's fields), not "
                             f"{('openssl ' + sub)!r}; shape: {SHAPE}")
    out = ["openssl", "x509", "-noout"]
    source: str | None = None
    words = args[1:]
    i = 0
    while i < len(words):
        word = words[i]
        if word in PRINT_FLAGS:
            if word != "-noout":
                out.append(word)
            i += 1
            continue
        if word != "-in" and word not in VALUE_OPTIONS:
            raise Refusal(WRITE, f"openssl x509: '{word}' is not a read-only option (it may write, sign, read a key "
                                 f"or run code, or is spelled otherwise); shape: {SHAPE}")
        if i + 1 >= len(words):
            raise Refusal(REFUSED, f"openssl x509: {word} needs a value")
        value = words[i + 1]
        if word == "-in":
            if source is not None:
                raise Refusal(REFUSED, "openssl x509: -in given twice")
            if not value or value.startswith("-") or ("/" not in value.split(":", 1)[0] and _SCHEME.match(value)):
                raise Refusal(REFUSED, f"openssl x509: -in {value!r}: name a certificate file by its path (not "
                                       "standard input, an option or a URI)")
            source = value
        else:
            check, what = VALUE_OPTIONS[word]
            if not check.fullmatch(value):
                raise Refusal(REFUSED, f"openssl x509: {word} {value!r}: expected {what}")
        out += [word, value]
        i += 2
    if source is None:
        raise Refusal(REFUSED, f"openssl x509: name the certificate with -in FILE (it would read standard input); "
                               f"shape: {SHAPE}")
    return tuple(out), [(source, "certificate")]
