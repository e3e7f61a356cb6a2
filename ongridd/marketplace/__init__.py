"""Changing the running daemon's plugins and personas: the marketplace,
user-agent editing and hot reload (docs/architecture.md §6, §14)."""
