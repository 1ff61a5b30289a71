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
from soloist.models import Occurrence
from soloist.runtime.planner import occurrence_key
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
