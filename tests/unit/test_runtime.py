"""The runtime services driven tick by tick on a fake clock and the memory store."""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import datetime, timedelta, timezone

import pytest
from ticks import plan_tick, started

from soloist import PayloadError, Scheduler, every
from soloist.models import State
from soloist.registry import local_name
from soloist.runtime import Runtime
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


def make_app(clock: FakeClock, store: MemoryStore, iid: str, **options: object) -> Scheduler:
    return Scheduler(store, instance_id=iid, clock=clock, lease_ttl="9s", **options)  # type: ignore[arg-type]


async def settle(runtime: Runtime) -> None:
    """Wait until every handler this runtime started has finished and been recorded."""
    tasks = [r.task for r in runtime.executor.active.values() if r.task is not None]
    if tasks:
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore("memory://", clock=clock)


async def test_two_planners_plan_each_instant_once(clock: FakeClock, store: MemoryStore) -> None:
    """Two instances planning the same job create one occurrence per plan time."""
    runtimes = []
    for iid in ("a", "b"):
        app = make_app(clock, store, iid)
        app.job(every("1s"), name="tick")(lambda ctx: None)
        runtimes.append(await started(app))
    for _ in range(10):
        clock.advance(0.5)
        for runtime in runtimes:
            await plan_tick(runtime)
    plans = [o.plan_time for o in await store.occurrence_list(job="tick", limit=1000)]
    assert len(plans) == len(set(plans))
    assert sorted(plans) == [T0 + timedelta(seconds=s) for s in range(1, 7)]


@pytest.mark.parametrize(
    ("policy", "expected_missed"),
    [("skip", 0), ("latest", 1), ("all", 50)],
)
async def test_catch_up_policies_after_downtime(
    clock: FakeClock, store: MemoryStore, policy: str, expected_missed: int
) -> None:
    """After downtime, skip runs no missed instant, latest runs one, all runs each one."""
    app = make_app(clock, store, "a")
    app.job(every("1m"), name="minutely", catch_up=policy)(lambda ctx: None)
    runtime = await started(app)
    await plan_tick(runtime)  # first sight: cursor starts now
    clock.advance(timedelta(minutes=50, seconds=30))  # down for 50 minutes
    await plan_tick(runtime)
    plans = sorted(o.plan_time for o in await store.occurrence_list(job="minutely", limit=1000))
    assert len(plans) == expected_missed
    if policy == "latest":
        assert plans == [T0 + timedelta(minutes=50)]


async def test_catch_up_window_bounds_all(clock: FakeClock, store: MemoryStore) -> None:
    """catch_up='all' with a window replays only the missed instants inside the window."""
    app = make_app(clock, store, "a")
    app.job(every("1m"), name="m", catch_up="all", catch_up_window="10m")(lambda ctx: None)
    runtime = await started(app)
    await plan_tick(runtime)
    clock.advance(timedelta(minutes=60, seconds=1))
    await plan_tick(runtime)
    plans = sorted(o.plan_time for o in await store.occurrence_list(job="m", limit=1000))
    assert plans[0] == T0 + timedelta(minutes=51)
    assert len(plans) == 10


async def test_max_runs_and_pause_stop_planning(clock: FakeClock, store: MemoryStore) -> None:
    """max_runs caps the planned occurrences; a paused job plans nothing, even after resume."""
    app = make_app(clock, store, "a")
    app.job(every("1s", max_runs=3), name="three")(lambda ctx: None)
    app.job(every("1s"), name="paused")(lambda ctx: None)
    runtime = await started(app)
    await app.apause("paused")
    for _ in range(6):
        clock.advance(1)
        await plan_tick(runtime)
    await app.aresume("paused")
    await plan_tick(runtime)
    assert len(await store.occurrence_list(job="three")) == 3
    assert await store.occurrence_list(job="paused") == []


async def test_executor_runs_and_records_success(clock: FakeClock, store: MemoryStore) -> None:
    """A claimed async handler runs with its context and its result is recorded."""
    app = make_app(clock, store, "a")
    seen = []

    @app.task
    async def greet(ctx, name: str) -> str:  # type: ignore[no-untyped-def]
        seen.append((ctx.attempt, ctx.fencing_token, name))
        return f"hi {name}"

    runtime = await started(app)
    occ_id = await app.aenqueue("greet", {"name": "ada"})
    await runtime.executor.tick()
    await settle(runtime)
    occ = await store.occurrence_get(occ_id)
    assert occ is not None and occ.state is State.SUCCEEDED
    assert occ.result == "hi ada" and occ.instance_id == "a"
    assert seen == [(1, 1, "ada")]


