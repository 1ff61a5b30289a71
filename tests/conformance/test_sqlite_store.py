"""The store conformance suite on ``sqlite:///`` (a fresh file per test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from soloist.clock import Clock
from soloist.stores.base import Store
from soloist.stores.sqlite import SQLiteStore
from soloist.testing.conformance import (
    LatestOutcomeConformance,
    StoreConformance,
    StoreFactory,
)


class TestSQLiteStore(StoreConformance, LatestOutcomeConformance):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> StoreFactory:
        # Absolute path: "sqlite:///" + "/tmp/..." is the four-slash absolute form.
        url = f"sqlite:///{tmp_path / 'soloist.db'}"

        def make(clock: Clock) -> Store:
            return SQLiteStore(url, clock=clock)

        return make
