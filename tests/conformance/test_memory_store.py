"""The store conformance suite on ``memory://``."""

from __future__ import annotations

import pytest

from soloist.clock import Clock
from soloist.stores import CheckedStore, open_store
from soloist.stores.base import Store
from soloist.stores.memory import MemoryStore
from soloist.testing.conformance import (
    LatestOutcomeConformance,
    StoreConformance,
    StoreFactory,
)


class TestMemoryStore(StoreConformance, LatestOutcomeConformance):
    @pytest.fixture
    def make_store(self) -> StoreFactory:
        # One process, one dict: every handle of a test is the same store object.
        shared: list[Store] = []

        def make(clock: Clock) -> Store:
            if not shared:
                shared.append(MemoryStore("memory://", clock=clock))
            return shared[0]

        return make


def test_open_store_selects_the_memory_store() -> None:
    """open_store('memory://') returns a MemoryStore behind the core's checks."""
    store = open_store("memory://")
    assert isinstance(store, CheckedStore) and store.url == "memory://"
    assert isinstance(store.driver, MemoryStore) and store.capabilities.reach == "process"
