"""What the planner writes and when it wakes, where ``make mutate MUTATE=planner`` found no
test: a planned occurrence carries its job's payload, its task's retry and crash budgets and
its jitter; scope providers (async ones too) get the planning time and a scope may hold a
space but no control character; a paused job plans nothing in local mode; and a tick
sleeps until the next instant less the lookahead. Each in the distributed and the local
mode, which plan through different code (the index and partitions, or private streams)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from ticks import plan_tick, started

from soloist import Scheduler, every
from soloist.models import JobRecord, Occurrence, PlanCursor
from soloist.registry import JobDef, JobPolicy
from soloist.runtime.planner import CATCH_UP_BATCH, Walk, occurrence_key, plan_walk
from soloist.schedules import Schedule
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
MODES = ["distributed", "local"]


def make_app(clock: FakeClock, store: MemoryStore, mode: str, **options: object) -> Scheduler:
    return Scheduler(store, instance_id="a", clock=clock, lease_ttl="9s", mode=mode, **options)  # type: ignore[arg-type]


async def planned(store: MemoryStore, job: str) -> list[Occurrence]:
    return sorted(await store.occurrence_list(job=job, limit=100), key=lambda o: o.plan_time)


@pytest.mark.parametrize("mode", MODES)
async def test_a_planned_occurrence_carries_its_budgets_and_jitter(mode: str) -> None:
    """The occurrence of each instant has its job's max_attempts (retries + 1) and
    max_crashes, and is due at its plan time plus the schedule's jitter offset for its key
    (job, scope, plan time), never before its plan time."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, mode)
    schedule = every("1m", jitter="40s")
    app.job(schedule, name="report", retries=2, max_crashes=5)(lambda ctx: None)
    runtime = await started(app)
    for _ in range(4):
        await plan_tick(runtime)
        clock.advance(60)
    rows = await planned(store, "report")
    assert len(rows) >= 3
    for occ in rows:
        assert (occ.max_attempts, occ.max_crashes) == (3, 5)
        offset = schedule.jitter_offset(occurrence_key("report", "", occ.plan_time))
        assert occ.due_at == occ.plan_time + offset
    assert any(o.due_at > o.plan_time for o in rows), "every jitter offset was 0"


async def test_a_dynamic_schedule_plans_its_payload_and_its_tasks_budgets() -> None:
    """A dynamic schedule's occurrences carry its payload, and the retry and crash budgets
    of the task it names."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, "distributed")
    app.task(name="work", retries=1, max_crashes=4)(lambda ctx, n: None)
    await app.schedules.aadd("nightly", task="work", schedule=every("1m"), payload={"n": 7})
    runtime = await started(app)
    for _ in range(3):
        await plan_tick(runtime)
        clock.advance(60)
    rows = await planned(store, "nightly")
    assert len(rows) >= 2
    assert all((o.payload, o.max_attempts, o.max_crashes) == ({"n": 7}, 2, 4) for o in rows)


@pytest.mark.parametrize("mode", MODES)
async def test_scope_providers_get_the_planning_time_and_control_characters_are_refused(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An async scope provider is awaited and called with the planning time; a scope with a
    space is planned, one with a control character is logged and not planned."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    asked: list[datetime] = []

    async def tenants(now: datetime) -> list[str]:
        asked.append(now)
        return ["acme corp", "bad\ttab", "zeta"]

    app = make_app(clock, store, mode)
    app.job(every("1m"), name="billing", scopes=tenants)(lambda ctx: None)
    runtime = await started(app)
    with caplog.at_level("ERROR", logger="soloist"):
        for _ in range(2):
            await plan_tick(runtime)
            clock.advance(60)
    assert asked and all(isinstance(now, datetime) for now in asked)
    assert asked[0] == T0
    assert "contain control characters" in caplog.text and "bad\\ttab" in caplog.text
    scopes = {o.scope for o in await planned(store, "billing")}
    assert scopes == {"acme corp", "zeta"}


async def test_a_paused_job_plans_nothing_in_local_mode_until_resumed() -> None:
    """Local mode reads the job's record: while it is paused no instant is planned; once
    resumed, the next instants are."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, "local")
    app.job(every("1m"), name="sync")(lambda ctx: None)
    runtime = await started(app)
    await store.job_set_paused("sync", True)
    for _ in range(3):
        await plan_tick(runtime)
        clock.advance(60)
    assert await planned(store, "sync") == []
    await store.job_set_paused("sync", False)
    for _ in range(2):
        await plan_tick(runtime)
        clock.advance(60)
    assert len(await planned(store, "sync")) == 2


@pytest.mark.parametrize("mode", MODES)
async def test_a_tick_sleeps_until_the_next_instant_less_the_lookahead(mode: str) -> None:
    """After planning, the planner sleeps until its next instant comes within the
    lookahead (1 s): 29 s before an instant 30 s away (with a refresh of 100 s, five poll
    intervals, that does not cut the sleep short)."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, mode, poll_interval="20s")
    app.job(every("1m"), name="tick")(lambda ctx: None)
    runtime = await started(app)
    await plan_tick(runtime)
    clock.advance(30)
    delay = await plan_tick(runtime)
    assert delay == pytest.approx(29.0)
    clock.advance(29.5)  # within the lookahead of 12:01: planned now, then 12:02 is next
    delay = await plan_tick(runtime)
    assert delay == pytest.approx(59.5)
    assert [o.plan_time for o in await planned(store, "tick")] == [T0 + timedelta(minutes=1)]


@pytest.mark.parametrize("mode", MODES)
async def test_the_planner_reports_what_it_planned(mode: str) -> None:
    """The planner's report (shown by the status page) counts every occurrence it
    planned and its CPU time."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, mode)
    app.job(every("1m"), name="a")(lambda ctx: None)
    app.job(every("1m"), name="b")(lambda ctx: None)
    runtime = await started(app)
    for _ in range(3):
        await plan_tick(runtime)
        clock.advance(60)
    report = runtime.planner.report()
    rows = await store.occurrence_list(limit=100)
    assert report["planned"] == len(rows) >= 4
    assert isinstance(report["cpu_seconds"], float) and report["cpu_seconds"] >= 0


