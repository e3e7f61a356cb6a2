"""Fixtures of the marketplace tests (helpers in mp_helpers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mp_helpers import MARKETPLACE, Env, clean_plugins, make_config, write_index

from ongridd.marketplace.install import MarketplaceService
from ongridd.plugins.build import RegistryBuilder
from ongridd.runtime.registries import RegistryHolder
from ongridd.store import open_store


@pytest.fixture
async def env(tmp_path: Path):
    """A fresh service with its own state dir and index (see :class:`Env`)."""
    config = make_config(tmp_path)
    async with open_store(config.database_url) as store:
        builder = RegistryBuilder(config=config, store=store)
        holder = RegistryHolder(await builder.build())
        index = tmp_path / "market" / "index.yaml"
        write_index(index, [])
        service = MarketplaceService(config=config, holder=holder, builder=builder, store=store, index_path=index)
        try:
            yield Env(config=config, store=store, holder=holder, builder=builder, service=service,
                      index=index, tmp=tmp_path)
        finally:
            clean_plugins(service.plugins_root)


@pytest.fixture(scope="session")
def example_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one state dir every test installing the real example packages uses."""
    return tmp_path_factory.mktemp("examples") / "var"


@pytest.fixture
async def example_env(tmp_path: Path, example_state_dir: Path):
    """A service over the repository's own marketplace index."""
    config = make_config(tmp_path, example_state_dir)
    clean_plugins(example_state_dir / "plugins")
    async with open_store(config.database_url) as store:
        builder = RegistryBuilder(config=config, store=store)
        holder = RegistryHolder(await builder.build())
        service = MarketplaceService(config=config, holder=holder, builder=builder, store=store,
                                     index_path=MARKETPLACE / "index.yaml")
        try:
            yield Env(config=config, store=store, holder=holder, builder=builder, service=service,
                      index=MARKETPLACE / "index.yaml", tmp=tmp_path)
        finally:
            clean_plugins(service.plugins_root)


@pytest.fixture
def quick_gil_handover():
    # The lookups spin while the reload thread does file I/O; with the default
    # 5 ms switch interval every I/O call of the reload waits that long for the GIL.
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    yield
    sys.setswitchinterval(old)
