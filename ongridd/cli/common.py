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


def add_client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=None,
                   help=f"daemon base URL (default $ONGRID_URL, else {DEFAULT_URL}); ws://HOST:PORT/ws is accepted")
    p.add_argument("--token", default=None, help="API token (default $ONGRID_TOKEN)")


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


def token(arg: str | None) -> str | None:
    return arg or os.environ.get("ONGRID_TOKEN") or None


def http_json(method: str, args: argparse.Namespace, path: str, body: Any = None, timeout_s: float = 600) -> Any:
    """Call the daemon; returns the JSON body.  Raises ClientError on
    connection problems and RuntimeError(message) on an HTTP error."""
    import httpx2

    headers = {}
    tok = token(getattr(args, "token", None))
    if tok:
        headers["Authorization"] = f"Bearer {tok}"
    url = base_url(getattr(args, "url", None)) + path
    try:
        with httpx2.Client(timeout=timeout_s) as client:
            resp = client.request(method, url, headers=headers, json=body)
    except httpx2.HTTPError as exc:
        raise ClientError(f"cannot reach the daemon at {url}: {exc}") from None
    try:
        data = resp.json()
    except ValueError:
        data = {"error": {"message": resp.text[:500]}}
    if resp.status_code >= 400:
        err = data.get("error") if isinstance(data, dict) else None
        msg = err.get("message") if isinstance(err, dict) else str(data)
        raise RuntimeError(f"HTTP {resp.status_code}: {msg}")
    return data


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2, default=str) + "\n")
