"""Identity and auth (docs/architecture.md §15.3).

Tokens are ``user:token`` pairs from the environment variable the config
names.  With no tokens, only loopback clients are accepted and everyone is
user ``local``.  Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Sequence

import attrs

from ongridd.errors import AuthError, ConfigError, Forbidden

LOCAL_USER = "local"
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def is_loopback(host: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if not host:
        return False
    if host in _LOOPBACK_NAMES:  # the usual spellings, without parsing an address each connection
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@attrs.frozen(repr=False)
class Authenticator:
    """Maps a presented token to a user name.

    ``tokens``: ``{token: user}`` (never shown in repr); ``admins``: the
    users who may change what the assistant is (personas, plugins), or None
    for every user.
    """

    tokens: dict[str, str] = attrs.field(factory=dict)
    admins: frozenset[str] | None = None

    def __repr__(self) -> str:
        return f"Authenticator(users={sorted(set(self.tokens.values()))})"

    @property
    def open_mode(self) -> bool:
        """No tokens configured: loopback clients only, user ``local``."""
        return not self.tokens

    def check_listen(self, host: str, tokens_env: str = "ONGRID_TOKENS") -> None:
        """Refuse a non-loopback listen address without tokens (ConfigError naming ``tokens_env``,
        the variable ``server.tokens_env`` names)."""
        if self.open_mode and not is_loopback(host):
            raise ConfigError(
                f"refusing to listen on {host}: no tokens are configured, so only a loopback address is "
                f"allowed; set user:token pairs in the environment variable {tokens_env} (server.tokens_env), "
                f"e.g. {tokens_env}=alice:$(openssl rand -hex 16)"
            )

    def check_admins(self) -> None:
        """Refuse ``server.admins`` naming a user who has no token (ConfigError: a misspelt name
        would leave nobody able to change personas or plugins, silently)."""
        if self.admins is None or self.open_mode:
            return
        users = set(self.tokens.values())
        unknown = sorted(self.admins - users)
        if unknown:
            raise ConfigError(f"server.admins: {', '.join(map(repr, unknown))} {'has' if len(unknown) == 1 else 'have'} "
                              f"no token (users with tokens: {', '.join(sorted(users))})")

    def is_admin(self, user: str) -> bool:
        """Whether ``user`` may change personas and plugins: every user when ``admins`` is None
        or no tokens are configured (the only user is ``local``)."""
        return self.admins is None or self.open_mode or user in self.admins

    def require_admin(self, user: str, what: str) -> None:
        """Raise Forbidden unless ``user`` :meth:`is_admin` (``what``: the action, for the message)."""
        if not self.is_admin(user):
            raise Forbidden(f"{what} is for admins; user {user!r} is not one of server.admins")

    def authenticate(self, token: str | None, remote_addr: str | None) -> str:
        """The user for this token/address; raises AuthError."""
        if self.open_mode:
            if is_loopback(remote_addr):
                return LOCAL_USER
            raise AuthError("only loopback clients are accepted when no tokens are configured")
        if not token:
            raise AuthError("a token is required")
        found = None
        for known, user in self.tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = user
        if found is None:
            raise AuthError("invalid token")
        return found


def bearer_token(header: str | None) -> str | None:
    """``"Bearer abc"`` → ``"abc"``; anything else → None."""
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


#: a ``Host`` header as browsers send it: a bracketed IPv6 address or a name (letters, digits,
#: dots, hyphens), then an optional port; nothing else (checked on the lower-cased value)
_HOST = re.compile(r"(?:\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::[0-9]{1,5})?")
#: an ``Origin`` header (RFC 6454): scheme "://" host, no path, query or user info
_ORIGIN = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*)://(?P<host>[^/?#@\s]+)")


def origin_problem(hosts: Sequence[str], origins: Sequence[str], *, open_mode: bool) -> str | None:
    """Why a browser must not drive the daemon with this request, or None.

    ``hosts`` and ``origins``: every value of the request's ``Host`` and
    ``Origin`` headers (empty when absent).  Refused: more than one ``Host``
    or ``Origin``; a ``Host`` that is not a host name or address with an
    optional port; a cross-site page (an ``Origin`` that is not an
    ``http``/``https`` origin of the request's host and port — either scheme,
    since a proxy that terminates TLS keeps the ``Host`` — or ``null``); and, with
    no tokens configured (``open_mode``), a missing ``Host`` or a
    DNS-rebinding name (a ``Host`` that is not a loopback name).  CLIs send
    no ``Origin`` and pass."""
    if len(hosts) > 1 or len(origins) > 1:
        return "more than one Host or Origin header"
    host = hosts[0].strip().lower() if hosts else ""
    if host and not _HOST.fullmatch(host):
        return f"Host {host[:100]!r} is not a host name or address with an optional port"
    if open_mode:
        name = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1:host.index("]")]
        if not is_loopback(name):
            return (f"Host {host[:100]!r} is not a loopback name; with no tokens configured the daemon answers "
                    "only requests addressed to 127.0.0.1, localhost or [::1]")
    if origins:
        origin = origins[0].strip()
        match = _ORIGIN.fullmatch(origin.lower())
        if match is None or match["scheme"] not in ("http", "https") or match["host"] != host:
            return f"cross-origin request from {origin[:100]!r} refused"
    return None
