"""Plugin system (pluggy project ``ongrid``): hookspecs, manager, public API."""
