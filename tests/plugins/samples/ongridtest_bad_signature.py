"""A test plugin whose hook takes an argument the spec does not have."""

from ongridd.plugins.api import hookimpl


@hookimpl
def ongrid_register_tools(register, context, store):
    pass
