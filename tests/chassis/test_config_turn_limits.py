"""The turn-limit keys of ``limits`` (docs/architecture.md §4 Load, §15.2)."""

from __future__ import annotations

import pytest

from ongridd.config import load_config, structure
from ongridd.errors import ConfigError


def test_defaults() -> None:
    limits = structure({}).limits
    assert (limits.max_concurrent_turns, limits.max_turns_per_user, limits.max_queued_turns) == (64, 4, 256)
    limits = structure({"limits": {"max_concurrent_turns": 8, "max_turns_per_user": 1,
                                   "max_queued_turns": 0}}).limits
    assert (limits.max_concurrent_turns, limits.max_turns_per_user, limits.max_queued_turns) == (8, 1, 0)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("limits:\n  max_concurrent_turns: 0\n", "must be >= 1 @ config.limits.max_concurrent_turns"),
        ("limits:\n  max_turns_per_user: -2\n", "must be >= 1 @ config.limits.max_turns_per_user"),
        ("limits:\n  max_queued_turns: -1\n", "must be >= 0 @ config.limits.max_queued_turns"),
        ("limits:\n  max_turns_per_user: 2.5\n", "expected integer @ config.limits.max_turns_per_user"),
        ("limits:\n  max_queued_turns: '10'\n", "expected integer @ config.limits.max_queued_turns"),
        ("limits:\n  max_concurrent_turns: true\n", "expected integer @ config.limits.max_concurrent_turns"),
        ("llm:\n  max_retries: 1000000\n", "must be between 0 and 20 @ config.llm.max_retries"),
        ("retention:\n  days: 1.0e+10\n", "at most 36500"),
    ],
)
def test_bad_values_are_refused_with_the_path(tmp_path, text: str, expected: str) -> None:
    path = tmp_path / "ongrid.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert expected in str(info.value) and str(path) in str(info.value)
