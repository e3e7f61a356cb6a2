"""Persistence (DESIGN.md §12): SQLAlchemy 2 sync engine, used from Trio via threads.

Public API::

    from ongridd.store import Store, open_store, RecoveryReport

    async with open_store("sqlite:////var/lib/ongrid/ongrid.db") as store:
        report = await store.recovery_sweep()
        row, created = await store.get_or_create_coordinator("alice", "main")

See :mod:`ongridd.store.store` for every method and :mod:`ongridd.store.recovery`
for the startup sweep.
"""

from ongridd.store.incidents import PluginStoreImpl
from ongridd.store.recovery import RecoveryReport
from ongridd.store.store import Store, open_store

__all__ = ["PluginStoreImpl", "RecoveryReport", "Store", "open_store"]
