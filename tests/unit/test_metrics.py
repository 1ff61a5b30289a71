"""Prometheus metrics: own registry per scheduler, counters moved by the runtime, store
counts cached at scrape time, the text format readable by Prometheus' parser, and labels
bounded whatever the number of dynamic schedules."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from prometheus_client.parser import text_string_to_metric_families

from soloist import Scheduler, every
from soloist.errors import ConfigError, StoreError
from soloist.metrics import AGGREGATED, Metrics
from soloist.models import Kind, NewOccurrence, OccurrenceCounts, State
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
    for app in (a, b):
        app.task(name="job")(lambda ctx: None)
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


# -- bounded labels -------------------------------------------------------------------------------
def job_labels(samples: Samples) -> set[str]:
    return {value for (_, pairs) in samples for key, value in pairs if key == "job"}


def test_only_code_defined_jobs_and_metrics_jobs_keep_their_label() -> None:
    """Runs of dynamic schedules share job="(dynamic)"; a job or task defined in code (also
    after the scheduler was made) and a name in metrics_jobs keep their own label."""
    app = Scheduler("memory://", metrics_jobs="kept, also-kept")
    m = app.metrics
    app.task(name="send")(lambda ctx: None)
    app.job(every("1h"), name="nightly")(lambda ctx: None)
    for job in ("nightly", "send", "kept", "report-1", "report-2", "report-3"):
        m.run_finished(job, "succeeded", 0.1)
    m.run_started("report-4", 0.2)
    m.lease_stolen("report-5")
    samples = parse(m)
    assert job_labels(samples) == {"nightly", "send", "kept", AGGREGATED}
    assert value(samples, "soloist_runs_total", job=AGGREGATED, outcome="succeeded") == 3
    assert value(samples, "soloist_runs_total", job="kept", outcome="succeeded") == 1
    assert value(samples, "soloist_lateness_seconds_count", job=AGGREGATED) == 1
    assert value(samples, "soloist_lease_steals_total", job=AGGREGATED) == 1
    # The executor's per-run lookup: one set of children for all of them.
    assert m.job("report-1") is m.job("report-99") is m.job(AGGREGATED)


def test_store_counts_of_other_jobs_are_summed_by_state() -> None:
    """soloist_occurrences keeps the jobs that have a label and sums the others under
    job="(dynamic)", state by state."""
    m = Metrics("i", "distributed", defined={"nightly"}, keep=["kept"])
    m.counts = OccurrenceCounts(
        by_job_state={
            ("nightly", State.SUCCEEDED): 4,
            ("kept", State.SCHEDULED): 1,
            ("report-1", State.SCHEDULED): 1,
            ("report-2", State.SCHEDULED): 1,
            ("report-2", State.DEAD): 2,
        },
        due=0,
    )
    samples = parse(m)
    got = {
        dict(pairs)["job"] + "/" + dict(pairs)["state"]: n
        for (name, pairs), n in samples.items()
        if name == "soloist_occurrences"
    }
    assert got == {
        "nightly/succeeded": 4,
        "kept/scheduled": 1,
        f"{AGGREGATED}/scheduled": 2,
        f"{AGGREGATED}/dead": 2,
    }


def test_the_exposition_does_not_grow_with_dynamic_schedules() -> None:
    """10,000 dynamic schedules that all ran and all hold occurrences give the same
    series as 10 (the text differs only in digits), far under 200 KB."""

    def text(count: int) -> bytes:
        m = Metrics("i", "distributed", defined={"nightly"})
        pairs: dict[tuple[str, State], int] = {("nightly", State.SUCCEEDED): 1}
        for i in range(count):
            m.run_started(f"report-{i}", 0.3)
            m.run_finished(f"report-{i}", "succeeded" if i % 2 else "failed", 0.02)
            pairs[(f"report-{i}", State.SCHEDULED)] = 1
        m.counts = OccurrenceCounts(by_job_state=pairs, due=count)
        return m.exposition()

    few, many = text(10), text(10_000)
    assert len(many) < 200_000
    assert abs(len(many) - len(few)) < 500, (len(few), len(many))


def test_reconfigured_metrics_keep_the_labelling() -> None:
    """The metrics made again by reconfigure (a new instance id) label as before."""
    app = Scheduler("memory://", metrics_jobs=["kept"])
    app.task(name="send")(lambda ctx: None)
    app.reconfigure(instance_id="renamed")
    for job in ("send", "kept", "report-1"):
        app.metrics.run_finished(job, "succeeded", 0.1)
    assert job_labels(parse(app.metrics)) == {"send", "kept", AGGREGATED}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (5, "invalid metrics_jobs 5: expected job names"),
        (["ok", ""], r"invalid metrics_jobs \['ok', ''\]: '' is not a job name"),
        ("a,b\x01c", r"'b\\x01c' is not a job name"),
        ([f"r-{i}" for i in range(101)], "101 names, expected at most 100"),
    ],
)
def test_a_bad_metrics_jobs_is_refused_naming_it(given: object, expected: str) -> None:
    """metrics_jobs takes printable names (a list, or separated by commas), at most 100."""
    with pytest.raises(ConfigError, match=expected):
        Scheduler("memory://", metrics_jobs=given)  # type: ignore[arg-type]


async def test_the_store_is_asked_for_the_labelled_jobs_only() -> None:
    """refresh_counts asks the store for the labelled jobs' pairs and the others by state
    (``jobs=``), and soloist_occurrences shows the others under job="(dynamic)"."""
    app = Scheduler("memory://", metrics_jobs=["kept"])
    app.task(name="t")(lambda ctx: None)
    store = await app.astore()
    for job in ("t", "kept", "report-1", "report-2"):
        await store.occurrence_insert(
            NewOccurrence(f"k-{job}", job, "t", "", T0, T0, Kind.SCHEDULE)
        )
    await app.metrics.refresh_counts(store)
    read = app.metrics.counts
    assert read is not None and read.others == {State.SCHEDULED: 2}
    assert set(read.by_job_state) == {("t", State.SCHEDULED), ("kept", State.SCHEDULED)}
    samples = parse(app.metrics)
    assert value(samples, "soloist_occurrences", job=AGGREGATED, state="scheduled") == 2
    assert value(samples, "soloist_occurrences", job="kept", state="scheduled") == 1
    await app.aclose()
