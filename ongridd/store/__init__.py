"""Persistence (docs/architecture.md §12): SQLAlchemy 2 sync engine, used from Trio via threads.

Public API::

    from ongridd.store import Store, open_store, RecoveryReport

    async with open_store("sqlite:////var/lib/ongrid/ongrid.db") as store:
        report = await store.recovery_sweep()
        row, created = await store.get_or_create_coordinator("alice", "main")

See :mod:`ongridd.store.store` for every method, :mod:`ongridd.store.writer`
for the long-lived writer the runtime hands its writes to, and
:mod:`ongridd.store.recovery` for the startup sweep.
"""

from ongridd.store.incidents import PluginStoreImpl
from ongridd.store.recovery import RecoveryReport
from ongridd.store.store import Store, open_store
from ongridd.store.writer import PendingWrite, StoreWriter, running_writer

__all__ = ["PendingWrite", "PluginStoreImpl", "RecoveryReport", "Store", "StoreWriter", "open_store",
           "running_writer"]
