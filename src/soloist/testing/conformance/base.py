"""Fixtures and helpers shared by the conformance tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from soloist.clock import Clock
from soloist.models import DEFAULT_MAX_CRASHES, Kind, NewOccurrence, Occurrence, Overlap
from soloist.stores.base import Store
from soloist.stores.core import checked
from soloist.testing.clock import FakeClock

#: Makes a handle on the test's backing store, reading time from the given clock.
StoreFactory = Callable[[Clock], Store]

#: Where every test's clock starts.
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
#: The lease time to live used by the tests unless they say otherwise.
TTL = timedelta(seconds=30)


def at(seconds: float) -> datetime:
    """The instant ``seconds`` after :data:`T0`."""
    return T0 + timedelta(seconds=seconds)


def new_occurrence(
    key: str,
    *,
    job: str = "job",
    task: str = "task",
    scope: str = "",
    plan_time: datetime | None = None,
    due_at: datetime = T0,
    kind: Kind = Kind.SCHEDULE,
    max_attempts: int = 1,
    overlap: Overlap = Overlap.ALLOW,
    payload: dict[str, Any] | None = None,
    max_crashes: int = DEFAULT_MAX_CRASHES,
) -> NewOccurrence:
    """A NewOccurrence with test defaults (due at T0, planned at its due time)."""
    return NewOccurrence(
        dedupe_key=key,
        job=job,
        task=task,
        scope=scope,
        plan_time=plan_time if plan_time is not None else due_at,
        due_at=due_at,
        kind=kind,
        max_attempts=max_attempts,
        overlap=overlap,
        payload=payload if payload is not None else {},
        max_crashes=max_crashes,
    )


async def claim(
    store: Store,
    *,
    instance: str = "i1",
    tasks: Collection[str] = ("task",),
    limit: int = 100,
    ttl: timedelta = TTL,
    now: datetime | None = None,
    allow_only: bool = False,
) -> list[Occurrence]:
    """``store.occurrence_claim`` with test defaults."""
    return await store.occurrence_claim(instance, tasks, limit, ttl, now=now, allow_only=allow_only)


async def insert(store: Store, *items: NewOccurrence) -> list[Occurrence]:
    """Insert ``items``; return the stored rows in order."""
    return [(await store.occurrence_insert(item))[0] for item in items]


class ConformanceBase:
    """The fixtures. A subclass must define ``make_store`` (see the package docstring)."""

    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock(T0)

    @pytest.fixture
    async def store(self, make_store: StoreFactory, clock: FakeClock) -> AsyncIterator[Store]:
        """The store under test, behind the core's checks as soloist always uses it."""
        store = checked(make_store(clock))
        await store.migrate()
        try:
            yield store
        finally:
            await store.close()

    @pytest.fixture
    async def store2(
        self, make_store: StoreFactory, clock: FakeClock, store: Store
    ) -> AsyncIterator[Store]:
        """A second handle on the same backing store (another instance, another process)."""
        other = checked(make_store(clock))
        await other.migrate()
        try:
            yield other
        finally:
            await other.close()
