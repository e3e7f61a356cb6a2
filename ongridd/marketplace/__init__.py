"""Changing the running daemon's plugins and personas: the marketplace,
user-agent editing and hot reload (DESIGN.md §6, §14)."""
