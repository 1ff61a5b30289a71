"""Backfill and upcoming fire times (soloist.timeline) on a fake clock and the memory
store; the same backfill on every real store is in the conformance suite."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone

import pytest
from ticks import plan_tick, started

from soloist import ConfigError, Scheduler, cron, every
from soloist.errors import UnknownJobError
from soloist.models import JobRecord, Overlap, State
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock
from soloist.timeline import MAX_BACKFILL, upcoming

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
HOUR = timedelta(hours=1)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore("memory://", clock=clock)


def make_app(clock: FakeClock, store: MemoryStore, **options: object) -> Scheduler:
    return Scheduler(store, instance_id="a", clock=clock, lease_ttl="9s", **options)  # type: ignore[arg-type]


# -- backfill -----------------------------------------------------------------------------------


async def test_backfill_of_a_skip_job_queues_its_instants_in_order(
    clock: FakeClock, store: MemoryStore
) -> None:
    """Backfilled instants of an overlap='skip' job queue (none is skipped by another),
    carry the job's payload-free run, and a date-only start means midnight UTC."""
    app = make_app(clock, store)
    app.job(cron("0 6 * * *"), name="daily")(lambda ctx: None)
    done = await app.abackfill("daily", "2026-02-25", T0)
    assert (done.instants, done.added) == (5, 5)
    rows = await store.occurrence_list(job="daily", limit=10)
    assert sorted(o.plan_time for o in rows)[0] == datetime(2026, 2, 25, 6, tzinfo=timezone.utc)
    assert sorted(o.plan_time for o in rows)[-1] == datetime(2026, 3, 1, 6, tzinfo=timezone.utc)
    assert {o.overlap for o in rows} == {Overlap.QUEUE}
    assert done.to_json()["existing"] == 0


async def test_backfill_of_an_allow_job_runs_its_instants_one_after_another(
    clock: FakeClock, store: MemoryStore
) -> None:
    """An overlap='allow' job's backfilled instants queue too, as the docs promise: a
    worker with free slots starts the oldest only, not all of them at once."""
    app = make_app(clock, store, concurrency=10)
    app.job(every("1h"), name="hourly", overlap="allow")(lambda ctx: time.sleep(0.2))
    runtime = await started(app)
    done = await app.abackfill("hourly", T0 - 2 * HOUR, T0 - HOUR)
    assert (done.instants, done.added) == (2, 2)
    await runtime.executor.tick()
    running = [o for o in await store.occurrence_list(job="hourly") if o.state is State.RUNNING]
    assert [o.plan_time for o in running] == [T0 - 2 * HOUR]
    tasks = [r.task for r in runtime.executor.active.values() if r.task is not None]
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)


async def test_backfill_of_a_scoped_job_covers_each_scope(
    clock: FakeClock, store: MemoryStore
) -> None:
    """A job with a scope provider is backfilled for each scope it provides, or for the
    scopes given."""
    app = make_app(clock, store)
    app.job(every("1h"), name="per", scopes=lambda now: ["eu", "us"])(lambda ctx: None)
    done = await app.abackfill("per", T0 - 2 * HOUR, T0)
    assert (done.scopes, done.instants, done.added) == (("eu", "us"), 6, 6)
    only = await app.abackfill("per", T0 - 3 * HOUR, T0, scopes=["eu"])
    assert (only.instants, only.added) == (4, 1)
    rows = await store.occurrence_list(job="per", limit=100)
    assert sorted((o.scope, o.plan_time) for o in rows)[0] == ("eu", T0 - 3 * HOUR)


async def test_backfill_refuses_scopes_for_a_job_without_any(
    clock: FakeClock, store: MemoryStore
) -> None:
    """Scopes given for a job that has none (no scope provider in code, or a dynamic
    schedule) are refused naming them: its runs would see a scope the job never has."""
    app = make_app(clock, store)
    app.job(every("1h"), name="plain")(lambda ctx: None)
    app.task(name="work")(lambda ctx: None)
    await app.schedules.aadd("dyn", task="work", schedule=every("1h"))
    for job in ("plain", "dyn"):
        with pytest.raises(ConfigError, match=rf"\['eu'\] for job '{job}'"):
            await app.abackfill(job, T0 - HOUR, T0, scopes=["eu"])
    assert await store.occurrence_list(limit=10) == []
    done = await app.abackfill("plain", T0 - HOUR, T0, scopes=[""])
    assert (done.instants, done.added) == (2, 2)


