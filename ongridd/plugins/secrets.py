"""Secrets a plugin reads from a documented default variable name.

The daemon takes every variable the configuration names (``*_env``
settings) out of its environment at start-up and redacts its value
everywhere (:mod:`ongridd.secretset`).  A bridge whose settings leave a
secret's ``*_env`` out reads the platform's default name instead
(``SLACK_BOT_TOKEN``…); :func:`adopt_secret` gives that variable the same
treatment when it is first read: removed from ``os.environ`` (children never
inherit it), remembered for later reads, and held for redaction for the
rest of the process.
"""

from __future__ import annotations

import contextlib
import os
import threading

from ongridd.logs import get_logger
from ongridd.secretset import REGISTRY

log = get_logger(__name__)

_lock = threading.Lock()
_adopted: dict[str, contextlib.ExitStack] = {}


def adopt_secret(env_name: str) -> str | None:
    """The value of ``env_name`` (or the one remembered after start-up took
    it out of the environment), now redacted everywhere; None when unset."""
    with _lock:
        value = REGISTRY.remembered(env_name)
        if value:
            return value
        value = os.environ.pop(env_name, None)
        if not value:
            return None
        REGISTRY.remember(env_name, value)
        stack = contextlib.ExitStack()
        stack.enter_context(REGISTRY.hold([value]))
        _adopted[env_name] = stack
    # start-up's secrets_removed_from_environment named the configured
    # variables; this one is read (and removed) later, by a plugin
    log.info("plugin_secret_removed_from_environment", variables=[env_name])
    return value
