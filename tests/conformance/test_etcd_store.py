"""The store conformance suite on ``etcd://`` (a fresh key prefix per test)."""

from __future__ import annotations

import pytest

from soloist.clock import Clock
from soloist.stores import open_store
from soloist.stores.base import Store
from soloist.stores.etcd import EtcdStore
from soloist.testing.conformance import StoreConformance, StoreFactory


class TestEtcdStore(StoreConformance):
    @pytest.fixture
    def make_store(self, etcd_url: str) -> StoreFactory:
        # Every handle is a new store (its own connections) on the test's key prefix.
        def make(clock: Clock) -> Store:
            return EtcdStore(etcd_url, clock=clock)

        return make


@pytest.mark.parametrize(
    "url",
    [
        "etcd://127.0.0.1:2379",
        "etcd://127.0.0.1:2379/?prefix=billing",
        # TLS verified against the system's CAs: no certificate file for the store to read.
        "etcds://127.0.0.1:2379?prefix=billing",
    ],
)
def test_open_store_selects_the_etcd_store(url: str) -> None:
    """open_store picks EtcdStore, behind the core's checks, for etcd:// and etcds:// URLs
    (opening connects to nothing)."""
    store = open_store(url)
    assert isinstance(store.driver, EtcdStore) and store.url == url
