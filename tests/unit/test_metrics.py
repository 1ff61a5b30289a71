"""Prometheus metrics: own registry per scheduler, counters moved by the runtime, store
counts cached at scrape time, and the text format readable by Prometheus' parser."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from prometheus_client.parser import text_string_to_metric_families

from soloist import Scheduler, every
from soloist.errors import StoreError
from soloist.metrics import Metrics
from soloist.models import OccurrenceCounts
from soloist.runtime import Runtime
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(metrics: Metrics) -> Samples:
    """Every sample of the exposition, through the Prometheus text parser."""
    text = metrics.exposition().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_two_schedulers_keep_separate_registries() -> None:
    """Two schedulers in one process register the same metric names without clashing."""
    a = Scheduler("memory://", instance_id="a")
    b = Scheduler("memory://", instance_id="b")
    a.metrics.run_finished("job", "succeeded", 0.1)
    assert value(parse(a.metrics), "soloist_runs_total", job="job", outcome="succeeded") == 1
    assert value(parse(b.metrics), "soloist_runs_total", job="job", outcome="succeeded") is None
    assert value(parse(b.metrics), "soloist_instance_info", instance_id="b", mode="distributed")
    assert (
        value(parse(a.metrics), "soloist_instance_info", instance_id="b", mode="distributed")
        is None
    )


def test_runs_retries_and_durations_are_counted_per_job() -> None:
    """run_finished counts the outcome, observes the duration, and a failure is a retry."""
    m = Metrics("i", "leader")
    m.run_finished("a", "succeeded", 0.02)
    m.run_finished("a", "failed", 1.5)
    m.run_finished("a", "dead", 3.0)
    m.run_finished("b", "released")
    samples = parse(m)
    for outcome, count in (("succeeded", 1), ("failed", 1), ("dead", 1), ("fenced", 0)):
        assert value(samples, "soloist_runs_total", job="a", outcome=outcome) == count
    assert value(samples, "soloist_runs_total", job="b", outcome="released") == 1
    assert value(samples, "soloist_retries_total", job="a") == 1
    assert value(samples, "soloist_run_duration_seconds_count", job="a") == 3
    assert value(samples, "soloist_run_duration_seconds_sum", job="a") == pytest.approx(4.52)
    assert value(samples, "soloist_run_duration_seconds_bucket", job="a", le="0.025") == 1
    assert value(samples, "soloist_run_duration_seconds_count", job="b") == 0


def test_children_are_made_once_per_job() -> None:
    """The executor's per-run lookup returns the same cached children every time."""
    m = Metrics("i", "distributed")
    assert m.job("x") is m.job("x")
    assert m.job("x").outcomes["succeeded"] is m.job("x").outcomes["succeeded"]


def test_leadership_store_errors_and_steals() -> None:
    """Leadership sets the gauge and counts each change; store errors count by operation."""
    m = Metrics("i", "leader")
    assert value(parse(m), "soloist_is_leader") == 0
    m.leadership(True)
    assert value(parse(m), "soloist_is_leader") == 1
    m.leadership(False)
    m.store_error("planner")
    m.store_error("planner")
    m.lease_stolen("j")
    samples = parse(m)
    assert value(samples, "soloist_is_leader") == 0
    assert value(samples, "soloist_leader_changes_total") == 2
    assert value(samples, "soloist_store_errors_total", operation="planner") == 2
    assert value(samples, "soloist_lease_steals_total", job="j") == 1


async def test_store_counts_are_read_at_scrape_and_cached() -> None:
    """Occurrence counts and queue depth come from the store, re-read only when stale."""
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    app = Scheduler(store, instance_id="i", clock=clock)
    app.task(name="t")(lambda ctx: None)
    m = app.metrics
    assert value(parse(m), "soloist_queue_depth") is None  # never read: nothing said
    await app.aenqueue("t")
    await app.aenqueue("t", delay="1h")
    await m.refresh_counts(store)
    samples = parse(m)
    assert value(samples, "soloist_occurrences", job="t", state="scheduled") == 2
    assert value(samples, "soloist_queue_depth") == 1
    await app.aenqueue("t")
    await m.refresh_counts(store)  # younger than 5 s: the cached reading stays
    assert value(parse(m), "soloist_queue_depth") == 1
    await m.refresh_counts(store, max_age=0)
    assert value(parse(m), "soloist_queue_depth") == 2
    assert value(parse(m), "soloist_occurrences", job="t", state="scheduled") == 3


class FailingCounts(MemoryStore):
    """A memory store whose counting fails, as an unreachable server would."""

    async def occurrence_counts(self, now: datetime | None = None) -> OccurrenceCounts:
        raise StoreError("store down")


async def test_a_failed_count_keeps_the_last_reading_and_is_counted() -> None:
    """If the store cannot count, the last reading is served and a store error counted."""
    m = Metrics("i", "distributed")
    good = MemoryStore()
    await m.refresh_counts(good)
    await m.refresh_counts(FailingCounts(), max_age=0)
    samples = parse(m)
    assert value(samples, "soloist_queue_depth") == 0
    assert value(samples, "soloist_store_errors_total", operation="occurrence_counts") == 1


async def test_runtime_counts_runs_retries_and_lateness() -> None:
    """A real runtime on the memory store moves runs, retries, durations and lateness."""
    app = Scheduler("memory://", instance_id="r", poll_interval="50ms", lease_ttl="3s")
    done = asyncio.Event()
    calls = 0

    @app.task(retries=1, backoff="fixed", backoff_base="10ms")
    def shaky(ctx: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("first attempt fails")
        done.set()

    app.job(every("1h"), name="hourly")(lambda ctx: None)
    await app.start()
    try:
        assert isinstance(app.runtime, Runtime) and app.runtime.metrics is app.metrics
        await app.aenqueue("shaky")
        await asyncio.wait_for(done.wait(), 10)

        async def recorded() -> None:
            while (
                value(parse(app.metrics), "soloist_runs_total", job="shaky", outcome="succeeded")
                != 1
            ):
                await asyncio.sleep(0.01)

        await asyncio.wait_for(recorded(), 10)
        samples = parse(app.metrics)
        assert value(samples, "soloist_runs_total", job="shaky", outcome="failed") == 1
        assert value(samples, "soloist_retries_total", job="shaky") == 1
        assert value(samples, "soloist_run_duration_seconds_count", job="shaky") == 2
        # Lateness is observed for first attempts only.
        assert value(samples, "soloist_lateness_seconds_count", job="shaky") == 1
        late = value(samples, "soloist_lateness_seconds_sum", job="shaky")
        assert late is not None and 0 <= late < timedelta(seconds=5).total_seconds()
        assert value(samples, "soloist_is_leader") == 1
        assert value(samples, "soloist_leader_changes_total") == 1
    finally:
        await app.stop()
    samples = parse(app.metrics)
    assert value(samples, "soloist_is_leader") == 0  # resigned on stop
    assert value(samples, "soloist_leader_changes_total") == 2
