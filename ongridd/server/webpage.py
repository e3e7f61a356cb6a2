"""The web console's assets (``GET /`` and ``GET /static/<name>``), read from the installed package.

The console is three files in ``ongridd/server/static`` — ``index.html``,
``app.js``, ``app.css`` — plain JavaScript and CSS with no build step and
nothing fetched from elsewhere at run time.  Only those names are served
(an allowlist; any other name is None → 404).  Every response carries
:data:`CONSOLE_HEADERS`: a Content-Security-Policy that forbids inline and
remote script, inline style, remote images, framing by other sites, plus
``nosniff`` and no referrer.
"""

from __future__ import annotations

import functools
from importlib import resources

#: name → content type of every asset served
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; "
       "object-src 'none'")

CONSOLE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


@functools.cache
def _read(name: str) -> bytes:
    return resources.files("ongridd.server").joinpath("static", name).read_bytes()


def console_asset(name: str) -> tuple[bytes, str] | None:
    """``(body, content type)`` of an asset, or None for a name not in :data:`ASSETS`.

    Raises OSError when the package was installed without its assets.
    """
    content_type = ASSETS.get(name)
    if content_type is None:
        return None
    return _read(name), content_type


__all__ = ["ASSETS", "CONSOLE_HEADERS", "CSP", "console_asset"]
