"""Secrets a plugin reads from a documented default variable name.

The daemon takes every variable the configuration names (``*_env``
settings) out of its environment at start-up and redacts its value
everywhere (:mod:`ongridd.secretset`).  A bridge whose settings leave a
secret's ``*_env`` out reads the platform's default name instead
(``SLACK_BOT_TOKEN``…); :func:`adopt_secret` gives that variable the same
treatment when it is first read: removed from ``os.environ`` (children never
inherit it), remembered for later reads, and held for redaction for the
rest of the process — or, when shorter than ``MIN_SECRET_CHARS``, refused
as the configured ones are at start-up.
"""

from __future__ import annotations

import contextlib
import os
import threading

from ongridd.logs import get_logger
from ongridd.secretset import MIN_SECRET_CHARS, REGISTRY, ShortSecretError, too_short_message

log = get_logger(__name__)

_lock = threading.Lock()
_adopted: dict[str, contextlib.ExitStack] = {}
#: variables whose value was refused as too short: their length (the value itself is not kept)
_refused: dict[str, int] = {}


def adopt_secret(env_name: str) -> str | None:
    """The value of ``env_name`` (or the one remembered after start-up took
    it out of the environment), now redacted everywhere; None when unset.
    Raises ShortSecretError (a ConfigError naming the variable, never the value) when the value
    is shorter than ``MIN_SECRET_CHARS``, as start-up does for the configured variables: it
    is taken out of the environment but neither held nor returned, then or later."""
    with _lock:
        if env_name in _refused:
            raise ShortSecretError(too_short_message(f"the secret in ${env_name}", _refused[env_name]))
        value = REGISTRY.remembered(env_name)
        if value:
            return value
        value = os.environ.pop(env_name, None)
        if not value:
            return None
        if len(value.strip()) < MIN_SECRET_CHARS:
            _refused[env_name] = len(value.strip())
            raise ShortSecretError(too_short_message(f"the secret in ${env_name}", _refused[env_name]))
        REGISTRY.remember(env_name, value)
        stack = contextlib.ExitStack()
        stack.enter_context(REGISTRY.hold([value]))
        _adopted[env_name] = stack
    # start-up's secrets_removed_from_environment named the configured
    # variables; this one is read (and removed) later, by a plugin
    log.info("plugin_secret_removed_from_environment", variables=[env_name])
    return value
