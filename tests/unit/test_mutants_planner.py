"""What the planner writes and when it wakes, where ``make mutate MUTATE=planner`` found no
test: a planned occurrence carries its job's payload, its task's retry and crash budgets and
its jitter; scope providers (async ones too) get the planning time and a scope may hold a
space but no control character; a paused job plans nothing in local mode; and a tick
sleeps until the next instant less the lookahead. Each in the distributed and the local
mode, which plan through different code (the index and partitions, or private streams).
Then: catch_up='all' walks from its window, not an old cursor; a scope that goes leaves
the index in leader mode too; a code job without a stored record is planned; rediscover()
and stop() cancel a pass blocked in job_list; in shared planning an instance leaves what
another defines alone, pushes back what nobody defines, keeps a stream due after the
announcements it read, and waits 0.1 s over a full batch of others' streams; a leader
plans beside a schedule of a task it lacks; a dynamic schedule follows its new schedule
when added again and starts when it was added; the index is asked for the held slots;
and the tick's sleep never spins and is less the time the tick took."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

import pytest
from ticks import plan_tick, started

from soloist import Scheduler, every
from soloist.models import DueBatch, JobRecord, Occurrence, PlanCursor
from soloist.registry import JobDef, JobPolicy
from soloist.runtime import Runtime
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


def test_catch_up_all_starts_its_walk_at_the_window_not_at_an_old_cursor() -> None:
    """catch_up='all' with a one-hour window over a cursor two days old keeps the first
    CATCH_UP_BATCH instants of the window: the walk starts at the window, it does not
    spend its whole budget (MAX_WALK instants) on the two days before it."""
    old = T0 - timedelta(days=2)
    walk = walk_of(every("1s"), last=old, catch_up="all", window=timedelta(hours=1))
    # The window reaches back to T0 - 3599.5 s: T0 - 3599 s is its first instant.
    assert walk.kept == seconds(*range(-3599, -3599 + CATCH_UP_BATCH))
    assert walk.new_last == walk.kept[-1]


# -- the planner over the index, tick by tick ---------------------------------------------------
async def lead_tick(runtime: Runtime) -> float:
    """One planner tick in leader mode, after the elector's: it keeps the lead, or (past
    its trust window, the clock moved on) loses it and takes it again."""
    for _ in range(3):
        await runtime.elector.tick()
        if runtime.elector.is_leader:
            break
    assert runtime.elector.is_leader
    return await runtime.planner.tick()


async def announce(*runtimes: Runtime) -> None:
    """The registrars' heartbeats, as their loops would send them."""
    for runtime in runtimes:
        await runtime.registrar.tick()


async def test_a_scope_that_goes_leaves_the_index_in_leader_mode() -> None:
    """In leader mode (unfenced writes) a scope the provider stops returning leaves the
    index too: its cursor's next plan time becomes None, and it is no longer planned."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    tenants = ["acme", "globex"]
    app = make_app(clock, store, "leader", poll_interval="1s")  # refresh: 5 s
    app.job(every("1m"), name="report", scopes=lambda now: list(tenants))(lambda ctx: None)
    runtime = await started(app)
    await lead_tick(runtime)
    tenants.remove("globex")
    for _ in range(2):
        clock.advance(60)
        await lead_tick(runtime)
    cursor = await store.plan_cursor_get("report", "globex")
    assert cursor is not None and cursor.next_plan_time is None
    scopes = [o.scope for o in await planned(store, "report")]
    assert scopes == ["acme", "acme"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_code_job_without_a_stored_record_is_planned(mode: str) -> None:
    """A code-defined job whose record is not in the store (an instance that has not
    registered its jobs yet, or whose record was deleted) is planned all the same, as not
    paused."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, mode)
    app.job(every("1m"), name="report")(lambda ctx: None)
    runtime = Runtime(await app.astore(), app.registry, app.config, app.clock)  # no register()
    assert await store.job_list() == []
    for _ in range(3):
        await plan_tick(runtime)
        clock.advance(60)
    assert [o.plan_time for o in await planned(store, "report")] == [
        T0 + timedelta(minutes=m) for m in (1, 2)
    ]


class BlockedJobList:
    """A store's job_list that blocks until released, recording each call and cancel."""

    def __init__(self) -> None:
        self.calls = 0
        self.cancelled = 0
        self.release = asyncio.Event()

    async def __call__(self) -> list[JobRecord]:
        self.calls += 1
        try:
            await asyncio.wait_for(self.release.wait(), timeout=10)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return []


