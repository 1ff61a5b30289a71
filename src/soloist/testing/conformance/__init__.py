"""The store conformance suite: the behaviour every store must show, as tests.

Every store (memory, SQLite, PostgreSQL, Redis, ...) runs these same tests unchanged. A
store's test module subclasses :class:`StoreConformance` and provides one fixture,
``make_store``: a factory ``(clock) -> Store``. Within one test every call returns a handle
on the *same* backing store (a new connection where the store has connections, the same
object for ``memory://``), and that backing store is fresh and isolated from other tests
(a new file, schema or key prefix per test)::

    from soloist.testing.conformance import StoreConformance, StoreFactory

    class TestSQLiteStore(StoreConformance):
        @pytest.fixture
        def make_store(self, tmp_path: Path) -> StoreFactory:
            url = f"sqlite:///{tmp_path / 'soloist.db'}"
            return lambda clock: SQLiteStore(url, clock=clock)

The suite gives each test a ``clock`` (a :class:`~soloist.testing.FakeClock` at :data:`T0`),
a migrated ``store`` and a second handle ``store2`` on the same backing store; all are
closed afterwards. No test sleeps: time moves with the fake clock, or ``now=`` is passed
where that reads more clearly. The tests are grouped by area in the modules of this package.

Needs pytest and pytest-asyncio (``asyncio_mode = "auto"``).
"""

from __future__ import annotations

from soloist.testing.conformance.attempts import AttemptConformance
from soloist.testing.conformance.backfill import BackfillConformance
from soloist.testing.conformance.base import (
    T0,
    TTL,
    ConformanceBase,
    StoreFactory,
    at,
    claim,
    new_occurrence,
)
from soloist.testing.conformance.cancellation import CancelConformance
from soloist.testing.conformance.checks import CheckConformance
from soloist.testing.conformance.claims import ClaimConformance, work_wait
from soloist.testing.conformance.counts import CountConformance
from soloist.testing.conformance.election import ElectionConformance
from soloist.testing.conformance.history import HistoryConformance, LatestOutcomeConformance
from soloist.testing.conformance.instances import InstanceConformance, instance_info
from soloist.testing.conformance.job_pages import JobPageConformance
from soloist.testing.conformance.jobs import JobConformance
from soloist.testing.conformance.leases import LeaseConformance
from soloist.testing.conformance.occurrences import OccurrenceConformance
from soloist.testing.conformance.planning import PlanningConformance

__all__ = [
    "T0",
    "TTL",
    "LatestOutcomeConformance",
    "StoreConformance",
    "StoreFactory",
    "at",
    "claim",
    "instance_info",
    "new_occurrence",
    "work_wait",
]


class StoreConformance(
    OccurrenceConformance,
    ClaimConformance,
    LeaseConformance,
    CancelConformance,
    AttemptConformance,
    CountConformance,
    HistoryConformance,
    JobConformance,
    JobPageConformance,
    PlanningConformance,
    BackfillConformance,
    ElectionConformance,
    InstanceConformance,
    CheckConformance,
    ConformanceBase,
):
    """Every conformance test. Subclass as ``Test<Name>Store`` and define ``make_store``."""
