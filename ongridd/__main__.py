"""``python -m ongridd ...`` runs the daemon CLI (same as ``ongridd``)."""

from ongridd.cli import ongridd_main

ongridd_main()