async def test_rediscover_on_a_fresh_planner_and_a_pass_blocked_in_the_job_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """rediscover() before any tick (elected before the first one) does nothing wrong;
    with the pass over the dynamic schedules blocked in job_list, it cancels that pass and
    the next tick starts a new one."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, "distributed")
    runtime = await started(app)
    runtime.planner.rediscover()  # no pass yet
    job_list = BlockedJobList()
    monkeypatch.setattr(store, "job_list", job_list)
    await plan_tick(runtime)
    await asyncio.sleep(0.01)  # the pass runs beside the tick, into job_list
    assert (job_list.calls, job_list.cancelled) == (1, 0)
    runtime.planner.rediscover()
    await asyncio.sleep(0.01)
    assert job_list.cancelled == 1
    await plan_tick(runtime)
    await asyncio.sleep(0.01)
    assert job_list.calls == 2
    job_list.release.set()
    await asyncio.sleep(0.01)
    assert runtime.planner._dynamic_seen


async def test_stop_cancels_a_pass_blocked_in_the_job_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """stop() while the pass over the dynamic schedules is blocked in job_list cancels
    that pass, waits for it and returns cleanly."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, "distributed")
    runtime = await started(app)
    job_list = BlockedJobList()
    monkeypatch.setattr(store, "job_list", job_list)
    await plan_tick(runtime)
    await asyncio.sleep(0.01)
    entering = runtime.planner._entering
    assert entering is not None and job_list.calls == 1
    await runtime.planner.stop()
    assert entering.done() and job_list.cancelled == 1


# -- shared planning: instances that define different jobs or tasks ----------------------------
def shared_apps(clock: FakeClock, store: MemoryStore) -> tuple[Scheduler, Scheduler]:
    """Instance a defines nothing; b defines the task 'work' and the job 'report' (every
    minute): they plan shared, each what it defines, unfenced."""
    a = make_app(clock, store, "distributed")
    b = Scheduler(store, instance_id="b", clock=clock, lease_ttl="9s")
    b.task(name="work")(lambda ctx: None)
    b.job(every("1m"), name="report")(lambda ctx: None)
    return a, b


async def start_shared(*apps: Scheduler) -> list[Runtime]:
    """The apps' runtimes, announced, their partitions synced: planning shared."""
    runtimes = [await started(app) for app in apps]
    await announce(*runtimes)
    for runtime in runtimes:
        await runtime.partitions.tick()  # type: ignore[union-attr]
        assert runtime.partitions.held_slots() is None  # type: ignore[union-attr]
    return runtimes


async def test_in_shared_planning_what_another_instance_defines_is_left_to_it() -> None:
    """An instance ticking first leaves alone the streams another live instance defines
    (a code job, a dynamic schedule of its task): their cursors are untouched, and the
    other plans every instant on time."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    apps = shared_apps(clock, store)
    await apps[1].schedules.aadd("theirs", task="work", schedule=every("1m"))
    a, b = await start_shared(*apps)
    await plan_tick(b)  # b enters and plans its streams: next due at 12:01
    jobs = ("report", "theirs")
    cursors = [await store.plan_cursor_get(job, "") for job in jobs]
    for _ in range(3):
        clock.advance(60)
        await announce(a, b)
        await plan_tick(a)  # a first: nothing of b's is written
        assert [await store.plan_cursor_get(job, "") for job in jobs] == cursors
        await plan_tick(b)
        cursors = [await store.plan_cursor_get(job, "") for job in jobs]
    for job in jobs:
        expected = [T0 + timedelta(minutes=m) for m in (1, 2, 3)]
        assert [o.plan_time for o in await planned(store, job)] == expected


def add_only(clock: FakeClock, store: MemoryStore, task: str) -> Scheduler:
    """An app that defines ``task`` only to add schedules of it; it never starts, so no
    live instance defines that task."""
    app = Scheduler(store, instance_id="offline", clock=clock, lease_ttl="9s")
    app.task(name=task)(lambda ctx: None)
    return app


async def test_in_shared_planning_a_task_nobody_defines_is_looked_at_after_refresh() -> None:
    """A dynamic schedule of a task no live instance defines is not left to another
    instance: its cursor is written to be looked at again one refresh later."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    await add_only(clock, store, "lost").schedules.aadd("orphan", task="lost", schedule=every("1m"))
    a, _ = await start_shared(*shared_apps(clock, store))
    await plan_tick(a)
    cursor = await store.plan_cursor_get("orphan", "")
    assert cursor is not None and cursor.next_plan_time == T0 + a.planner.refresh
    assert await planned(store, "orphan") == []


