"""Planning from the store's index and partitioned ownership, tick by tick on a fake clock
and the memory store: what a tick costs, which streams enter and leave the index, and how
instances share partitions."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from ticks import plan_tick, started

from soloist import Scheduler, cron, every
from soloist.errors import ConfigError
from soloist.models import SLOTS, InstanceInfo, slot_partition, stream_slot
from soloist.runtime import Runtime
from soloist.runtime.partitions import assign
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
TTL = timedelta(seconds=9)


def make_app(clock: FakeClock, store: MemoryStore, iid: str = "a", **options: object) -> Scheduler:
    return Scheduler(store, instance_id=iid, clock=clock, lease_ttl="9s", **options)  # type: ignore[arg-type]


async def announce(runtime: Runtime) -> None:
    """The registrar's heartbeat, as its loop would send it."""
    await runtime.registrar.tick()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore("memory://", clock=clock)


async def add_schedules(app: Scheduler, count: int, period: str, prefix: str = "s") -> None:
    for n in range(count):
        await app.schedules.aadd(f"{prefix}{n}", task="work", schedule=every(period))


# -- the cost of a tick ------------------------------------------------------------------------
async def test_a_tick_costs_what_the_due_streams_cost(clock: FakeClock, store: MemoryStore) -> None:
    """Thousands of streams that are not due cost nothing: the tick plans the due ones only
    and makes a handful of round trips, the same as with the due streams alone."""
    app = make_app(clock, store)
    app.task(name="work")(lambda ctx: None)
    await add_schedules(app, 2_000, "1h", prefix="idle")
    runtime = await started(app)
    await plan_tick(runtime)  # first sight of every stream
    clock.advance(30)
    await add_schedules(app, 10, "1m", prefix="busy")
    before = dict(runtime.planner.report())
    await plan_tick(runtime)
    after = runtime.planner.report()
    assert after["streams"] - before["streams"] == 10  # type: ignore[operator]
    # store.now(), one plan_due and one plan_advance_many
    assert after["round_trips"] - before["round_trips"] == 3  # type: ignore[operator]


async def test_more_due_streams_than_a_batch_go_in_batches(
    clock: FakeClock, store: MemoryStore
) -> None:
    """1,200 due streams take three batches of at most 500 in one tick, and all are planned."""
    app = make_app(clock, store)
    app.task(name="work")(lambda ctx: None)
    await add_schedules(app, 1_200, "1m")
    runtime = await started(app)
    await plan_tick(runtime)
    clock.advance(60)
    before = runtime.planner.report()["round_trips"]
    await plan_tick(runtime)
    assert runtime.planner.report()["round_trips"] - before == 1 + 3 * 2  # type: ignore[operator]
    rows = await store.occurrence_list(limit=5_000)
    assert len({o.job for o in rows}) == 1_200


# -- entering and leaving the index ------------------------------------------------------------
async def test_a_scope_that_goes_leaves_the_index_and_comes_back(
    clock: FakeClock, store: MemoryStore
) -> None:
    """A scope the provider stops returning leaves the index and is no longer planned;
    when it returns, it is entered again (at the next refresh) and planned."""
    tenants = ["acme", "globex"]
    app = make_app(clock, store, poll_interval="1s")  # refresh: 5 s
    app.job(every("1m"), name="report", scopes=lambda now: list(tenants))(lambda ctx: None)
    runtime = await started(app)
    await plan_tick(runtime)
    tenants.remove("globex")
    clock.advance(60)
    await plan_tick(runtime)
    cursor = await store.plan_cursor_get("report", "globex")
    assert cursor is not None and cursor.next_plan_time is None
    clock.advance(60)
    await plan_tick(runtime)
    tenants.append("globex")
    clock.advance(60)
    await plan_tick(runtime)
    rows = await store.occurrence_list(job="report", limit=100)
    globex = sorted(o.plan_time for o in rows if o.scope == "globex")
    acme = sorted(o.plan_time for o in rows if o.scope == "acme")
    assert acme == [T0 + timedelta(minutes=m) for m in (1, 2, 3)]
    # back at minute 3: the catch-up policy (latest) runs the newest instant missed while it
    # was gone, as for any stream planned late, then the due one
    assert globex == [T0 + timedelta(minutes=2), T0 + timedelta(minutes=3)]


