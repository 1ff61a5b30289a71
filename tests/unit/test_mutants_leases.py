"""Lease handling where ``make mutate MUTATE=leases`` found no test: a renewal the store
refuses loses the run; ``ctx.aheartbeat()`` renews a held lease and says why it cannot;
``ctx.heartbeat()`` refuses to run on the handler's own loop; the heartbeater backs off
after failed renewals and starts again from the beat once one succeeds.

Then a graceful stop (SPEC 8): handlers that end within the grace period are recorded, a
failed or hung release still lets the stop end and the queued outcomes be written, an async
handler is cancelled before its lease is released (and one that ignores it is not waited
for), a sync one is neither waited for nor counted leaked, a queued sync call never starts
after its release, no claim is sent once the stop began. Free slots: a lost waiting run
leaves ``active``; reclaiming its own reaped occurrence loses the stale run and leaves
``recording`` at 0. lose() leaves a run whose outcome is being written alone. Lease
deadlines at the edges (a renewal capped at the earliest deadline, check_leases past a lost
run, a claim answered with 0.5 s or 0 s left), the lease metrics, and hand-backs."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from test_claim_ahead_faults import drain_during_a_hand_back, fill_line, make, setup_line
from test_claim_ahead_faults import settle as settle_line
from test_leases import BEAT, T0, TRUSTED, TTL, RenewalCounter, claim_one, ended, make_app
from ticks import started

from soloist import Scheduler
from soloist.errors import LeaseLostError, OccurrenceCancelledError, StoreUnavailableError
from soloist.models import Claimed, State
from soloist.runtime import Runtime
from soloist.runtime.executor import AHEAD_HANDBACK
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(clock: FakeClock) -> RenewalCounter:
    return RenewalCounter(MemoryStore("memory://", clock=clock))


async def test_a_renewal_the_store_refuses_loses_the_run(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """When the store answers a renewal without the run (its lease was released and the
    row is claimable again, as after a reap), the executor loses the run at once, though its
    local deadline is still ahead: the async handler is cancelled, nothing is written, and
    the run is counted as lease_lost."""
    runtime, run, seen = await claim_one(make_app(clock, store))
    occ = run.occ
    assert await store.lease_release("a", [Claimed(occ.id, occ.fencing_token)]) == {occ.id}
    clock.advance(BEAT)
    assert run.lease_deadline > clock.monotonic()
    await runtime.heartbeater.tick()
    assert run.ctx.lease_lost
    await ended(run)
    assert seen.get("cancelled") is True
    assert runtime.executor.counts["lease_lost"] == 1
    row = await store.occurrence_get(occ.id)
    assert row is not None and row.state == State.SCHEDULED and row.finished_at is None
    calls = len(store.renewals)
    assert await runtime.executor.renew([run]) is False  # a lost run is not renewed again
    assert len(store.renewals) == calls


async def test_aheartbeat_renews_a_held_lease_and_names_a_lost_one(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """``await ctx.aheartbeat()`` with the lease held renews it in the store and returns;
    after the lease is lost it raises LeaseLostError naming the occurrence, its job and plan
    time. ``ctx.heartbeat()`` called on the handler's own loop is refused, naming the call
    to use instead."""
    runtime, run, seen = await claim_one(make_app(clock, store))
    ctx = seen["ctx"]
    clock.advance(BEAT)
    await ctx.aheartbeat()
    row = await store.occurrence_get(run.occ.id)
    assert row is not None and row.lease_expires_at == clock.now() + timedelta(seconds=TTL)
    assert store.renewals[-1] == [run.occ.id] and not ctx.lease_lost
    with pytest.raises(
        RuntimeError, match=r"^in an async handler, use 'await ctx\.aheartbeat\(\)'$"
    ):
        ctx.heartbeat()
    runtime.executor.lose(run)
    with pytest.raises(LeaseLostError) as lost:
        await ctx.aheartbeat()
    plan = run.occ.plan_time.isoformat()
    assert str(lost.value) == (
        f"lease of occurrence {run.occ.id} (wait at {plan}) was lost; its result will be fenced out"
    )
    await ended(run)


async def test_aheartbeat_names_a_cancelled_occurrence(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """Once the occurrence's cancellation was requested, ``ctx.aheartbeat()`` raises
    OccurrenceCancelledError naming it."""
    app = make_app(clock, store)
    runtime, run, seen = await claim_one(app)
    ctx: Any = seen["ctx"]
    ctx._cancelled = True  # what the executor sets once a renewal reports the request
    with pytest.raises(OccurrenceCancelledError) as cancelled:
        await ctx.aheartbeat()
    plan = run.occ.plan_time.isoformat()
    assert str(cancelled.value) == (
        f"occurrence {run.occ.id} (wait at {plan}) was cancelled on request"
    )
    runtime.executor.lose(run)
    await ended(run)


async def test_the_heartbeater_backs_off_after_failures_and_resets_after_a_success(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """While renewals fail, the heartbeater tries again after 0.1 s, then twice as long
    each time, never longer than its beat; the first renewal that succeeds puts it back on
    the beat, and the next failure starts from 0.1 s again."""
    runtime, run, _ = await claim_one(make_app(clock, store))
    heartbeater = runtime.heartbeater
    store.failing = True
    waits = [await heartbeater.tick() for _ in range(7)]
    assert waits == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, BEAT, BEAT])
    assert heartbeater.failures == 7
    store.failing = False
    assert await heartbeater.tick() == pytest.approx(BEAT)
    assert heartbeater.failures == 0
    store.failing = True
    assert await heartbeater.tick() == pytest.approx(0.1)
    store.failing = False
    runtime.executor.lose(run)
    await ended(run)
    await asyncio.sleep(0)


async def test_aheartbeat_while_the_store_fails_trusts_the_lease_until_its_deadline(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """A renewal that fails (the store does not answer) is not a lost lease: before the
    local deadline ``ctx.aheartbeat()`` returns; once it has passed, it raises
    LeaseLostError."""
    _, run, seen = await claim_one(make_app(clock, store))
    ctx = seen["ctx"]
    store.failing = True
    clock.advance(BEAT)
    await ctx.aheartbeat()
    assert not ctx.lease_lost
    clock.advance(TTL)
    with pytest.raises(LeaseLostError):
        await ctx.aheartbeat()
    await ended(run)


# -- helpers of the tests below ------------------------------------------------------------------
#: A short heartbeat: the executor's store calls on the lease path (a renewal, a release)
#: then time out after 0.2 s of real time, so that a hung call ends a test quickly.
QUICK_BEAT = "0.2s"


def quick_app(clock: FakeClock, store: Any, **options: Any) -> Scheduler:
    """Instance ``a``, lease 9 s, heartbeat (and call timeout) 0.2 s."""
    return Scheduler(
        store, instance_id="a", clock=clock, lease_ttl=f"{TTL}s", heartbeat=QUICK_BEAT, **options
    )


async def spin(turns: int = 20) -> None:
    """Let the event loop run the ready callbacks (no time passes on the fake clock)."""
    for _ in range(turns):
        await asyncio.sleep(0)


class Blocking:
    """A sync task that blocks its thread until :attr:`let_go` is set (5 s at most)."""

    def __init__(self, app: Scheduler, name: str = "blocking") -> None:
        self.name = name
        self.running, self.let_go, self.returned = (threading.Event() for _ in range(3))

        @app.task(name=name)
        def blocking(ctx: Any) -> None:
            self.running.set()
            self.let_go.wait(5)
            self.returned.set()

    async def start(self, app: Scheduler, runtime: Runtime) -> tuple[str, Any]:
        """Enqueue it and let a tick start it; its id and run, once its handler runs."""
        occ_id = await app.aenqueue(self.name)
        await runtime.executor.tick()
        run = runtime.executor.active[occ_id]
        assert await asyncio.to_thread(self.running.wait, 5)
        return occ_id, run


def sample(runtime: Runtime, name: str, **labels: str) -> float:
    """The value of one sample of the runtime's metrics (0 when it has none yet)."""
    return runtime.metrics.registry.get_sample_value(name, labels) or 0.0


