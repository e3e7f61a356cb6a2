"""Process limits a server raises for itself (stdlib only)."""

from __future__ import annotations


def open_files_limit() -> int:
    """The soft limit on open files (``RLIMIT_NOFILE``); -1 when unknown."""
    try:
        import resource

        return int(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    except (ImportError, OSError, ValueError):
        return -1


def raise_open_files_limit() -> int:
    """Raise the soft limit on open files to the hard limit, as Go programs
    do on start: every client, model and database connection is a file
    descriptor, and the usual soft limit of 1,024 is reached below a thousand
    sessions.  Returns the soft limit now in force (unchanged when it cannot
    be raised; -1 when unknown)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY:
            hard = 1 << 20
        if soft == resource.RLIM_INFINITY or soft >= hard:
            return int(soft)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return int(hard)
    except (ImportError, OSError, ValueError):
        return open_files_limit()


__all__ = ["open_files_limit", "raise_open_files_limit"]
