"""A test plugin that fails at import."""

raise RuntimeError("this plugin cannot be imported: missing libfoo")
