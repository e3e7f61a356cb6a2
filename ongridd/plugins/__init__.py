"""Plugin system (pluggy project ``ongrid``): hookspecs, manager, public API."""

#: the paths the daemon serves itself, exactly, and the folders whose every path it serves: a plugin
#: route there would never run, and it must not lend a daemon route an open route's exemptions (no
#: origin check); ``/api/plugins/<plugin>/…`` stays free for plugins
DAEMON_PATHS = ("/", "/healthz", "/readyz", "/metrics", "/ws", "/api/me", "/api/plugins", "/api/agents-skipped")
DAEMON_FOLDERS = ("/static", "/api/sessions", "/api/agents", "/api/marketplace")


def daemon_path(path: str) -> bool:
    """True when the daemon serves ``path`` itself: one of :data:`DAEMON_PATHS`, or one of
    :data:`DAEMON_FOLDERS` or below it (compared without a trailing slash and in any case)."""
    bare = path.rstrip("/").lower() or "/"
    return bare in DAEMON_PATHS or any(bare == p or bare.startswith(p + "/") for p in DAEMON_FOLDERS)
