"""Loading the built-in plugins does not import libraries only a tool call needs.

networkx (the topology graph) and cryptography (TLS certificates, Feishu
payload decryption) take a noticeable share of the daemon's start-up when
imported at plugin load; they are imported when a graph is built, a
certificate parsed or a payload decrypted.
"""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("networkx", "cryptography")


def test_importing_the_plugins_leaves_the_heavy_libraries_unimported():
    code = ("import sys\n"
            "import ongrid_topology, ongrid_topology.tools, ongrid_host, ongrid_host.tools, "
            "ongrid_host.http_probe, ongrid_feishu, ongrid_feishu.bridge\n"
            f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules) or '-')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["-"], out.stderr