async def test_failures_retry_with_backoff_then_die(clock: FakeClock, store: MemoryStore) -> None:
    """A failing handler is retried after its backoff and is dead after the last attempt."""
    app = make_app(clock, store, "a")

    @app.task(retries=2, backoff="fixed", backoff_base="30s")
    def flaky(ctx) -> None:  # type: ignore[no-untyped-def]
        raise RuntimeError(f"boom {ctx.attempt}")

    runtime = await started(app)
    occ_id = await app.aenqueue(flaky)
    states = []
    for _ in range(3):
        await runtime.executor.tick()
        await settle(runtime)
        occ = await store.occurrence_get(occ_id)
        assert occ is not None
        states.append((occ.state, occ.attempt, occ.error_code))
        await runtime.executor.tick()  # not due yet: backoff holds it
        assert not runtime.executor.active
        clock.advance(34)  # fixed 30 s plus at most 10 % jitter
    assert states == [
        (State.FAILED, 1, "handler_error"),
        (State.FAILED, 2, "handler_error"),
        (State.DEAD, 3, "handler_error"),
    ]
    occ = await store.occurrence_get(occ_id)
    assert occ is not None and "boom 3" in (occ.error_message or "")


async def test_async_timeout_is_recorded(clock: FakeClock, store: MemoryStore) -> None:
    """An async handler past its timeout is cancelled and recorded as timeout."""
    app = make_app(clock, store, "a")
    cancelled = asyncio.Event()

    @app.task(timeout=0.05)
    async def slow(ctx) -> None:  # type: ignore[no-untyped-def]
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    runtime = await started(app)
    occ_id = await app.aenqueue(slow)
    await runtime.executor.tick()
    await settle(runtime)
    occ = await store.occurrence_get(occ_id)
    assert occ is not None and (occ.state, occ.error_code) == (State.DEAD, "timeout")
    assert cancelled.is_set()


async def test_stale_runner_is_fenced_out(clock: FakeClock, store: MemoryStore) -> None:
    """A runner whose lease expired and was taken over cannot write its result."""
    release = asyncio.Event()
    apps = []
    for iid in ("a", "b"):
        app = make_app(clock, store, iid)

        @app.task(name="work", retries=1)
        async def work(ctx) -> str:  # type: ignore[no-untyped-def]
            if ctx.instance_id == "a":
                await release.wait()
            return ctx.instance_id  # type: ignore[no-any-return]

        apps.append(app)
    a, b = [await started(app) for app in apps]
    occ_id = await apps[0].aenqueue("work")
    await a.executor.tick()
    assert occ_id in a.executor.active
    clock.advance(10)  # a's lease (9 s) expires without renewal: a is frozen
    reaped = await b.reaper.store.occurrence_reap()
    assert [(o.error_code, o.crashes) for o in reaped] == [("lease_expired", 1)]
    await b.executor.tick()
    await settle(b)
    release.set()
    await settle(a)
    occ = await store.occurrence_get(occ_id)
    assert occ is not None
    assert (occ.state, occ.instance_id, occ.result, occ.attempt) == (
        State.SUCCEEDED,
        "b",
        "b",
        1,  # a crash is not a failure: b's run is attempt 1 again
    )
    assert a.executor.counts["fenced"] == 1


async def test_overlap_skip_records_skipped(clock: FakeClock, store: MemoryStore) -> None:
    """With overlap=skip, the occurrences that fall due while the previous one runs are
    skipped: 12:00:01 runs until after 12:00:03; 12:00:02 and 12:00:03 (planned at 12:00:02,
    1 s ahead) are skipped at the claim of 12:00:03; the first one still succeeds."""
    app = make_app(clock, store, "a")
    gate = asyncio.Event()

    @app.job(every("1s"), name="long")
    async def long(ctx) -> None:  # type: ignore[no-untyped-def]
        await gate.wait()

    runtime = await started(app)
    await plan_tick(runtime)
    clock.advance(1)
    await runtime.executor.tick()
    clock.advance(1)
    await plan_tick(runtime)
    clock.advance(1)
    await runtime.executor.tick()
    gate.set()
    await settle(runtime)
    rows = sorted(await store.occurrence_list(job="long"), key=lambda o: o.plan_time)
    assert [(o.plan_time.second, o.state.value, o.error_code) for o in rows] == [
        (1, "succeeded", None),
        (2, "skipped", "overlap"),
        (3, "skipped", "overlap"),
    ]