def actions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(r, "action", "") for r in caplog.records]


# -- a graceful stop (SPEC 8) ----------------------------------------------------------------------
async def test_a_stop_lets_every_handler_that_ends_within_the_grace_period_finish(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """drain(grace=5) with two async handlers that end 1 s and 2 s into the stop: both are
    recorded succeeded with their results, none is released, and nothing is handed back."""
    app = make_app(clock, store)

    @app.task(name="work")
    async def work(ctx: Any, seconds: float) -> str:
        await clock.sleep(seconds)
        return f"slept {seconds}"

    runtime = await started(app)
    ex = runtime.executor
    ids = [await app.aenqueue("work", {"seconds": s}) for s in (1.0, 2.0)]
    await ex.tick()
    await spin()
    assert clock.sleepers == 2
    draining = asyncio.ensure_future(ex.drain(5))
    await spin()
    for _ in range(5):  # one second at a time, to the end of the grace period
        clock.advance(1)
        await spin()
    await asyncio.wait_for(draining, 5)
    for occ_id, seconds in zip(ids, (1.0, 2.0), strict=True):
        row = await store.occurrence_get(occ_id)
        assert row is not None
        assert (row.state, row.result) == (State.SUCCEEDED, f"slept {seconds}")
    assert ex.counts["succeeded"] == 2
    assert sample(runtime, "soloist_runs_total", job="work", outcome="released") == 0


@pytest.mark.parametrize("fault", ["raises", "hangs"])
async def test_a_stop_whose_release_fails_still_returns_and_writes_the_queued_outcomes(
    clock: FakeClock, store: RenewalCounter, caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    """At a stop, lease_release raises a store error, or never answers: drain() still
    returns (a hung release is given up after the call timeout), logs release_failed, and
    the outcome that was queued when the stop began is written all the same; the run it
    could not release keeps its lease until it expires (nothing counted released)."""
    app = quick_app(clock, store)
    let_write = asyncio.Event()

    @app.task(name="quick")
    async def quick(ctx: Any) -> str:
        return "done"

    @app.task(name="slow")
    async def slow(ctx: Any) -> None:
        await asyncio.Event().wait()

    inner_complete = store._inner.occurrence_complete

    async def held_complete(*a: Any, **k: Any) -> Any:
        await let_write.wait()  # the write is slow: still queued when the stop begins
        return await inner_complete(*a, **k)

    async def failing_release(*a: Any, **k: Any) -> Any:
        let_write.set()
        if fault == "hangs":
            await asyncio.Event().wait()
        raise StoreUnavailableError("connection reset (injected)")

    store.occurrence_complete = held_complete  # type: ignore[attr-defined]
    store.lease_release = failing_release  # type: ignore[attr-defined]
    runtime = await started(app)
    ex = runtime.executor
    slow_id = await app.aenqueue("slow")
    quick_id = await app.aenqueue("quick")
    await ex.tick()
    await spin()
    assert ex.active[quick_id].recorded and not let_write.is_set()
    with caplog.at_level(logging.WARNING, logger="soloist"):
        await asyncio.wait_for(ex.drain(0), 3)
    assert "release_failed" in actions(caplog)
    done = await store.occurrence_get(quick_id)
    assert done is not None and (done.state, done.result) == (State.SUCCEEDED, "done")
    held = await store.occurrence_get(slow_id)
    assert held is not None and (held.state, held.instance_id) == (State.RUNNING, "a")
    assert sample(runtime, "soloist_runs_total", job="slow", outcome="released") == 0


async def test_a_stop_cancels_a_running_async_handler_before_it_releases_the_lease(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """drain(grace=0): the async handler still running is cancelled, and its cleanup has
    run before lease_release is sent (so another instance never runs it alongside); the
    occurrence is claimable again with no attempt spent, and the run is counted as
    soloist_runs_total{job="wait",outcome="released"}."""
    runtime, run, seen = await claim_one(make_app(clock, store))
    inner_release = store._inner.lease_release
    cleaned_up_at_release: list[bool] = []

    async def release(*a: Any, **k: Any) -> Any:
        cleaned_up_at_release.append(seen.get("cancelled") is True)
        return await inner_release(*a, **k)

    store.lease_release = release  # type: ignore[attr-defined]
    await asyncio.wait_for(runtime.executor.drain(0), 5)
    assert cleaned_up_at_release == [True]
    row = await store.occurrence_get(run.occ.id)
    assert row is not None and (row.state, row.attempt) == (State.SCHEDULED, 0)
    assert sample(runtime, "soloist_runs_total", job="wait", outcome="released") == 1
    assert sample(runtime, "soloist_runs_total", job="(dynamic)", outcome="released") == 0


async def test_a_stop_does_not_wait_forever_for_an_async_handler_that_ignores_cancellation(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """An async handler that swallows its cancellation and keeps awaiting: drain() waits
    for it one call timeout at most, then releases its lease and returns."""
    app = quick_app(clock, store)
    swallowed, let_go = asyncio.Event(), asyncio.Event()

    @app.task(name="stubborn")
    async def stubborn(ctx: Any) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            swallowed.set()
            await let_go.wait()

    runtime = await started(app)
    ex = runtime.executor
    occ_id = await app.aenqueue("stubborn")
    await ex.tick()
    await spin()
    run = ex.active[occ_id]
    try:
        await asyncio.wait_for(ex.drain(0), 3)
        assert swallowed.is_set() and run.task is not None and not run.task.done()
        row = await store.occurrence_get(occ_id)
        assert row is not None and row.state == State.SCHEDULED
    finally:
        let_go.set()
        await ended(run)


async def test_a_stop_neither_waits_for_a_sync_handler_nor_counts_it_as_leaked(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """drain(grace=0) while a sync handler blocks: drain() returns while the handler still
    runs (its thread is not joined), its lease is released, and its thread is not counted
    as leaked (soloist_thread_leaks_total stays 0: a stop is not a timeout)."""
    app = quick_app(clock, store)
    blocking = Blocking(app)
    runtime = await started(app)
    ex = runtime.executor
    occ_id, run = await blocking.start(app, runtime)
    try:
        await asyncio.wait_for(ex.drain(0), 5)
        assert not blocking.returned.is_set(), "drain() waited for the sync handler to return"
        row = await store.occurrence_get(occ_id)
        assert row is not None and row.state == State.SCHEDULED
        assert sample(runtime, "soloist_thread_leaks_total") == 0
        assert sample(runtime, "soloist_runs_total", job="blocking", outcome="released") == 1
    finally:
        blocking.let_go.set()
        await ended(run)


async def test_no_queued_sync_call_starts_after_its_lease_was_released(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """A timed-out sync handler holds the only worker thread (max_leaked_threads=0: not
    replaced), so the next sync run waits in the pool's queue. A stop releases its lease
    (another instance may run it at once) and drops the queued call: when the leaked thread
    frees up, that handler never starts here."""
    app = quick_app(clock, store, concurrency=1, max_leaked_threads=0)
    stuck_running, let_go = threading.Event(), threading.Event()
    started_late: list[str] = []

    @app.task(name="stuck", timeout="0.05s", retries=0)
    def stuck(ctx: Any) -> None:
        stuck_running.set()
        let_go.wait(5)

    @app.task(name="later")
    def later(ctx: Any) -> None:
        started_late.append(ctx.occurrence_id)

    runtime = await started(app)
    ex = runtime.executor
    threads: list[threading.Thread] = []
    try:
        await app.aenqueue("stuck")
        await ex.tick()
        (stuck_run,) = ex.active.values()
        await ended(stuck_run)  # timed out; its thread still runs the handler
        assert stuck_running.is_set() and ex.pool.saturated
        later_id = await app.aenqueue("later")
        await ex.tick()
        assert ex.active[later_id].task is not None  # started: its call waits for a thread
        threads = list(ex.pool._threads)  # to join them: whatever they run has run
        await asyncio.wait_for(ex.drain(0), 5)
        row = await store.occurrence_get(later_id)
        assert row is not None and row.state == State.SCHEDULED  # released to others
    finally:
        let_go.set()
        for thread in threads:
            await asyncio.to_thread(thread.join, 5)
    assert started_late == [], "a sync handler started after its lease was released"


async def test_no_claim_is_sent_once_a_graceful_stop_began(clock: FakeClock) -> None:
    """The executor's tick is blocked in a hand-back when drain() begins: once that tick
    goes on, it sends no claim to the store (the claims themselves are watched, not the
    executor's flag)."""
    app, _store, gate, _ran, quick, slow = setup_line(clock)
    runtime = await started(app)
    ex = runtime.executor
    await fill_line(app, runtime, clock, quick, slow)
    stopping = False
    claims_after_stop: list[tuple[Any, ...]] = []
    real_claim = ex.store.occurrence_claim

    async def claim(*a: Any, **k: Any) -> Any:
        if stopping:
            claims_after_stop.append((*a, k))
        return await real_claim(*a, **k)

    def stop_begins() -> None:
        nonlocal stopping
        stopping = True

    ex.store.occurrence_claim = claim  # type: ignore[method-assign]
    await drain_during_a_hand_back(app, runtime, clock, gate, quick, stop_begins)
    assert claims_after_stop == [], f"claims sent after the stop began: {claims_after_stop}"


# -- free slots -----------------------------------------------------------------------------------
async def test_a_waiting_run_whose_renewal_is_refused_leaves_active_and_frees_its_place(
    clock: FakeClock,
) -> None:
    """A run claimed ahead whose renewal the store refuses (its lease was given up) is
    dropped: it leaves the line and ``active``, so that once the running handlers end
    every slot is free again."""
    app, memory, gate, _ran, quick, slow = setup_line(clock)
    runtime = await started(app)
    ex = runtime.executor
    await fill_line(app, runtime, clock, quick, slow)
    lost = ex.waiting[0]
    assert await memory.lease_release("a", [lost.claim]) == {lost.occ.id}
    await runtime.heartbeater.tick()
    assert lost.ctx.lease_lost and lost not in ex.waiting
    assert lost.occ.id not in ex.active
    gate.set()
    await settle_line(runtime)
    assert len(ex.waiting) == 2 and ex.free_slots() == ex.concurrency == 2


async def test_reclaiming_its_own_reaped_occurrence_loses_the_stale_async_run(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """The process was frozen past the lease: the occurrence is reaped, and this instance's
    executor claims it again before the heartbeater's check. The stale async run is lost
    then: ctx.lease_lost, its handler cancelled and counted lease_lost; the new run holds
    the occurrence in ``active``."""
    runtime, stale, seen = await claim_one(make_app(clock, store))
    ex = runtime.executor
    occ_id = stale.occ.id
    clock.advance(TTL)  # no heartbeat reached the store: its lease expired
    await runtime.reaper.tick()
    assert runtime.reaper.reaped_total == 1
    await ex.tick()  # claims it again (token 2) before any check_leases
    assert stale.ctx.lease_lost and stale.cancelled_for_lease
    await ended(stale, timeout=1)
    assert seen.get("cancelled") is True and ex.counts["lease_lost"] == 1
    fresh = ex.active[occ_id]
    assert fresh is not stale and fresh.occ.fencing_token == 2 and not fresh.ctx.lease_lost
    ex.lose(fresh)
    await ended(fresh)


async def test_reclaiming_an_occurrence_whose_outcome_write_hung_leaves_no_slot_recording(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """A run's outcome write hangs past its store lease; the occurrence is reaped and
    claimed again here. When both runs have ended (the stale write fenced out, the new run
    succeeded), ``recording`` is back to 0 and every slot is free."""
    app = make_app(clock, store, concurrency=2)
    hold = asyncio.Event()

    @app.task(name="work")
    async def work(ctx: Any) -> int:
        return int(ctx.fencing_token)

    inner_complete = store._inner.occurrence_complete

    async def complete(instance_id: str, outcomes: Any, *a: Any, **k: Any) -> Any:
        if any(o.fencing_token == 1 for o in outcomes):
            await hold.wait()  # the first run's write hangs
        return await inner_complete(instance_id, outcomes, *a, **k)

    store.occurrence_complete = complete  # type: ignore[attr-defined]
    runtime = await started(app)
    ex = runtime.executor
    occ_id = await app.aenqueue("work")
    await ex.tick()
    await spin()
    stale = ex.active[occ_id]
    assert stale.recorded and ex.recording == 1
    clock.advance(TTL)
    await runtime.reaper.tick()
    await ex.tick()  # claimed again here while the stale write still hangs
    assert ex.active[occ_id] is not stale
    await spin()
    hold.set()
    await ended(stale)
    await settle_line(runtime)
    assert (ex.counts["fenced"], ex.counts["succeeded"]) == (1, 1)
    row = await store.occurrence_get(occ_id)
    assert row is not None and (row.state, row.result) == (State.SUCCEEDED, 2)
    assert ex.active == {} and ex.recording == 0
    assert ex.free_slots() == ex.concurrency


# -- lose() -------------------------------------------------------------------------------------
async def test_lose_leaves_a_run_whose_outcome_is_being_written_alone(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """lose() on a run whose handler is done and whose outcome is being written does
    nothing (that fenced write says whether it applied): ctx.lease_lost stays false, the
    run is not cancelled, and the write records it succeeded."""
    app = make_app(clock, store)
    hold = asyncio.Event()

    @app.task(name="work")
    async def work(ctx: Any) -> str:
        return "done"

    inner_complete = store._inner.occurrence_complete

    async def complete(*a: Any, **k: Any) -> Any:
        await hold.wait()
        return await inner_complete(*a, **k)

    store.occurrence_complete = complete  # type: ignore[attr-defined]
    runtime = await started(app)
    ex = runtime.executor
    occ_id = await app.aenqueue("work")
    await ex.tick()
    await spin()
    run = ex.active[occ_id]
    assert run.recorded
    ex.lose(run)
    assert not run.ctx.lease_lost and not run.cancelled_for_lease
    hold.set()
    await ended(run)
    assert run.task is not None and not run.task.cancelled()
    row = await store.occurrence_get(occ_id)
    assert row is not None and (row.state, row.result) == (State.SUCCEEDED, "done")
    assert (ex.counts["succeeded"], ex.counts["lease_lost"]) == (1, 0)


# -- lease deadlines at the edges -----------------------------------------------------------------
async def test_check_leases_goes_on_past_a_run_it_has_nothing_to_do_for(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """check_leases() skips a run already lost (a sync handler still running, so still in
    ``active``) and goes on: the async run after it, past its deadline, is lost and
    cancelled."""
    app = make_app(clock, store)
    blocking = Blocking(app)
    cancelled = asyncio.Event()

    @app.task(name="waiting")
    async def waiting(ctx: Any) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    runtime = await started(app)
    ex = runtime.executor
    first_id, first = await blocking.start(app, runtime)
    try:
        ex.lose(first)  # sync: only told; it stays in active until its thread returns
        second_id = await app.aenqueue("waiting")
        await ex.tick()
        await spin()  # its handler awaits
        second = ex.active[second_id]
        assert list(ex.active) == [first_id, second_id]
        clock.advance(TRUSTED)
        ex.check_leases()
        assert second.ctx.lease_lost
        await ended(second, timeout=1)
        assert cancelled.is_set()
    finally:
        blocking.let_go.set()
        await ended(first)


async def test_a_renewal_gives_up_at_the_earliest_lease_deadline(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """With 0.2 s of trust left on the lease and a store that answers a renewal only after
    2 s (the call timeout is 3 s), the renewal is given up at the lease deadline: it raises
    TimeoutError instead of waiting for that answer."""
    runtime, run, _ = await claim_one(make_app(clock, store))
    clock.advance(TRUSTED - 0.2)
    inner_renew = store._inner.lease_renew

    async def late_renew(*a: Any, **k: Any) -> Any:
        await asyncio.sleep(2)
        return await inner_renew(*a, **k)

    store._inner.lease_renew = late_renew  # type: ignore[method-assign]
    assert runtime.executor.call_timeout == BEAT
    with pytest.raises(TimeoutError):
        await runtime.executor.renew([run])
    runtime.executor.lose(run)
    await ended(run)


async def claimed_late(
    clock: FakeClock,
    store: RenewalCounter,
    late: float,
    prepare: Callable[[Any], None] = lambda ex: None,
) -> tuple[Any, list[int], str]:
    """One enqueued run of a task claimed by a tick whose claim is answered ``late``
    seconds (on the fake clock) after it was sent; ``prepare`` sees the executor first.
    The runtime, the fencing tokens the handler ran with, and the occurrence id."""
    app = make_app(clock, store)
    ran: list[int] = []

    @app.task(name="work")
    async def work(ctx: Any) -> None:
        ran.append(ctx.fencing_token)

    runtime = await started(app)
    prepare(runtime.executor)
    occ_id = await app.aenqueue("work")
    inner_claim = store._inner.occurrence_claim

    async def late_claim(*a: Any, **k: Any) -> Any:
        got = await inner_claim(*a, **k)
        clock.advance(late)
        return got

    store.occurrence_claim = late_claim  # type: ignore[attr-defined]
    await runtime.executor.tick()
    await settle_line(runtime)
    return runtime, ran, occ_id


async def test_a_claim_answered_with_half_a_second_of_lease_left_still_runs(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """A claim whose answer leaves 0.5 s of trusted lease: the handler runs, and the
    heartbeater is woken for that near deadline."""
    woken: list[bool] = []
    _runtime, ran, occ_id = await claimed_late(
        clock,
        store,
        TRUSTED - 0.5,
        lambda ex: setattr(ex, "on_short_lease", lambda: woken.append(True)),
    )
    assert ran == [1] and woken == [True]
    row = await store.occurrence_get(occ_id)
    assert row is not None and row.state == State.SUCCEEDED


async def test_a_claim_answered_exactly_at_its_local_deadline_ends_lease_lost_at_once(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """A claim whose answer arrives exactly at sent + ttl - margin: the lease is no longer
    trusted, so the handler does not run, and the run ends lease_lost at once, counted as
    soloist_runs_total{outcome="lease_lost"} (as a later answer is)."""
    runtime, ran, occ_id = await claimed_late(clock, store, TRUSTED)
    ex = runtime.executor
    assert ran == [] and occ_id not in ex.active
    assert ex.counts["lease_lost"] == 1
    assert sample(runtime, "soloist_runs_total", job="work", outcome="lease_lost") == 1


# -- metrics --------------------------------------------------------------------------------------
async def test_a_failed_renewal_counts_a_lease_renew_store_error_and_names_it(
    clock: FakeClock, store: RenewalCounter, caplog: pytest.LogCaptureFixture
) -> None:
    """A renewal that fails with a store error adds 1 to
    soloist_store_errors_total{operation="lease_renew"}, and the renew_failed warning
    names the error."""
    runtime, run, _ = await claim_one(make_app(clock, store))
    store.failing = True
    with caplog.at_level(logging.WARNING, logger="soloist"):
        await runtime.heartbeater.tick()
    assert sample(runtime, "soloist_store_errors_total", operation="lease_renew") == 1
    (warning,) = [r for r in caplog.records if getattr(r, "action", "") == "renew_failed"]
    assert "StoreUnavailableError: no route to host (injected)" in warning.getMessage()
    runtime.executor.lose(run)
    await ended(run)


async def test_a_reaped_lease_counts_a_steal_under_its_job(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """The reaper taking over the expired lease of a job defined in code adds 1 to
    soloist_lease_steals_total under that job's own label."""
    app = make_app(clock, store)
    app.task(name="work")(lambda ctx: None)
    runtime = await started(app)
    await app.aenqueue("work")
    assert len(await store.occurrence_claim("dead", ["work"], 1, timedelta(seconds=TTL))) == 1
    clock.advance(TTL)
    await runtime.reaper.tick()
    assert sample(runtime, "soloist_lease_steals_total", job="work") == 1
    assert sample(runtime, "soloist_lease_steals_total", job="(dynamic)") == 0


async def test_a_run_that_loses_its_lease_is_counted_and_timed_under_its_job(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """A run that loses its lease 2 s after it started (itself 5 s after the clock began)
    counts soloist_runs_total{job="wait",outcome="lease_lost"} and adds one
    soloist_run_duration_seconds observation of 2 s under its job."""
    clock.advance(5)
    runtime, run, _ = await claim_one(make_app(clock, store))
    clock.advance(2)
    runtime.executor.lose(run)
    await ended(run)
    assert sample(runtime, "soloist_runs_total", job="wait", outcome="lease_lost") == 1
    assert sample(runtime, "soloist_run_duration_seconds_count", job="wait") == 1
    assert sample(runtime, "soloist_run_duration_seconds_sum", job="wait") == pytest.approx(2.0)


# -- hand-backs -----------------------------------------------------------------------------------
async def test_handed_back_counts_every_hand_back(clock: FakeClock) -> None:
    """``executor.handed_back`` counts the runs handed back ever: two hand-backs of one
    run each make 2."""
    app, _memory, gate, _ran, quick, slow = setup_line(clock)
    runtime = await started(app)
    ex = runtime.executor
    await fill_line(app, runtime, clock, quick, slow)
    await ex.hand_back([ex.waiting[0]], "test")
    await ex.hand_back([ex.waiting[0]], "test")
    assert ex.handed_back == 2 and len(ex.waiting) == 1
    gate.set()
    await settle_line(runtime)


async def test_a_hung_hand_back_gives_up_after_the_call_timeout(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """lease_release never answers at a hand-back: the tick returns after the call
    timeout, logs hand_back_failed, and the runs never start here (whether the release
    applied is unknown)."""
    app, _memory = make(clock, heartbeat=QUICK_BEAT)
    gate = asyncio.Event()
    ran: list[str] = []

    @app.task
    async def quick(ctx: Any) -> None:
        ran.append(ctx.occurrence_id)

    @app.task
    async def slow(ctx: Any) -> None:
        await gate.wait()

    runtime = await started(app)
    ex = runtime.executor
    quick_ids = await fill_line(app, runtime, clock, quick, slow, ran)

    async def hung_release(*a: Any, **k: Any) -> Any:
        await asyncio.Event().wait()

    ex.store.lease_release = hung_release  # type: ignore[method-assign]
    clock.advance(AHEAD_HANDBACK + 0.01)
    with caplog.at_level(logging.WARNING, logger="soloist"):
        await asyncio.wait_for(ex.tick(), 3)
    assert "hand_back_failed" in actions(caplog)
    assert not ex.waiting and not set(quick_ids) & set(ex.active)
    gate.set()
    await settle_line(runtime)
    await ex.tick()
    await settle_line(runtime)
    assert not set(quick_ids) & set(ran)