async def test_the_planner_counts_its_round_trips_and_cpu_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In distributed mode the report counts the store round trips (the bench reads them):
    the store's time, the index read, and the plan write when there is one, plus one to
    enter the new streams at the first tick; and the CPU time of building plans, here a
    process clock that moves 0.0006 s while each batch is built."""
    ticks = iter(n * 0.0003 for n in range(1_000))
    monkeypatch.setattr("soloist.runtime.planner.cpu_time", lambda: next(ticks))
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, "distributed")
    app.job(every("1m"), name="a")(lambda ctx: None)
    runtime = await started(app)
    trips = []
    for advance in (0, 60, 1, 59):  # due, due, nothing due, due
        clock.advance(advance)
        await plan_tick(runtime)
        trips.append(runtime.planner.report()["round_trips"])
    assert trips == [4, 7, 9, 12]
    # Four batches built, 0.0003 s each (two readings a batch, 0.0003 apart): 0.0012 s,
    # reported to the millisecond.
    assert runtime.planner.cpu_seconds == pytest.approx(0.0012)
    assert runtime.planner.report()["cpu_seconds"] == 0.001


# -- plan_walk, the planner's pure walk over one stream ---------------------------------------
NOW = T0 + timedelta(seconds=0.5)
LOOKAHEAD = timedelta(seconds=1)
GRACE = timedelta(seconds=10)


def walk_of(
    schedule: Schedule,
    *,
    last: datetime | None = None,
    count: int = 0,
    catch_up: str = "latest",
    window: timedelta | None = None,
    created: datetime | None = None,
) -> Walk:
    job = JobDef(
        "j", "t", schedule, JobPolicy.build(catch_up, window), {}, dynamic=created is not None
    )
    record = JobRecord("j", "t", {}, dynamic=True, created_at=created) if created else None
    cursor = PlanCursor("j", "", last, count)
    return plan_walk(job, cursor, NOW, LOOKAHEAD, GRACE, record, paused=False)


def seconds(*offsets: float) -> list[datetime]:
    return [T0 + timedelta(seconds=s) for s in offsets]


def test_a_new_stream_starts_now_and_a_new_dynamic_one_when_it_was_added() -> None:
    """A stream seen for the first time plans nothing from before now; a dynamic
    schedule's starts when it was added: with catch_up='all' every instant since then is
    planned, oldest first."""
    fresh = walk_of(every("1m"))
    assert fresh.kept == [] and fresh.new_last == NOW
    assert fresh.upcoming == T0 + timedelta(minutes=1)
    added = walk_of(every("1m"), catch_up="all", created=T0 - timedelta(minutes=3, seconds=30))
    assert added.kept == seconds(-180, -120, -60, 0)
    assert added.new_last == T0 and added.upcoming == T0 + timedelta(minutes=1)


def test_max_runs_counts_what_was_planned_before_and_now() -> None:
    """With max_runs=3, a dynamic schedule planned for the first time plans 3 of its 4
    missed instants and nothing after; one that planned 2 before plans 1 more."""
    capped = every("1m", max_runs=3)
    first = walk_of(capped, catch_up="all", created=T0 - timedelta(minutes=3, seconds=30))
    assert first.kept == seconds(-180, -120, -60) and first.upcoming is None
    later = walk_of(capped, last=T0 - timedelta(minutes=2), count=2, catch_up="all")
    assert later.kept == seconds(-60) and later.upcoming is None
    spent = walk_of(capped, last=T0 - timedelta(minutes=2), count=3, catch_up="all")
    assert spent.kept == [] and spent.upcoming is None


def test_latest_catch_up_puts_the_newest_missed_instant_first() -> None:
    """catch_up='latest' after downtime plans the newest missed instant, then the ones
    still within the misfire grace, in time order; found without walking every instant of
    a dense schedule since the last plan (two days of seconds)."""
    dense = walk_of(every("1s"), last=T0 - timedelta(days=2))
    # The grace reaches back to 9.5 s before T0: T0 - 10 s is the newest missed instant.
    assert dense.kept == seconds(-10, *range(-9, 2))
    assert dense.new_last == T0 + timedelta(seconds=1)
    minutely = walk_of(every("1m"), last=T0 - timedelta(minutes=10))
    assert minutely.kept == seconds(-60, 0)


def test_the_catch_up_window_and_batch_bound_what_all_keeps() -> None:
    """catch_up='all' plans the missed instants within the catch-up window only, and at
    most CATCH_UP_BATCH of them per walk (the rest at the next one)."""
    windowed = walk_of(every("1m"), last=T0 - timedelta(minutes=10), catch_up="all",
                       window=timedelta(minutes=3))  # fmt: skip
    assert windowed.kept == seconds(-120, -60, 0)  # T0 - 3 m is 3 m 0.5 s before now
    backlog = walk_of(every("1s"), last=T0 - timedelta(hours=1), catch_up="all")
    assert len(backlog.kept) == CATCH_UP_BATCH
    assert backlog.kept[0] == T0 - timedelta(hours=1) + timedelta(seconds=1)
    assert backlog.new_last == backlog.kept[-1]
