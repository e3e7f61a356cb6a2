"""A test plugin whose personas hook registers a path that does not exist."""

from ongridd.plugins.api import hookimpl


@hookimpl
def ongrid_register_personas(register):
    register("/nonexistent/agents")
