"""The pruner service: who prunes, to which bounds, and how it paces a backlog."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from soloist.models import Outcome, State
from soloist.runtime.pruner import Pruner
from soloist.runtime.service import ServiceBundle
from soloist.stores.core import CheckedStore, checked
from soloist.stores.memory import MemoryStore
from soloist.stores.urls import Retention
from soloist.testing import FakeClock
from soloist.testing.conformance import T0, new_occurrence


async def store_with_history(count: int, retention: Retention | None) -> CheckedStore:
    """A memory store holding ``count`` finished occurrences of job ``j``, one per
    minute from T0, its clock a day later; with ``retention`` as its URL's bounds."""
    store = checked(MemoryStore(clock=FakeClock(T0 + timedelta(days=1))))
    if retention is not None:
        store.driver.retention = retention  # type: ignore[attr-defined]
    for n in range(count):
        at = T0 + timedelta(minutes=n)
        await store.occurrence_insert(new_occurrence(f"k{n}", job="j", due_at=at))
        (run,) = await store.occurrence_claim("i", ["task"], 1, timedelta(60), now=at)
        done = Outcome(run.id, run.fencing_token, State.SUCCEEDED)
        await store.occurrence_complete("i", [done], now=at)
    return store


async def left(store: CheckedStore) -> int:
    return len(await store.occurrence_list(limit=1000))


async def test_only_the_active_instance_prunes_to_the_stores_bounds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A follower's tick deletes nothing; the leader's deletes what is beyond
    history_max in batches, pausing briefly while a batch comes back full, then waits
    the interval and logs the pass once."""
    store = await store_with_history(12, Retention(history_max=5, history_age=None))
    leader = False
    pruner = Pruner(
        ServiceBundle(FakeClock(T0), "i"), store, lambda: leader, interval=60, batch=4, pause=0.1
    )
    assert await pruner.tick() == 60 and await left(store) == 12
    leader = True
    with caplog.at_level(logging.INFO, logger="soloist"):
        assert await pruner.tick() == 0.1  # a full batch: more may be due
        assert await left(store) == 8
        assert await pruner.tick() == 60  # the last 3: done until the next pass
    assert await left(store) == 5 and pruner.pruned_total == 7
    passes = [r for r in caplog.records if getattr(r, "action", None) == "prune"]
    assert [r.getMessage() for r in passes] == [
        "pruned 7 finished occurrence(s) from the history (history_max=5, history_age=None)"
    ]


async def test_age_bound_is_read_on_the_stores_clock(caplog: pytest.LogCaptureFixture) -> None:
    """history_age counts back from the store's now (a day after the rows here), not
    the pruner's clock; the newest finished occurrence of the job stays. Routine
    trimming (less than a batch) logs at DEBUG only."""
    store = await store_with_history(3, Retention(history_max=0, history_age=timedelta(hours=1)))
    pruner = Pruner(ServiceBundle(FakeClock(T0), "i"), store, lambda: True, interval=60)
    with caplog.at_level(logging.DEBUG, logger="soloist"):
        assert await pruner.tick() == 60
    assert [o.dedupe_key for o in await store.occurrence_list()] == ["k2"]
    passes = [r for r in caplog.records if getattr(r, "action", None) == "prune"]
    assert [r.levelno for r in passes] == [logging.DEBUG]


async def test_a_store_without_bounds_is_left_alone() -> None:
    """No retention (memory), or both bounds 0: nothing is ever deleted."""
    for retention in (None, Retention(history_max=0, history_age=None)):
        store = await store_with_history(3, retention)
        pruner = Pruner(ServiceBundle(FakeClock(T0), "i"), store, lambda: True, interval=60)
        assert await pruner.tick() == 60 and await left(store) == 3