async def test_10k_scopes_are_entered_in_batches(clock: FakeClock, store: MemoryStore) -> None:
    """A provider returning 10,000 scopes costs ten entering round trips once, not 10,000
    sequential ones, and none at the next refresh when nothing changed."""
    scopes = [f"t{n}" for n in range(10_000)]
    app = make_app(clock, store)
    app.job(every("1h"), name="report", scopes=lambda now: scopes)(lambda ctx: None)
    runtime = await started(app)
    await plan_tick(runtime)
    first = runtime.planner.report()["round_trips"]
    # now(), 10 ensure batches, job_list once, then plan_due/advance batches (20 at most)
    assert 12 <= first <= 12 + 2 * 20  # type: ignore[operator]
    clock.advance(30)
    before = runtime.planner.report()["round_trips"]
    await plan_tick(runtime)
    assert runtime.planner.report()["round_trips"] - before <= 3  # type: ignore[operator]


async def test_max_runs_are_not_spent_while_paused(clock: FakeClock, store: MemoryStore) -> None:
    """Instants passed while paused are not planned and do not count towards max_runs: the
    stream stays in the index and plans again after resume."""
    app = make_app(clock, store)
    app.task(name="work")(lambda ctx: None)
    await app.schedules.aadd("capped", task="work", schedule=every("1m", max_runs=2))
    runtime = await started(app)
    await plan_tick(runtime)
    await store.job_set_paused("capped", True)
    for _ in range(3):
        clock.advance(60)
        await plan_tick(runtime)
    assert await store.occurrence_list(job="capped", limit=10) == []
    await store.job_set_paused("capped", False)
    for _ in range(3):
        clock.advance(60)
        await plan_tick(runtime)
    rows = await store.occurrence_list(job="capped", limit=10)
    assert len(rows) == 2
    cursor = await store.plan_cursor_get("capped", "")
    assert cursor is not None and cursor.planned_count == 2 and cursor.next_plan_time is None


async def test_a_schedule_deleted_and_added_again_plans_no_instant_twice(
    clock: FakeClock, store: MemoryStore
) -> None:
    """A dynamic schedule deleted and added again while its next instant is already
    planned (1 s ahead, the lookahead) plans that instant again, from a new cursor, and
    gets the same occurrence: an occurrence's key is its job, scope and plan time, nothing
    else, so each instant has one occurrence."""
    app = make_app(clock, store)
    app.task(name="work")(lambda ctx: None)
    await app.schedules.aadd("report", task="work", schedule=cron("* * * * *"))
    runtime = await started(app)
    await plan_tick(runtime)
    clock.advance(59.5)  # 12:00:59.5: 12:01 is within the lookahead
    await plan_tick(runtime)
    (planned,) = await store.occurrence_list(job="report", limit=10)
    assert planned.plan_time == T0 + timedelta(minutes=1)

    assert await app.schedules.adelete("report")
    await app.schedules.aadd("report", task="work", schedule=cron("* * * * *"))
    await plan_tick(runtime)  # the new stream starts at 12:00:59.5: 12:01 is its first
    cursor = await store.plan_cursor_get("report", "")
    assert cursor is not None and cursor.last_plan_time == T0 + timedelta(minutes=1)
    for _ in range(2):
        clock.advance(30)
        await plan_tick(runtime)
    rows = await store.occurrence_list(job="report", limit=10)
    assert sorted(o.plan_time for o in rows) == [T0 + timedelta(minutes=m) for m in (1, 2)]
    assert planned.id in {o.id for o in rows}


async def test_an_unknown_task_is_looked_at_after_refresh(
    clock: FakeClock, store: MemoryStore
) -> None:
    """A dynamic schedule of a task this instance does not define is left for later (one
    refresh), not planned, and does not make the planner spin."""
    other = make_app(clock, store, "b")
    other.task(name="elsewhere")(lambda ctx: None)
    await other.schedules.aadd("theirs", task="elsewhere", schedule=every("1s"))
    app = make_app(clock, store, poll_interval="1s")
    runtime = await started(app)
    delay = await plan_tick(runtime)
    assert delay == pytest.approx(5.0 - 1.0)  # refresh, less the lookahead
    cursor = await store.plan_cursor_get("theirs", "")
    assert cursor is not None and cursor.next_plan_time == T0 + timedelta(seconds=5)
    assert await store.occurrence_list(job="theirs", limit=10) == []


