"""Shared pieces of the client commands: daemon URL, token, HTTP calls."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any
from urllib.parse import urlsplit, urlunsplit

DEFAULT_URL = "http://127.0.0.1:8650"


class ClientError(Exception):
    """A usage or connection problem (exit code 2)."""


TOKEN_HELP = ("API token. Prefer $ONGRID_TOKEN or --token-file: a token on the command line is visible "
              "to every local user in `ps` output and /proc/<pid>/cmdline (and kept in shell history). "
              "Precedence: --token > --token-file > $ONGRID_TOKEN")
TOKEN_FILE_HELP = "read the API token from the first line of FILE (keep it mode 0600)"
TOKEN_WARNING = ("ongrid: warning: --token shows the token to every local user in `ps` output and "
                 "/proc/<pid>/cmdline; set $ONGRID_TOKEN or use --token-file instead")


def add_client_args(p: argparse.ArgumentParser, *, top_level: bool = False) -> None:
    """Add ``--url``, ``--token`` and ``--token-file`` to ``p``.

    They are global options: the top-level parser gets them with ``None``
    defaults (``top_level=True``) and every client sub-command gets them
    with suppressed defaults, so ``ongrid --url U ask …`` and ``ongrid ask
    --url U …`` both work and a sub-command never overwrites a value given
    before it."""
    default = None if top_level else argparse.SUPPRESS
    p.add_argument("--url", default=default,
                   help=f"daemon base URL (default $ONGRID_URL, else {DEFAULT_URL}); ws://HOST:PORT/ws is accepted")
    p.add_argument("--token", default=default, metavar="TOKEN", help=TOKEN_HELP)
    p.add_argument("--token-file", default=default, metavar="FILE", help=TOKEN_FILE_HELP)


def base_url(arg: str | None) -> str:
    """The daemon's HTTP base URL from ``--url`` / ``$ONGRID_URL``."""
    url = arg or os.environ.get("ONGRID_URL") or DEFAULT_URL
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
        raise ClientError(f"--url must look like http://HOST:PORT or ws://HOST:PORT/ws, got {url!r}")
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    path = parts.path.rstrip("/")
    if path.endswith("/ws"):
        path = path[:-3]
    return urlunsplit((scheme, parts.netloc, path, "", ""))


def ws_url(arg: str | None) -> str:
    """The chat socket URL (``ws://HOST:PORT/ws``)."""
    base = urlsplit(base_url(arg))
    scheme = "wss" if base.scheme == "https" else "ws"
    return urlunsplit((scheme, base.netloc, base.path.rstrip("/") + "/ws", "", ""))


def token(args: argparse.Namespace, *, stderr: Any = None, environ: Any = None) -> str | None:
    """The API token: ``--token`` (with a warning on ``stderr`` that it shows
    in ``ps``) > ``--token-file`` (its first line, stripped) >
    ``$ONGRID_TOKEN`` > None.  Resolved once per ``args`` (the warning is
    printed once).  Raises ClientError when the token file cannot be read
    or its first line is empty."""
    if hasattr(args, "_resolved_token"):
        return args._resolved_token
    env = os.environ if environ is None else environ
    given = getattr(args, "token", None)
    path = getattr(args, "token_file", None)
    if given:
        print(TOKEN_WARNING, file=stderr or sys.stderr)
        value: str | None = given
    elif path:
        value = read_token_file(path)
    else:
        value = env.get("ONGRID_TOKEN") or None
    args._resolved_token = value
    return value


def read_token_file(path: str) -> str:
    """The first line of ``path`` without surrounding whitespace.  Raises
    ClientError naming the file (never its content)."""
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline(64 * 1024)
    except (OSError, UnicodeDecodeError) as exc:
        raise ClientError(f"cannot read the token file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    value = first.strip()
    if not value:
        raise ClientError(f"the token file {path} is empty (the token goes on its first line)")
    return value


def refused(exc: RuntimeError) -> bool:
    """Whether :func:`http_json`'s error is the daemon refusing the caller: HTTP 401 (no
    valid token) or 403 (not allowed) — commands exit 2 for it, as for a usage error."""
    text = str(exc)
    return text.startswith(("HTTP 401", "HTTP 403"))


def http_json(method: str, args: argparse.Namespace, path: str, body: Any = None, timeout_s: float = 600) -> Any:
    """Call the daemon; returns the JSON body.  Raises ClientError on
    connection problems and RuntimeError(message) on an HTTP error."""
    import httpx2

    headers = {}
    tok = token(args)
    if tok:
        headers["Authorization"] = f"Bearer {tok}"
    url = base_url(getattr(args, "url", None)) + path
    try:
        with httpx2.Client(timeout=timeout_s) as client:
            resp = client.request(method, url, headers=headers, json=body)
    except httpx2.HTTPError as exc:
        from ongridd.cli.reach import describe_http_error

        raise ClientError(describe_http_error(url, exc)) from None
    try:
        data = resp.json()
    except ValueError:
        kind = resp.headers.get("content-type", "").split(";")[0].strip() or "no content type"
        raise ClientError(f"{urlsplit(url).netloc} is not an Ongrid daemon: {method} {urlsplit(url).path} answered "
                          f"HTTP {resp.status_code} ({kind}), not JSON; point --url or ONGRID_URL at the "
                          "daemon's address") from None
    if resp.status_code >= 400:
        err = data.get("error") if isinstance(data, dict) else None
        msg = str(err.get("message") or err) if isinstance(err, dict) else str(data)
        if resp.status_code == 401:
            msg += (" (pass --token-file FILE or set $ONGRID_TOKEN)" if not tok
                    else " (check the token given by --token, --token-file or $ONGRID_TOKEN)")
        raise RuntimeError(f"HTTP {resp.status_code}: {msg}")
    return data


def print_json(value: Any) -> None:
    """``value`` as indented JSON on stdout, with what ``ensure_ascii=False`` leaves raw and a
    terminal acts on or cannot take (C1 and bidi controls, line separators, unpaired surrogates)
    escaped (``\\u009b``), as :func:`~ongridd.cli.termui.json_line` does: the same JSON."""
    from ongridd.cli.termui import escape_controls

    sys.stdout.write(escape_controls(json.dumps(value, ensure_ascii=False, indent=2, default=str)) + "\n")