async def test_in_shared_planning_a_stream_due_after_the_last_announcements_stays() -> None:
    """A code job only a just-started instance defines, due after the announcements last
    read (that instance has not announced yet), is not taken out of the index by another
    instance: it is looked at again after refresh."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    a, _ = await start_shared(*shared_apps(clock, store))  # announced at T0
    new = Scheduler(store, instance_id="c", clock=clock, lease_ttl="9s")
    new.job(every("1s"), name="fresh")(lambda ctx: None)
    c = await started(new)
    clock.advance(2)
    await plan_tick(c)  # enters "fresh", plans 12:00:03; next due 12:00:04
    cursor = await store.plan_cursor_get("fresh", "")
    assert cursor is not None and cursor.next_plan_time == T0 + timedelta(seconds=4)
    clock.advance(1)
    await plan_tick(a)  # what a read was announced at T0, before "fresh" came due
    cursor = await store.plan_cursor_get("fresh", "")
    assert cursor is not None and cursor.next_plan_time == clock.now() + a.planner.refresh


async def test_in_shared_planning_a_full_batch_of_others_streams_waits_a_little() -> None:
    """An instance whose first batch of due streams (500) holds only streams another
    instance plans looks again 0.1 s later: not at once, not after a refresh."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    apps = shared_apps(clock, store)
    for n in range(600):
        await apps[1].schedules.aadd(f"s{n}", task="work", schedule=every("1m"))
    a, _ = await start_shared(*apps)
    assert await plan_tick(a) == pytest.approx(0.1)
    assert await store.occurrence_list(limit=10) == []


async def test_a_leader_plans_its_jobs_beside_a_schedule_of_a_task_it_lacks() -> None:
    """In leader mode a dynamic schedule of a task the leader does not define is looked at
    again after refresh, and the leader's other jobs are planned all the same."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    offline = add_only(clock, store, "elsewhere")
    await offline.schedules.aadd("theirs", task="elsewhere", schedule=every("1m"))
    app = make_app(clock, store, "leader")
    app.job(every("1m"), name="tick")(lambda ctx: None)
    runtime = await started(app)
    for _ in range(2):
        await lead_tick(runtime)
        clock.advance(60)
    cursor = await store.plan_cursor_get("theirs", "")
    later = T0 + timedelta(minutes=1) + runtime.planner.refresh
    assert cursor is not None and cursor.next_plan_time == later
    assert [o.plan_time for o in await planned(store, "tick")] == [T0 + timedelta(minutes=1)]
    assert await planned(store, "theirs") == []


# -- dynamic schedules ---------------------------------------------------------------------------
async def test_a_schedule_added_again_with_another_schedule_follows_the_new_one() -> None:
    """A dynamic schedule deleted and added again under its name with another schedule
    is planned by the new schedule (hourly, then every minute), not the one read before."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, "distributed")
    app.task(name="work")(lambda ctx: None)
    await app.schedules.aadd("report", task="work", schedule=every("1h"))
    runtime = await started(app)
    await plan_tick(runtime)
    assert await app.schedules.adelete("report")
    await app.schedules.aadd("report", task="work", schedule=every("1m"))
    for _ in range(3):
        await plan_tick(runtime)
        clock.advance(60)
    assert [o.plan_time for o in await planned(store, "report")] == [
        T0 + timedelta(minutes=m) for m in (1, 2)
    ]