# -- partitions ---------------------------------------------------------------------------------
def test_assignment_is_balanced_and_moves_little() -> None:
    """Each instance gets at most ceil(P / live); a fourth instance takes partitions only
    from the others' shares, and about a quarter of them move."""
    three = assign(["a", "b", "c"], 64)
    assert sorted(p for ps in three.values() for p in ps) == list(range(64))
    assert max(len(ps) for ps in three.values()) == 22
    four = assign(["a", "b", "c", "d"], 64)
    assert max(len(ps) for ps in four.values()) == 16
    moved = sum(1 for i in "abc" for p in four[i] if p not in three[i])
    assert moved <= 8  # the rest of d's 16 came from the others' shares
    assert assign(["a"], 64) == {"a": list(range(64))}


def test_slots_map_to_partitions_in_ranges() -> None:
    """A stream's partition comes from its slot; every partition has slots."""
    counts = {slot_partition(stream_slot(f"j{n}", ""), 64) for n in range(5_000)}
    assert counts == set(range(64))
    assert {slot_partition(s, 64) for s in range(SLOTS)} == set(range(64))


async def test_two_instances_split_the_streams_and_each_plans_its_own(
    clock: FakeClock, store: MemoryStore
) -> None:
    """Two live instances hold half the partitions each; each plans only the streams of
    its partitions, and together every stream once."""
    apps = [make_app(clock, store, iid) for iid in ("a", "b")]
    for app in apps:
        app.task(name="work")(lambda ctx: None)
    await add_schedules(apps[0], 300, "1m")
    a, b = [await started(app) for app in apps]
    for runtime in (a, b):
        await announce(runtime)
    for _ in range(2):  # the first sync of a takes all; the next rebalances
        for runtime in (a, b):
            await runtime.partitions.tick()  # type: ignore[union-attr]
    held_a = set(a.partitions.report()["held"])  # type: ignore[union-attr, arg-type]
    held_b = set(b.partitions.report()["held"])  # type: ignore[union-attr, arg-type]
    assert len(held_a) == len(held_b) == 32 and not held_a & held_b
    for runtime in (a, b):
        await runtime.planner.tick()
    clock.advance(60)
    for runtime in (a, b):
        await announce(runtime)
    for runtime in (a, b):
        await plan_tick(runtime)
    streams_a, streams_b = a.planner.streams_total, b.planner.streams_total
    assert streams_a + streams_b == 600 and 0 < streams_a < 600
    rows = await store.occurrence_list(limit=1_000)
    assert len(rows) == 300 and len({o.job for o in rows}) == 300


