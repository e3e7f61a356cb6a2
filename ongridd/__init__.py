"""Ongrid daemon: a multi-agent operations assistant on Trio.

The package is layered (see docs/architecture.md §3); a module may import only the layers
listed before it: errors/values → config → personas, skills, tools, llm →
kernel → store, runtime → plugins, marketplace → server → daemon, cli.
"""

__version__ = "0.1.0"
