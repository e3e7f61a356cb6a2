"""Shared test helpers.

Tests that need a real server (PostgreSQL, Prometheus, Alertmanager, sshd)
call :func:`need` — on a developer machine without the server they skip
with the reason; in CI (``CI=true``) a missing server is a failure.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Make the first-party plugin packages importable when running from a checkout.
for p in (str(ROOT), str(ROOT / "plugins")):
    if p not in sys.path:
        sys.path.insert(0, p)


def need(condition: bool, reason: str) -> None:
    """Skip (developer machine) or fail (CI) when ``condition`` is false."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)