async def test_instances_that_disagree_on_the_count_do_not_plan(
    clock: FakeClock, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """An instance that sees another live instance with another partition count releases
    its partitions, plans nothing and says why, until they agree again."""
    app = make_app(clock, store, "a")
    app.task(name="work")(lambda ctx: None)
    await add_schedules(app, 5, "1m")
    runtime = await started(app)
    await plan_tick(runtime)
    odd = InstanceInfo("odd", "distributed", "host", 1, T0, T0, T0 + TTL, {"partitions": 32})
    clock.advance(60)
    await store.instance_heartbeat(odd, TTL)
    with caplog.at_level("WARNING", logger="soloist"):
        await plan_tick(runtime)
    report = runtime.partitions.report()  # type: ignore[union-attr]
    assert report["held"] == [] and "odd has 32" in str(report["refusal"])
    assert "odd has 32" in caplog.text
    assert await store.partition_list() == []
    assert await store.occurrence_list(limit=10) == []
    await store.instance_remove("odd")
    await plan_tick(runtime)
    assert runtime.partitions.report()["refusal"] is None  # type: ignore[union-attr]
    assert len(await store.occurrence_list(limit=10)) == 5


async def test_a_lost_partition_is_not_planned_after_trust_runs_out(
    clock: FakeClock, store: MemoryStore
) -> None:
    """An instance whose syncs stop trusts its partitions only for 3/4 of the TTL: past
    that its planner plans nothing, even before another instance takes over."""
    app = make_app(clock, store, "a")
    app.task(name="work")(lambda ctx: None)
    await add_schedules(app, 5, "1m")
    runtime = await started(app)
    await plan_tick(runtime)
    clock.advance(60)  # no partition sync in between: trust ran out long ago
    await runtime.planner.tick()
    assert await store.occurrence_list(limit=10) == []


def test_the_partition_count_is_checked() -> None:
    """partitions= takes an integer from 1 to 4096, and says so."""
    with pytest.raises(ConfigError, match="invalid partitions 0: expected an integer from 1"):
        Scheduler("memory://", partitions=0)
    with pytest.raises(ConfigError, match="invalid partitions 'many'"):
        Scheduler("memory://", partitions="many")  # type: ignore[arg-type]
    assert Scheduler("memory://", partitions=8).config.partitions == 8


# -- what an adversarial review found -------------------------------------------------------------
async def test_a_schedule_changed_in_code_is_planned_by_the_new_schedule(
    clock: FakeClock, store: MemoryStore
) -> None:
    """After a deploy that changes a job's schedule, the stream is planned again at once by
    the new schedule, not at the old schedule's next instant."""
    old = make_app(clock, store)
    old.job(every("1h"), name="report")(lambda ctx: None)
    await plan_tick(await started(old))
    new = make_app(clock, store)
    new.job(every("1m"), name="report")(lambda ctx: None)
    runtime = await started(new)
    for _ in range(3):
        clock.advance(60)
        await plan_tick(runtime)
    rows = await store.occurrence_list(job="report", limit=10)
    assert sorted(o.plan_time for o in rows) == [T0 + timedelta(minutes=m) for m in (1, 2, 3)]


async def test_a_failing_scope_provider_does_not_stop_the_other_jobs(
    clock: FakeClock, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A scope provider that raises is logged; its job keeps its last scopes and every other
    job is still planned."""
    calls = {"n": 0}

    def flaky(now: datetime) -> list[str]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("tenant service down")
        return ["acme"]

    app = make_app(clock, store)
    app.job(every("1m"), name="billing", scopes=flaky)(lambda ctx: None)
    app.job(every("1m"), name="plain")(lambda ctx: None)
    runtime = await started(app)
    await plan_tick(runtime)
    with caplog.at_level("ERROR", logger="soloist"):
        for _ in range(2):
            clock.advance(60)
            await plan_tick(runtime)
    assert "tenant service down" in caplog.text
    rows = await store.occurrence_list(limit=10)
    assert sorted((o.job, o.scope) for o in rows) == [
        ("billing", "acme"),
        ("billing", "acme"),
        ("plain", ""),
        ("plain", ""),
    ]


async def test_a_code_job_no_instance_defines_leaves_the_index(
    clock: FakeClock, store: MemoryStore
) -> None:
    """A job removed from the code (no live instance announces it) leaves the index instead
    of being rewritten every refresh; defined again, it is planned again."""
    old = make_app(clock, store)
    old.job(every("1m"), name="gone")(lambda ctx: None)
    await plan_tick(await started(old))
    new = make_app(clock, store)
    new.job(every("1m"), name="kept")(lambda ctx: None)
    runtime = await started(new)
    clock.advance(60)
    await announce(runtime)  # what the live instances define, read after "gone" came due
    await plan_tick(runtime)
    cursor = await store.plan_cursor_get("gone", "")
    assert cursor is not None and cursor.next_plan_time is None
    before = runtime.planner.streams_total
    clock.advance(60)
    await announce(runtime)
    await plan_tick(runtime)
    assert runtime.planner.streams_total - before == 1  # "kept" only
    back = make_app(clock, store)
    back.job(every("1m"), name="gone")(lambda ctx: None)
    again = await started(back)
    clock.advance(60)
    await plan_tick(again)
    rows = await store.occurrence_list(job="gone", limit=10)
    assert T0 + timedelta(minutes=3) in {o.plan_time for o in rows}


async def test_a_stopping_instance_hands_its_partitions_over_at_once(
    clock: FakeClock, store: MemoryStore
) -> None:
    """On stop an instance says it no longer plans and releases its partitions: the other
    instance takes them all at its next poll, although the first is still draining (and
    still listed as live)."""
    apps = [make_app(clock, store, iid) for iid in ("a", "b")]
    a, b = [await started(app) for app in apps]
    for runtime in (a, b):
        await announce(runtime)
    for _ in range(2):
        for runtime in (a, b):
            await runtime.partitions.tick()  # type: ignore[union-attr]
    assert len(b.partitions.report()["held"]) == 32  # type: ignore[union-attr, arg-type]
    await a.stop_planning()  # what Runtime.stop does first, before the drain
    assert "a" in {i.instance_id for i in await store.instance_list()}  # still draining
    await b.partitions.tick()  # type: ignore[union-attr]
    assert len(b.partitions.report()["held"]) == 64  # type: ignore[union-attr, arg-type]


async def test_refused_plan_writes_make_the_partitions_resync(
    clock: FakeClock, store: MemoryStore
) -> None:
    """When the store refuses the planner's fenced writes (the leases went, e.g. with the
    store's data), the planner does not spin: it waits a little and the partitions re-sync."""
    app = make_app(clock, store)
    app.task(name="work")(lambda ctx: None)
    await add_schedules(app, 3, "1s")
    runtime = await started(app)
    await plan_tick(runtime)
    store._partitions.clear()  # the leases are gone; the instance still trusts its own
    clock.advance(1)
    delay = await runtime.planner.tick()
    assert delay >= 0.09
    assert runtime.partitions.held_slots() == []  # type: ignore[union-attr]
    await plan_tick(runtime)
    assert runtime.partitions.held_slots() != []  # type: ignore[union-attr]


def test_the_default_misfire_grace_covers_a_failover() -> None:
    """By default an instant made late by a failover (lease TTL and a poll) is not missed:
    the grace is max(10 s, lease TTL + 2 s); one given explicitly is kept as given."""
    assert Scheduler("memory://").config.misfire_grace == timedelta(seconds=12)
    assert Scheduler("memory://", lease_ttl="30s").config.misfire_grace == timedelta(seconds=32)
    assert Scheduler("memory://", lease_ttl="3s").config.misfire_grace == timedelta(seconds=10)
    assert Scheduler("memory://", misfire_grace="1s").config.misfire_grace == timedelta(seconds=1)


# -- what a second review found --------------------------------------------------------------------
async def test_instances_defining_different_jobs_plan_shared(
    clock: FakeClock, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A job defined on one instance only (a rolling deploy adding it, or two apps on one
    store): the instances plan shared, not by partitions, so every stream of it is planned
    by the instance that defines it, whoever would hold its partition; and they say so."""
    worker = make_app(clock, store, "worker")
    worker.job(every("1m"), name="report", scopes=lambda now: [f"t{n}" for n in range(40)])(
        lambda ctx: None
    )
    web = make_app(clock, store, "web")
    web.job(every("1m"), name="other")(lambda ctx: None)
    a, b = [await started(app) for app in (worker, web)]
    with caplog.at_level("WARNING", logger="soloist"):
        for _ in range(3):
            clock.advance(60)
            for runtime in (a, b):
                await announce(runtime)
            for runtime in (a, b):
                await plan_tick(runtime)
    assert "planning shared" in caplog.text
    assert a.partitions.report()["shared"] is not None  # type: ignore[union-attr]
    assert await store.partition_list() == []
    rows = await store.occurrence_list(job="report", limit=1_000)
    scopes = {o.scope for o in rows}
    assert scopes == {f"t{n}" for n in range(40)}
    assert len(rows) == len({(o.scope, o.plan_time) for o in rows})


async def test_a_scope_provider_that_never_answered_keeps_its_streams(
    clock: FakeClock, store: MemoryStore
) -> None:
    """A provider that fails on this instance before it ever answered leaves the job's
    streams in the index (looked at again later), not out of it for good."""
    good = make_app(clock, store, "a")
    good.job(every("1m"), name="report", scopes=lambda now: ["acme"])(lambda ctx: None)
    await plan_tick(await started(good))

    def down(now: datetime) -> list[str]:
        raise RuntimeError("tenant service down")

    bad = make_app(clock, store, "a")
    bad.job(every("1m"), name="report", scopes=down)(lambda ctx: None)
    runtime = await started(bad)
    clock.advance(60)
    await plan_tick(runtime)
    cursor = await store.plan_cursor_get("report", "acme")
    assert cursor is not None and cursor.next_plan_time is not None


async def test_rediscover_enters_what_came_after_the_first_pass(
    clock: FakeClock, store: MemoryStore
) -> None:
    """A dynamic schedule written without its cursor (by an older version) after the pass
    over the job list is entered when rediscover() asks again (instances agree again, a
    leader is elected)."""
    app = make_app(clock, store)
    app.task(name="work")(lambda ctx: None)
    runtime = await started(app)
    await plan_tick(runtime)
    await asyncio.sleep(0.01)  # the first pass over the job list is over
    assert runtime.planner._dynamic_seen
    await app.schedules.aadd("late", task="work", schedule=every("1m"))
    store._drop_cursor(("late", ""))  # as an older version would have left it
    runtime.planner.rediscover()
    for _ in range(3):
        clock.advance(60)
        await plan_tick(runtime)
        await asyncio.sleep(0.01)  # the pass over the job list runs beside the ticks
    assert await store.plan_cursor_get("late", "") is not None
    assert await store.occurrence_list(job="late", limit=10) != []
