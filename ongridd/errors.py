"""The one exception hierarchy of Ongrid, named by meaning.

Control flow (a stop, a redirect, a review rejection shown to the model) is
not signalled with these; they are for conditions a caller must handle or
report.  Every message says what was wrong, where, and what to do.
"""

from __future__ import annotations


class OngridError(Exception):
    """Base class of every error Ongrid raises on purpose."""


class ConfigError(OngridError):
    """The configuration is invalid.  The message names field paths
    (``invalid value for type, expected int @ config.llm.timeout_s``) and
    never contains a secret value."""


class PersonaError(OngridError):
    """A persona file cannot be used.  ``path`` and ``line`` locate it;
    ``warnings``: every warning the parser gave (``path:line: ...``), empty
    when the refusal came before parsing; ``too_large``: refused for its size
    (HTTP answers 413 then, else 400)."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 warnings: tuple[str, ...] | list[str] = (), too_large: bool = False):
        super().__init__(message)
        self.path = path
        self.line = line
        self.warnings = tuple(warnings)
        self.too_large = too_large


class ToolError(OngridError):
    """A tool could not do what was asked (bad query, unreachable server,
    refused command).  Raised by tool handlers; the kernel turns it into an
    error result the model can read (audit status ``error``)."""


class ToolArgumentsError(ToolError):
    """Arguments from the model are not valid JSON, not an object, or do not
    match the tool's JSON schema."""


class ToolTimeout(ToolError):
    """A tool ran past its ``timeout_s`` (audit status ``timeout``)."""


class ToolRegistrationError(OngridError):
    """A tool (or stub, persona, skill) offered by a plugin is invalid."""


class ProviderError(OngridError):
    """The model provider failed after the retries allowed.

    ``status`` is the HTTP status when there was one; ``retryable`` tells
    whether the failure kind is one that retries could help (429/5xx/timeout).
    """

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class Busy(OngridError):
    """The daemon cannot take another turn now: every slot runs and the
    queue of waiting turns is full (``limits.max_queued_turns``), or it is
    shutting down.  Nothing was run or stored; the client may retry."""


class StoreError(OngridError):
    """The database is unreachable, locked, or refused an operation."""


class NotFound(OngridError):
    """A session, task, persona or other object does not exist (or belongs
    to another user, which callers must not be able to tell apart)."""


class TaskStateError(OngridError):
    """An operation does not fit a task's state, e.g. stopping a worker that
    already ended (``W1 is not running (completed)``)."""


class PluginError(OngridError):
    """A plugin failed to import or to register."""


class MarketplaceError(OngridError):
    """A marketplace install or uninstall failed; nothing was changed."""


class AuthError(OngridError):
    """A client presented no valid credentials."""


class Forbidden(OngridError):
    """An authenticated client asked for what only an admin may do (``server.admins``)."""


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    """The non-group exceptions inside ``exc`` (itself when it is not a group).

    Start-up errors surface from a Trio nursery wrapped in (nested)
    exception groups; callers look for the one that says what went wrong.
    """
    if not isinstance(exc, BaseExceptionGroup):
        return [exc]
    out: list[BaseException] = []
    for inner in exc.exceptions:
        out.extend(leaf_exceptions(inner))
    return out
