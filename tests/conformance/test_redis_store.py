"""The store conformance suite on ``redis://`` (a fresh key prefix per test)."""

from __future__ import annotations

import pytest

from soloist.clock import Clock
from soloist.stores.base import Store
from soloist.stores.redis import RedisStore
from soloist.testing.conformance import StoreConformance, StoreFactory


class TestRedisStore(StoreConformance):
    @pytest.fixture
    def make_store(self, redis_url: str) -> StoreFactory:
        # Every handle is a new store (its own connections) on the test's key prefix.
        def make(clock: Clock) -> Store:
            return RedisStore(redis_url, clock=clock)

        return make
