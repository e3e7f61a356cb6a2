"""The marketplace service (docs/architecture.md §14) used by the HTTP API and CLI."""

from __future__ import annotations

from ongridd.marketplace.agents_api import AgentsAPI
from ongridd.marketplace.install import MarketplaceService

__all__ = ["AgentsAPI", "MarketplaceService"]
