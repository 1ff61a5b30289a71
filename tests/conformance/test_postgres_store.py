"""The store conformance suite on ``postgresql://`` (a fresh schema per test)."""

from __future__ import annotations

import pytest

from soloist.clock import Clock
from soloist.stores.base import Store
from soloist.stores.postgres import PostgresStore
from soloist.testing.conformance import (
    LatestOutcomeConformance,
    StoreConformance,
    StoreFactory,
)


class TestPostgresStore(StoreConformance, LatestOutcomeConformance):
    @pytest.fixture
    def make_store(self, postgres_url: str) -> StoreFactory:
        # Every handle is a new store (its own pool) on the test's schema.
        def make(clock: Clock) -> Store:
            return PostgresStore(postgres_url, clock=clock)

        return make