async def test_backfill_without_the_code_refuses_a_job_with_scopes_unless_named(
    clock: FakeClock, store: MemoryStore
) -> None:
    """A process that does not define a job (the CLI) cannot ask its scope provider: a
    code-defined job with no stream without a scope is refused, unless scopes are given."""
    record = JobRecord(
        "per",
        "per",
        {"schedule": every("1h").to_dict(), "max_attempts": 2, "catch_up": "latest"},
    )
    await store.job_upsert([record])
    cli = make_app(clock, store)
    with pytest.raises(ConfigError, match="name its scopes"):
        await cli.abackfill("per", T0 - HOUR, T0)
    done = await cli.abackfill("per", T0 - HOUR, T0, scopes=["eu"])
    assert (done.instants, done.added) == (2, 2)
    rows = await store.occurrence_list(job="per")
    assert {(o.scope, o.max_attempts) for o in rows} == {("eu", 2)}


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (T0, T0 + HOUR, "invalid end '2026-03-01T13:00:00+00:00': it is in the future"),
        (T0, T0 - HOUR, "must not be before start"),
        ("yesterday", T0, "invalid start 'yesterday'"),
        ("2026-02-01T00:00:00", T0, "no UTC offset"),
        (None, T0, "needs both start and end"),
        (T0 - timedelta(days=30), T0, f"more than {MAX_BACKFILL} instants"),
        (datetime.min.replace(tzinfo=timezone.utc), T0, "expected a time from 1970-01-01"),
    ],
)
async def test_bad_backfill_ranges_are_refused_and_write_nothing(
    clock: FakeClock, store: MemoryStore, start: object, end: object, message: str
) -> None:
    """A range in the future, reversed, unreadable, open, too dense or starting before
    1970 (year 1 would overflow) raises ConfigError naming it, and nothing is written."""
    app = make_app(clock, store)
    app.job(every("1m"), name="minutely")(lambda ctx: None)
    with pytest.raises(ConfigError, match=message.replace("+", r"\+")):
        await app.abackfill("minutely", start, end)
    assert await store.occurrence_list(limit=10) == []


async def test_backfill_of_a_job_with_max_runs_is_refused(
    clock: FakeClock, store: MemoryStore
) -> None:
    """A job limited to max_runs that has used them all gets no more runs from a backfill
    (which the planner's count would not see): refused naming the bound, nothing added."""
    app = make_app(clock, store)
    app.job(cron("0 * * * *", max_runs=2), name="twice")(lambda ctx: None)
    runtime = await started(app)
    await plan_tick(runtime)
    clock.advance(3 * 3600)
    await plan_tick(runtime)
    assert len(await store.occurrence_list(job="twice", limit=100)) == 2
    with pytest.raises(ConfigError, match="max_runs=2"):
        await app.abackfill("twice", T0 - 5 * HOUR, T0 + 3 * HOUR)
    assert len(await store.occurrence_list(job="twice", limit=100)) == 2


async def test_backfill_and_upcoming_of_an_unknown_job_name_it(
    clock: FakeClock, store: MemoryStore
) -> None:
    """An unknown job raises UnknownJobError naming it."""
    app = make_app(clock, store)
    with pytest.raises(UnknownJobError, match="'nope'"):
        await app.abackfill("nope", T0 - HOUR, T0)
    with pytest.raises(UnknownJobError, match="'nope'"):
        await app.aupcoming("nope")


# -- upcoming -----------------------------------------------------------------------------------


def test_upcoming_marks_a_spring_forward_gap_and_the_offset_change() -> None:
    """A fixed-time cron at a wall time the gap skips runs right after it, and says so;
    the UTC offset change is marked once, on the first instant after it."""
    rows = upcoming(
        "j",
        cron("30 2 * * *", tz="Europe/Paris"),
        datetime(2026, 3, 27, 12, tzinfo=timezone.utc),
        3,
    )
    assert [r.local.isoformat() for r in rows] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]
    assert [r.shift for r in rows] == [False, True, False]
    assert rows[1].note is not None
    assert "02:30 does not exist on 2026-03-29" in rows[1].note
    assert "+01:00 -> +02:00" in rows[1].note
    assert rows[0].note is None and rows[2].note is None


def test_upcoming_marks_both_passes_of_a_repeated_hour() -> None:
    """A wildcard-minute cron fires in both passes of the repeated hour; each is named."""
    rows = upcoming(
        "j",
        cron("*/30 2 * * *", tz="Europe/Paris"),
        datetime(2026, 10, 24, 12, tzinfo=timezone.utc),
        4,
    )
    assert [r.to_json()["utc_offset"] for r in rows] == ["+02:00", "+02:00", "+01:00", "+01:00"]
    notes = [r.note or "" for r in rows]
    assert all("happens twice on 2026-10-25" in n for n in notes)
    assert [n.endswith("first pass") for n in notes] == [True, True, False, False]
    assert [r.shift for r in rows] == [False, False, True, False]


def test_upcoming_of_every_is_in_utc_and_stops_at_the_end_or_max_runs() -> None:
    """An interval schedule is shown in UTC with no shift; an ended schedule or spent
    max_runs gives fewer instants; a bad count is refused."""
    rows = upcoming("j", every("1h", end=T0 + 2 * HOUR), T0, 10)
    assert [(r.plan_time, r.zone, r.note) for r in rows] == [
        (T0 + HOUR, "UTC", None),
        (T0 + 2 * HOUR, "UTC", None),
    ]
    assert len(upcoming("j", every("1h"), T0, 10, remaining=3)) == 3
    for bad in (0, 1001, "5"):
        with pytest.raises(ConfigError, match="invalid count"):
            upcoming("j", every("1h"), T0, bad)  # type: ignore[arg-type]


async def test_app_upcoming_uses_the_default_zone_and_writes_nothing(
    clock: FakeClock, store: MemoryStore
) -> None:
    """app.upcoming of a job defined in code: in the scheduler's time zone, from the
    store's time; nothing is written."""
    app = make_app(clock, store, timezone="America/New_York")
    app.job(cron("0 9 * * *"), name="morning")(lambda ctx: None)
    rows = await app.aupcoming("morning", count=2)
    assert [r.local.isoformat() for r in rows] == [
        "2026-03-01T09:00:00-05:00",
        "2026-03-02T09:00:00-05:00",
    ]
    assert await store.job_list() == []
    assert await store.occurrence_list(limit=10) == []
