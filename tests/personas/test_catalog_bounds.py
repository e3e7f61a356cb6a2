"""The catalog budget is a hard bound, and bounded YAML gives the same data and errors on both paths."""

from __future__ import annotations

import pytest

from ongridd import yamlbounds
from ongridd.personas import Persona, agent_catalog
from ongridd.personas.frontmatter import FrontmatterProblem, parse


def _personas(n: int, desc_len: int) -> list[Persona]:
    return [Persona(name=f"p-{i:05d}", description="d" * desc_len, when_to_use="w " * 100, body="b")
            for i in range(n)]


@pytest.mark.parametrize("n,desc_len,budget", [(500, 150, 16_000), (3000, 40, 16_000), (40, 300, 2_000),
                                               (200, 10, 500), (2, 50, 60)])
def test_catalog_never_exceeds_its_budget_and_counts_every_persona(n, desc_len, budget):
    catalog = agent_catalog(_personas(n, desc_len), budget=budget)
    assert len(catalog) <= budget
    lines = catalog.split("\n")
    more = int(lines[-1].split()[2]) if lines[-1].startswith("… and ") else 0
    listed = len(lines) - (1 if more else 0)
    assert listed + more == n  # listed (in full or by name) + counted = all
    assert lines[-1 if not more else -2].startswith("- **")


@pytest.mark.parametrize("body", [
    "name: a\n\tdescription: tab\n",
    "name: a: b\n",
    "a: " + "[" * 200 + "\n",
    "a: &a [*a]\n",
    "".join(f"k{i}: v\n" for i in range(6000)),
])
def test_malformed_frontmatter_gives_the_same_warning_on_both_paths(body, monkeypatch):
    raw = f"---\n{body}---\nbody\n"
    fast = parse(raw)
    monkeypatch.setattr(yamlbounds, "_CParser", None)
    pure = parse(raw)
    assert isinstance(fast, FrontmatterProblem)
    assert fast == pure