async def test_a_new_dynamic_schedule_starts_when_it_was_added() -> None:
    """A dynamic schedule first planned 5 s after it was added (within the misfire grace)
    gets every instant since it was added, not only those from the planning tick on."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, "distributed")
    app.task(name="work")(lambda ctx: None)
    await app.schedules.aadd("pulse", task="work", schedule=every("1s"))
    runtime = await started(app)
    clock.advance(5)
    await plan_tick(runtime)
    assert [o.plan_time for o in await planned(store, "pulse")] == seconds(*range(1, 7))


# -- what the index is asked, and when the planner wakes ------------------------------------------
Slots = Sequence[tuple[int, int]] | None


async def test_the_index_is_asked_for_the_held_partitions_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With two instances splitting the partitions, each asks the planning index for the
    slot ranges of the partitions it holds, never for every slot."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    apps = [Scheduler(store, instance_id=i, clock=clock, lease_ttl="9s") for i in "ab"]
    runtimes = [await started(app) for app in apps]
    await announce(*runtimes)
    for _ in range(2):  # the first sync of a takes all; the next rebalances
        for runtime in runtimes:
            await runtime.partitions.tick()  # type: ignore[union-attr]
    asked: list[Slots] = []
    plan_due = store.plan_due

    async def spy(before: datetime, limit: int, slots: Slots = None) -> DueBatch:
        asked.append(slots)
        return await plan_due(before, limit, slots)

    monkeypatch.setattr(store, "plan_due", spy)
    for runtime in runtimes:
        held = runtime.partitions.held_slots()  # type: ignore[union-attr]
        assert held and len(held) < 64
        asked.clear()
        await runtime.planner.tick()
        assert asked == [held]


async def test_a_store_answering_an_already_due_next_time_does_not_make_the_tick_spin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store that stopped its scan early answers where it stopped as next_at, which may
    be due already: the tick then sleeps a short pause (0.1 s), not 0."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, "distributed")
    runtime = await started(app)
    plan_due = store.plan_due

    async def stopped_early(before: datetime, limit: int, slots: Slots = None) -> DueBatch:
        batch = await plan_due(before, limit, slots)
        return DueBatch(batch.streams, clock.now())

    monkeypatch.setattr(store, "plan_due", stopped_early)
    assert await plan_tick(runtime) == pytest.approx(0.1)


async def test_the_sleep_is_less_the_time_the_tick_took(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tick's sleep is the store-time distance to the next instant (less the
    lookahead), less the time elapsed since the store's clock was read: here 0.3 s spent
    in reading the index."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, "distributed", poll_interval="20s")
    app.job(every("1m"), name="tick")(lambda ctx: None)
    runtime = await started(app)
    await plan_tick(runtime)
    clock.advance(30)
    plan_due = store.plan_due

    async def slow(before: datetime, limit: int, slots: Slots = None) -> DueBatch:
        clock.advance(0.3)
        return await plan_due(before, limit, slots)

    monkeypatch.setattr(store, "plan_due", slow)
    assert await plan_tick(runtime) == pytest.approx(29.0 - 0.3)


def test_latest_catch_up_finds_the_last_instant_of_a_dense_schedule_that_ended() -> None:
    """catch_up='latest' over a schedule of every millisecond that ended 129 s before the
    misfire grace: the newest missed instant is its last one. Probing back in doubling
    steps overshoots the end by up to the same distance again (here 127 s, 127,000
    instants, past MAX_WALK): the probe is narrowed down before the walk."""
    end = NOW - GRACE - timedelta(seconds=129)
    dense = every("1ms", end=end)
    instants, t = [], end - timedelta(milliseconds=3)
    while (t := dense.next_after(t)) is not None:  # type: ignore[assignment]
        instants.append(t)
    walk = walk_of(dense, last=T0 - timedelta(days=2))
    assert walk.kept == instants[-1:] and walk.upcoming is None


def last_instant(schedule: Schedule, end: datetime) -> datetime:
    """The last instant of ``schedule``, which ends at ``end``."""
    t, last = end - timedelta(seconds=3), None
    while (nxt := schedule.next_after(t)) is not None:
        t = last = nxt
    assert last is not None
    return last


def test_latest_catch_up_finds_the_last_instant_far_behind_the_probes() -> None:
    """catch_up='latest', a cursor 1000 s before the misfire grace and a schedule of every
    millisecond that ended 400 s after it: the doubling probes pass the cursor before they
    meet an instant, and the newest one is still found by narrowing from the cursor (a
    walk from the cursor itself would pass MAX_WALK instants first)."""
    last = NOW - GRACE - timedelta(seconds=1000)
    dense = every("1ms", end=last + timedelta(seconds=400))
    walk = walk_of(dense, last=last)
    assert walk.kept == [last_instant(dense, last + timedelta(seconds=400))]
    assert walk.upcoming is None


def test_latest_catch_up_over_a_schedule_that_ended_before_the_cursor_keeps_nothing() -> None:
    """A schedule that ended before the last planned instant has nothing to catch up."""
    last = NOW - GRACE - timedelta(seconds=100)
    walk = walk_of(every("1s", end=last - timedelta(seconds=10)), last=last)
    assert walk.kept == [] and walk.upcoming is None


def test_latest_catch_up_when_the_grace_begins_exactly_at_an_instant() -> None:
    """The misfire grace begins exactly at an instant (every 5 s, anchored so that one falls
    at now - grace): that instant is within the grace, and the newest *missed* one is the
    instant 5 s before it, which the narrowing must not step over."""
    before = NOW - GRACE
    sparse = every("5s", start=before - timedelta(seconds=100))
    walk = walk_of(sparse, last=before - timedelta(seconds=60))
    assert walk.kept[:2] == [before - timedelta(seconds=5), before]