async def test_graceful_stop_releases_unfinished_runs(clock: FakeClock, store: MemoryStore) -> None:
    """On stop, a handler that outlives the grace period is released for another instance."""
    app = make_app(clock, store, "a", grace_period="2s")

    @app.task
    async def forever(ctx) -> None:  # type: ignore[no-untyped-def]
        await asyncio.Event().wait()

    runtime = await started(app)
    occ_id = await app.aenqueue(forever)
    await runtime.executor.tick()
    stopping = asyncio.create_task(runtime.stop())
    for _ in range(50):
        await asyncio.sleep(0.01)
        clock.advance(0.1)
        if stopping.done():
            break
    await asyncio.wait_for(stopping, 5)
    occ = await store.occurrence_get(occ_id)
    assert occ is not None
    assert (occ.state, occ.attempt, occ.error_code) == (State.SCHEDULED, 0, "cancelled")


async def test_scopes_get_independent_streams(clock: FakeClock, store: MemoryStore) -> None:
    """A job with a scope provider gets one occurrence per scope per plan time."""
    app = make_app(clock, store, "a")
    tenants = ["acme", "globex"]
    app.job(every("1m"), name="report", scopes=lambda now: tenants)(lambda ctx: None)
    runtime = await started(app)
    await plan_tick(runtime)
    clock.advance(60)
    await plan_tick(runtime)
    tenants.append("initech")  # a new scope starts from now, no back-fill
    clock.advance(60)
    await plan_tick(runtime)
    rows = await store.occurrence_list(job="report", limit=100)
    by_scope = sorted((o.scope, o.plan_time.minute) for o in rows)
    assert by_scope == [
        ("acme", 1),
        ("acme", 2),
        ("globex", 1),
        ("globex", 2),
    ]


async def test_scopes_with_control_characters_are_not_planned(
    clock: FakeClock, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A scope provider that returns a scope with a NUL or newline gets an ERROR naming it;
    that scope is not planned, the job's other scopes are."""
    app = make_app(clock, store, "a")
    app.job(every("1m"), name="report", scopes=lambda now: ["acme", "bad\x00x", "ev\nil"])(
        lambda ctx: None
    )
    runtime = await started(app)
    with caplog.at_level(logging.ERROR, logger="soloist"):
        await plan_tick(runtime)
        clock.advance(60)
        await plan_tick(runtime)
    rows = await store.occurrence_list(job="report", limit=100)
    assert {o.scope for o in rows} == {"acme"}
    assert any("bad\\x00x" in r.getMessage() for r in caplog.records), caplog.text


async def test_planner_sleeps_until_the_next_plan_time(
    clock: FakeClock, store: MemoryStore
) -> None:
    """The planner wakes just before the next plan time, not on a fixed tick."""
    app = make_app(clock, store, "a", poll_interval="1h")
    app.job(every("10m"), name="ten")(lambda ctx: None)
    runtime = await started(app)
    delay = await plan_tick(runtime)
    # next instant is 12:10; lookahead 1 s; the clock reads 12:00:00
    assert delay == pytest.approx(600 - 1)


async def test_handler_cancelling_itself_is_recorded_cancelled(
    clock: FakeClock, store: MemoryStore
) -> None:
    """A handler that raises CancelledError is recorded with error code cancelled."""
    app = make_app(clock, store, "a")

    @app.task
    async def quits(ctx) -> None:  # type: ignore[no-untyped-def]
        raise asyncio.CancelledError

    runtime = await started(app)
    occ_id = await app.aenqueue(quits)
    await runtime.executor.tick()
    await settle(runtime)
    occ = await store.occurrence_get(occ_id)
    assert occ is not None and (occ.state, occ.error_code) == (State.DEAD, "cancelled")


async def test_handler_raising_base_exception_is_a_panic(
    clock: FakeClock, store: MemoryStore
) -> None:
    """A sync handler raising SystemExit is recorded as handler_panic; the instance lives on."""
    app = make_app(clock, store, "a")

    @app.task
    def exits(ctx) -> None:  # type: ignore[no-untyped-def]
        raise SystemExit(3)

    runtime = await started(app)
    occ_id = await app.aenqueue(exits)
    await runtime.executor.tick()
    await settle(runtime)
    occ = await store.occurrence_get(occ_id)
    assert occ is not None and (occ.state, occ.error_code) == (State.DEAD, "handler_panic")
    assert "SystemExit" in (occ.error_message or "")


async def test_enqueue_many_queues_each_payload_or_none(
    clock: FakeClock, store: MemoryStore
) -> None:
    """enqueue_many queues one occurrence per payload; one bad payload queues nothing."""
    app = make_app(clock, store, "a")

    @app.task
    def mail(ctx, to: str) -> None:  # type: ignore[no-untyped-def]
        return None

    assert await app.aenqueue_many(mail, [{"to": f"u{i}"} for i in range(50)]) == 50
    rows = await store.occurrence_list(job="mail", limit=100)
    assert sorted(o.payload["to"] for o in rows) == sorted(f"u{i}" for i in range(50))
    with pytest.raises(PayloadError, match="'cc'"):
        await app.aenqueue_many(mail, [{"to": "x"}, {"to": "y", "cc": "z"}])
    assert len(await store.occurrence_list(job="mail", limit=100)) == 50


async def test_local_mode_runs_every_job_in_every_instance(
    clock: FakeClock, store: MemoryStore
) -> None:
    """mode='local': each instance plans and claims its own occurrence of every instant,
    under the job's own name (an instance-local task name keeps the copies apart)."""
    seen: list[str] = []
    runtimes = []
    for iid in ("a", "b"):
        app = make_app(clock, store, iid, mode="local")
        app.job(every("1s"), name="tick", overlap="allow")(lambda ctx: seen.append(ctx.job))
        runtimes.append(await started(app))
    for _ in range(2):
        for runtime in runtimes:
            await plan_tick(runtime)
        clock.advance(1)
    for runtime in runtimes:
        await runtime.executor.tick()
        await settle(runtime)
    rows = await store.occurrence_list(limit=100)
    ran = sorted((o.plan_time.second, o.instance_id) for o in rows if o.state is State.SUCCEEDED)
    assert ran == [(1, "a"), (1, "b"), (2, "a"), (2, "b")]
    assert {o.job for o in rows} == {"tick"} and seen == ["tick"] * 4
    assert {(o.task, o.instance_id) for o in rows} == {
        (local_name("tick", "a"), "a"),
        (local_name("tick", "b"), "b"),
    }
    assert len(await store.occurrence_list(job="tick", limit=100)) == 4  # history --job tick


async def test_local_mode_private_copies_do_not_skip_each_other(
    clock: FakeClock, store: MemoryStore
) -> None:
    """mode='local' with the default overlap='skip': one instance's running copy of an
    instant does not make another instance's copy skip."""
    gate = threading.Event()
    runtimes = []
    for iid in ("a", "b"):
        app = make_app(clock, store, iid, mode="local")
        app.job(every("1s"), name="tick")(lambda ctx: gate.wait(5))
        runtimes.append(await started(app))
    for runtime in runtimes:
        await plan_tick(runtime)
    clock.advance(1)
    for runtime in runtimes:
        await plan_tick(runtime)
        await runtime.executor.tick()  # a's copy is still running when b claims its own
    gate.set()
    for runtime in runtimes:
        await settle(runtime)
    rows = await store.occurrence_list(limit=100)
    copies = sorted((o.job, o.task, o.state.value) for o in rows if o.plan_time.second == 1)
    assert copies == [
        ("tick", local_name("tick", "a"), "succeeded"),
        ("tick", local_name("tick", "b"), "succeeded"),
    ]
    assert all(o.state is not State.SKIPPED for o in rows)


async def test_leader_mode_the_leader_plans_dynamic_schedules_and_any_instance_runs_them(
    clock: FakeClock, store: MemoryStore
) -> None:
    """mode='leader': only the leader plans a dynamic schedule; its occurrences run a
    queued task, so a follower claims and runs them as it does queued tasks (while the
    code-defined job runs on the leader only)."""
    runtimes = []
    for iid in ("a", "b"):
        app = make_app(clock, store, iid, mode="leader")
        app.task(name="report")(lambda ctx: ctx.instance_id)
        app.job(every("1s"), name="tick")(lambda ctx: ctx.instance_id)
        runtimes.append((app, await started(app)))
    (app_a, a), (_, b) = runtimes
    await a.elector.tick()
    await b.elector.tick()
    assert a.elector.is_leader and not b.elector.is_leader
    await app_a.schedules.aadd("report-1", task="report", schedule=every("1s"))
    await plan_tick(b)
    assert await store.occurrence_list(limit=10) == []  # a follower plans nothing
    await plan_tick(a)
    clock.advance(1)
    await b.executor.tick()  # the follower claims the dynamic schedule's occurrence only
    await settle(b)
    rows = await store.occurrence_list(limit=10)
    ran = {(o.job, o.instance_id) for o in rows if o.state is State.SUCCEEDED}
    assert ran == {("report-1", "b")}
    await a.executor.tick()
    await settle(a)
    rows = await store.occurrence_list(limit=10)
    assert {(o.job, o.instance_id) for o in rows if o.state is State.SUCCEEDED} == {
        ("report-1", "b"),
        ("tick", "a"),
    }
