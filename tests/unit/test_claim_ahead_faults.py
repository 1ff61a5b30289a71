"""Claiming ahead under faults (soloist.runtime.executor, "Claiming ahead"): a lost
hand-back answer, a frozen process, a stop, stalled outcome writes, overlap groups. Each
of these failed on the first version of claiming ahead (found in review)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from ticks import started

from soloist import Scheduler
from soloist.models import State
from soloist.runtime.completer import STALLED
from soloist.runtime.executor import AHEAD_HANDBACK, AHEAD_MAX
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


def make(clock: FakeClock, iid: str = "a", store: MemoryStore | None = None, **options: Any):
    store = store or MemoryStore("memory://", clock=clock)
    options.setdefault("concurrency", 2)
    app = Scheduler(store, instance_id=iid, clock=clock, lease_ttl="9s", **options)
    return app, store


async def settle(runtime) -> None:
    for _ in range(50):
        tasks = [
            r.task
            for r in runtime.executor.active.values()
            if r.task is not None and not r.task.done()
        ]
        if tasks:
            await asyncio.wait(tasks, timeout=0.05)
        await runtime.executor.completer.drain()
        await asyncio.sleep(0)


async def warm(app, runtime, task) -> None:
    """One short run so that the executor knows handlers are short (claiming ahead on)."""
    await app.aenqueue(task)
    await runtime.executor.tick()
    await settle(runtime)
    assert runtime.executor.ahead_target() > 0


def setup_line(clock):
    """Instance a, concurrency 2: two `slow` runs hold both slots, three `quick` runs wait."""
    app, store = make(clock)
    gate = asyncio.Event()
    ran: list[tuple[str, str]] = []

    @app.task
    async def quick(ctx) -> None:  # type: ignore[no-untyped-def]
        ran.append((ctx.instance_id, ctx.occurrence_id))

    @app.task
    async def slow(ctx) -> None:  # type: ignore[no-untyped-def]
        await gate.wait()

    return app, store, gate, ran, quick, slow


async def fill_line(app, runtime, clock, quick, slow, ran=None) -> list[str]:  # type: ignore[no-untyped-def]
    """Claiming ahead on (one short run, then ``ran`` cleared), then two slow runs take
    both slots and three quick ones are claimed ahead: they wait. Their ids."""
    await warm(app, runtime, quick)
    if ran is not None:
        ran.clear()
    for _ in range(2):
        await app.aenqueue(slow)
    clock.advance(0.001)
    quick_ids = [await app.aenqueue(quick) for _ in range(3)]
    await runtime.executor.tick()
    assert {r.occ.id for r in runtime.executor.waiting} == set(quick_ids)
    return quick_ids


async def test_a_hand_back_whose_answer_is_lost_must_not_start_the_runs_here() -> None:
    """lease_release applied but its answer was lost (timeout): the runs are claimable by
    any instance, so this one must not start them."""
    clock = FakeClock(T0)
    app, store, gate, ran, quick, slow = setup_line(clock)
    runtime = await started(app)
    ex = runtime.executor
    quick_ids = await fill_line(app, runtime, clock, quick, slow, ran)
    assert {r.occ.id for r in ex.waiting} == set(quick_ids)

    real_release = ex.store.lease_release

    async def release_then_lose_answer(*args: Any, **kw: Any) -> Any:
        await real_release(*args, **kw)
        raise TimeoutError("answer lost")

    ex.store.lease_release = release_then_lose_answer  # type: ignore[method-assign]
    clock.advance(AHEAD_HANDBACK + 0.01)
    await ex.tick()  # hand-back "fails"; the runs stay in the waiting line
    # Another instance claims them (they are scheduled again) and runs them.
    claimed_b = await store.occurrence_claim("b", ["quick"], 10, timedelta(seconds=9))
    assert {o.id for o in claimed_b} == set(quick_ids)
    # A slot frees on a before its next heartbeat: the next tick launches the waiting line.
    gate.set()
    await settle(runtime)
    await ex.tick()
    await settle(runtime)
    started_on_a = {occ for iid, occ in ran if iid == "a"}
    doubled = started_on_a & {o.id for o in claimed_b}
    assert not doubled, f"{len(doubled)} run(s) started on a after being handed to b: {ran}"


async def test_a_waiting_run_whose_lease_expired_must_not_start() -> None:
    """SIGSTOP / a loop blocked longer than the TTL: the waiting runs were reaped and run
    elsewhere; on resume the executor's tick comes before the heartbeater's check."""
    clock = FakeClock(T0)
    app, store, gate, ran, quick, slow = setup_line(clock)
    runtime = await started(app)
    ex = runtime.executor
    quick_ids = await fill_line(app, runtime, clock, quick, slow, ran)
    assert len(ex.waiting) == 3
    clock.advance(20)  # frozen for > lease TTL (9 s)
    reaped = await store.occurrence_reap()
    assert set(quick_ids) <= {o.id for o in reaped}
    claimed_b = await store.occurrence_claim("b", ["quick"], 10, timedelta(seconds=9))
    assert {o.id for o in claimed_b} == set(quick_ids)
    gate.set()  # the slow handlers finish on resume
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    await ex.tick()  # the executor ticks before the heartbeater's check_leases
    await settle(runtime)
    started_on_a = {occ for iid, occ in ran if iid == "a"}
    assert not started_on_a, (
        f"started with an expired lease on a (also claimed by b): {started_on_a}"
    )


async def test_a_graceful_stop_hands_the_waiting_runs_back_at_once() -> None:
    """Docstring: every waiting run is handed back at a graceful stop; they should be
    claimable by others at once, not after the grace period of a long handler."""
    clock = FakeClock(T0)
    app, store = make(clock, grace_period="30s")
    gate = asyncio.Event()

    @app.task
    async def quick(ctx) -> None:  # type: ignore[no-untyped-def]
        return None

    @app.task
    async def slow(ctx) -> None:  # type: ignore[no-untyped-def]
        await gate.wait()

    runtime = await started(app)
    ex = runtime.executor
    quick_ids = await fill_line(app, runtime, clock, quick, slow)
    assert len(ex.waiting) == 3
    stopping = asyncio.ensure_future(runtime.stop())
    for _ in range(20):
        await asyncio.sleep(0)
    clock.advance(5)  # 5 s into the 30 s grace
    for _ in range(20):
        await asyncio.sleep(0)
    claimable = await store.occurrence_claim("b", ["quick"], 10, timedelta(seconds=9))
    gate.set()
    await asyncio.wait_for(stopping, 5)
    assert {o.id for o in claimable} == set(quick_ids), "waiting runs held for the grace period"


async def test_lateness_is_observed_once_per_first_attempt_that_started() -> None:
    """soloist_lateness_seconds: 'start minus plan time of first attempts started by this
    instance'. A run handed back (never started) is observed anyway, and again when
    claimed again."""
    clock = FakeClock(T0)
    app, _store, gate, ran, quick, slow = setup_line(clock)
    runtime = await started(app)
    ex = runtime.executor
    quick_ids = await fill_line(app, runtime, clock, quick, slow, ran)
    clock.advance(AHEAD_HANDBACK + 0.01)
    await ex.tick()  # handed back
    assert ex.handed_back == 3
    gate.set()
    await settle(runtime)
    for _ in range(5):
        await ex.tick()
        await settle(runtime)
    assert {o for _, o in ran} == set(quick_ids)
    reg = runtime.metrics.registry
    count = reg.get_sample_value("soloist_lateness_seconds_count", {"job": "quick"})
    # warm-up run + 3 quick runs, each started once
    assert count == 4, f"lateness observed {count} times for 4 started first attempts"


async def test_lost_waiting_runs_do_not_pull_the_duration_estimate_down() -> None:
    """Waiting runs whose lease was lost (renewals failed) are dropped, not run with a ~0
    duration: the estimate that sizes the next claim-ahead does not learn from them."""
    clock = FakeClock(T0)
    app, _store, gate, _ran, quick, slow = setup_line(clock)

    @app.task
    async def medium(ctx) -> None:  # type: ignore[no-untyped-def]
        clock.advance(0.015)  # 15 ms: few claimed ahead (target 2*0.02/0.015 = 2)

    runtime = await started(app)
    ex = runtime.executor
    await app.aenqueue(medium)
    await ex.tick()
    await settle(runtime)
    for _ in range(2):
        await app.aenqueue(slow)
    clock.advance(0.001)
    for _ in range(2):
        await app.aenqueue(quick)
    await ex.tick()
    assert len(ex.waiting) == 2
    # The waiting runs' leases are lost (renewal found them gone, e.g. after a hand-back
    # whose answer was lost); the running ones keep theirs.
    for run in list(ex.waiting):
        ex.lose(run)
    durations = []
    orig = ex._record

    async def spy(run, *a):
        await orig(run, *a)
        durations.append((run.occ.task, ex.duration))

    ex._record = spy
    gate.set()
    await settle(runtime)
    await ex.tick()
    await settle(runtime)

    # The lost ones never ran: only the two slow runs were recorded (and counted in the
    # average of durations).
    assert [t for t, _ in durations] == ["slow", "slow"]


async def test_overlap_skip_does_not_skip_an_instant_for_a_run_that_never_started() -> None:
    """overlap=skip (the default) skips an instant only while the previous run *runs*.
    With every slot busy, a claim ahead takes only occurrences with overlap "allow": A
    stays claimable, so b's claim at B's due time takes A and does not skip B (a claimed
    ahead A would show as running and make b skip B)."""
    from soloist import every
    from soloist.models import Kind, NewOccurrence, Overlap

    clock = FakeClock(T0)
    app, store, _gate, ran, quick, slow = setup_line(clock)

    @app.job(every("1s"))
    async def beat(ctx) -> None:  # type: ignore[no-untyped-def]
        ran.append((ctx.instance_id, ctx.occurrence_id))

    runtime = await started(app)
    ex = runtime.executor
    await warm(app, runtime, quick)
    ran.clear()
    for _ in range(2):
        await app.aenqueue(slow)
    await ex.tick()  # the two slow runs take both slots
    assert not ex.waiting and ex.free_slots() == 0
    clock.advance(0.001)
    now = await store.now()

    def occ(at: datetime) -> NewOccurrence:
        return NewOccurrence(
            f"beat|{at.isoformat()}",
            "beat",
            "beat",
            "",
            at,
            at,
            Kind.SCHEDULE,
            overlap=Overlap.SKIP,
        )

    a_occ, _ = await store.occurrence_insert(occ(now))
    b_occ, _ = await store.occurrence_insert(occ(now + timedelta(seconds=1)))
    await app.aenqueue(quick)
    await ex.tick()
    # The slots are full: the claim ahead took the queued task, not A (overlap skip).
    assert [r.occ.task for r in ex.waiting] == ["quick"]
    a_now = await store.occurrence_get(a_occ.id)
    assert a_now is not None and a_now.state is State.SCHEDULED
    clock.advance(1.0)  # B is due
    claimed = await store.occurrence_claim("b", ["beat"], 10, timedelta(seconds=9))
    assert [o.id for o in claimed] == [a_occ.id]  # A first; B waits behind it
    b_after = await store.occurrence_get(b_occ.id)
    assert b_after is not None
    assert b_after.state is not State.SKIPPED, (
        "B skipped (overlap) although A's handler had not started; A is then handed back"
    )


async def test_finished_but_unrecorded_runs_stay_bounded_while_writes_stall() -> None:
    """Outcome writes stall (a hung store): every finished-but-unrecorded run would run
    again if the instance were then killed. At most AHEAD_MAX x concurrency of them wait
    for a write; once the write in flight is unanswered for STALLED, no handler starts
    until writes go through again, and nothing is claimed ahead."""
    clock = FakeClock(T0)
    app, store = make(clock, concurrency=10)
    finished: list[str] = []

    @app.task
    async def quick(ctx) -> None:  # type: ignore[no-untyped-def]
        finished.append(ctx.occurrence_id)

    runtime = await started(app)
    ex = runtime.executor
    await warm(app, runtime, quick)
    finished.clear()
    hold = asyncio.Event()
    real = ex.store.occurrence_complete

    async def stalled(*a: Any, **k: Any) -> Any:
        await hold.wait()
        return await real(*a, **k)

    ex.store.occurrence_complete = stalled  # type: ignore[method-assign]
    for _ in range(300):
        await app.aenqueue(quick)
    for _ in range(40):
        await ex.tick()
        for _ in range(5):
            await asyncio.sleep(0)
    before_stall = len(finished)
    assert 10 < before_stall <= (1 + AHEAD_MAX) * 10
    clock.advance(STALLED + 0.01)  # the write in flight is now stalled
    assert ex.completer.stalled() and ex.ahead_target() == 0
    ex.waiting and await ex.hand_back(list(ex.waiting), "test")
    for _ in range(20):
        await ex.tick()
        for _ in range(5):
            await asyncio.sleep(0)
    assert len(finished) == before_stall
    hold.set()
    await settle(runtime)
    for _ in range(60):
        await ex.tick()
        await settle(runtime)
    assert len(set(finished)) == 300
    await runtime.stop()
    rows = await store.occurrence_list(job="quick", limit=1000)
    assert len(rows) == 301 and all(o.state is State.SUCCEEDED for o in rows)


async def drain_during_a_hand_back(
    app: Scheduler,
    runtime: Any,
    clock: FakeClock,
    gate: asyncio.Event,
    quick: Any,
    stopping: Callable[[], None] = lambda: None,
) -> None:
    """The line filled (:func:`fill_line`), the executor's first tick blocks in a hand-back
    (``lease_release`` held); meanwhile the slow runs finish (free slots) and two quick runs
    are queued; then ``stopping()`` is called, drain() begins, the hand-back goes on and the
    drain ends. The test watches the store's claims itself."""
    ex = runtime.executor
    release_gate = asyncio.Event()
    real_release = ex.store.lease_release

    async def slow_release(*a: Any, **k: Any) -> Any:
        await release_gate.wait()
        return await real_release(*a, **k)

    ex.store.lease_release = slow_release
    clock.advance(AHEAD_HANDBACK + 0.01)
    await ex.start()  # the loop's first tick blocks in the hand-back
    for _ in range(10):
        await asyncio.sleep(0)
    gate.set()  # the slow runs finish meanwhile
    for _ in range(2):
        await app.aenqueue(quick)
    stopping()
    draining = asyncio.ensure_future(ex.drain(1.0))
    for _ in range(10):
        await asyncio.sleep(0)
    release_gate.set()
    await asyncio.wait_for(draining, 5)


async def test_no_claim_is_sent_after_a_graceful_stop_began() -> None:
    """drain() sets claiming=False and waits for the tick; a tick that was awaiting a
    hand-back goes on to claim the free slots anyway."""
    clock = FakeClock(T0)
    app, _store, gate, _ran, quick, slow = setup_line(clock)
    runtime = await started(app)
    ex = runtime.executor
    await fill_line(app, runtime, clock, quick, slow)
    assert len(ex.waiting) == 3
    claims_after_stop: list[int] = []
    real_claim = ex.store.occurrence_claim

    async def claim(*a: Any, **k: Any) -> Any:
        got = await real_claim(*a, **k)
        if not ex.claiming:
            claims_after_stop.append(len(got))
        return got

    ex.store.occurrence_claim = claim  # type: ignore[method-assign]
    await drain_during_a_hand_back(app, runtime, clock, gate, quick)
    assert not claims_after_stop, f"claimed {claims_after_stop} after the stop began"


async def test_a_free_slot_takes_a_due_skip_job_at_once_when_the_line_runs_dry() -> None:
    """The claim for the free slots is throttled while runs wait; when the line runs dry
    within a tick, the free slot is claimed for any due work at once (here a skip job,
    which a claim ahead never takes), not after a recheck delay."""
    from soloist import every
    from soloist.models import Kind, NewOccurrence, Overlap

    clock = FakeClock(T0)
    app, store, gate, ran, quick, slow = setup_line(clock)
    gate2 = asyncio.Event()

    @app.task
    async def longish(ctx) -> None:  # type: ignore[no-untyped-def]
        await gate2.wait()

    @app.job(every("1h"))
    async def beat(ctx) -> None:  # type: ignore[no-untyped-def]
        ran.append(("beat", ctx.occurrence_id))

    runtime = await started(app)
    ex = runtime.executor
    await warm(app, runtime, quick)
    clock.advance(1)
    for _ in range(2):
        await app.aenqueue(slow)
    clock.advance(0.001)
    at = await store.now()
    await store.occurrence_insert(
        NewOccurrence(f"beat|{at}", "beat", "beat", "", at, at, Kind.SCHEDULE, overlap=Overlap.SKIP)
    )
    clock.advance(0.001)
    await app.aenqueue(longish)
    clock.advance(0.1)
    await ex.tick()  # the free slots: the two slow runs; ahead: longish, not beat
    assert [r.occ.task for r in ex.waiting] == ["longish"]
    gate.set()
    await settle(runtime)  # two free slots
    clock.advance(0.01)  # the claim for free slots is not due yet
    await ex.tick()
    assert not ex.waiting
    assert sorted(r.occ.task for r in ex.active.values()) == ["beat", "longish"]
    gate2.set()
    await settle(runtime)
    await runtime.stop()


async def test_no_waiting_run_starts_once_a_stop_began() -> None:
    """drain() stops claiming, then waits for the tick in progress: runs of the line are
    not started by that tick; the stop hands them back."""
    from soloist.runtime.executor import FULL_CLAIM_EVERY

    clock = FakeClock(T0)
    app, store, gate, ran, quick, slow = setup_line(clock)
    runtime = await started(app)
    ex = runtime.executor
    quick_ids = await fill_line(app, runtime, clock, quick, slow, ran)
    gate.set()
    await settle(runtime)
    clock.advance(FULL_CLAIM_EVERY + 0.01)
    claim = store.occurrence_claim

    async def claim_during_stop(*a: Any, **k: Any) -> Any:
        ex.claiming = False  # what drain() does first, while this tick's claim is out
        return await claim(*a, **k)

    store.occurrence_claim = claim_during_stop  # type: ignore[method-assign]
    await ex.tick()
    started_ = [i for i in quick_ids if i in ex.active and ex.active[i].task is not None]
    assert started_ == [] and len(ex.waiting) == 3
    await ex.drain(1.0)
    for occ_id in quick_ids:
        occ = await store.occurrence_get(occ_id)
        assert occ is not None and occ.state is State.SCHEDULED


async def test_a_waiting_run_past_its_lease_deadline_is_dropped_when_a_slot_frees() -> None:
    """Runs claimed ahead whose lease deadline passed before they were due to be handed
    back (a claim answered late, renewals failing): when slots free they are dropped, not
    started, and free their places in ``active``; the run behind them starts. Each counts
    as an attempt that ended with its lease lost, like a run that finds its lease lost as
    it starts. (The drop once raised ValueError, which left the run in ``active`` holding
    a slot for good; and it was once not counted in ``soloist_runs_total``.)"""
    clock = FakeClock(T0)
    app, _store, gate, ran, quick, slow = setup_line(clock)
    runtime = await started(app)
    ex = runtime.executor
    quick_ids = await fill_line(app, runtime, clock, quick, slow, ran)
    stale = [ex.waiting[0], ex.waiting[1]]
    for run in stale:
        run.lease_deadline = clock.monotonic() - 0.001  # no renewal reached it in time
    gate.set()  # both slow runs finish: two slots free
    await settle(runtime)
    await ex.tick()
    await settle(runtime)
    started_ids = {occ for _iid, occ in ran}
    stale_ids = {run.occ.id for run in stale}
    assert started_ids == set(quick_ids) - stale_ids
    for run in stale:
        assert run.occ.id not in ex.active
        assert run not in ex.waiting
        assert run.ctx.lease_lost
    assert ex.counts["lease_lost"] == 2
    reg = runtime.metrics.registry
    lost = {"job": "quick", "outcome": "lease_lost"}
    assert reg.get_sample_value("soloist_runs_total", lost) == 2


async def test_a_launched_run_that_loses_its_lease_before_its_first_step_is_counted() -> None:
    """A renewal of waiting runs is answered 'not held' (they were reaped) in the loop
    iteration in which a tick launches two of them (slots freed), before the new tasks'
    first step. Nothing runs here, and each of the three counts once as lease_lost: the
    launched ones are not cancelled before their first step (which would end them counted
    nowhere, their lateness already observed) but find the lease lost as they start.
    (Found by review: the launched two were counted nowhere.)"""
    clock = FakeClock(T0)
    app, _store, gate, ran, quick, slow = setup_line(clock)
    runtime = await started(app)
    ex = runtime.executor
    await fill_line(app, runtime, clock, quick, slow, ran)
    waiting = list(ex.waiting)
    answer: asyncio.Future[set[str]] = asyncio.get_running_loop().create_future()

    async def refused_later(*args: Any, **kw: Any) -> set[str]:
        return await answer

    ex.store.lease_renew = refused_later  # type: ignore[method-assign,assignment]
    renewal = asyncio.ensure_future(ex.renew(waiting))
    await asyncio.sleep(0)  # the renewal is sent and waits for its answer
    gate.set()
    for _ in range(5):
        await asyncio.sleep(0)  # the slow handlers finish: two slots free
    await ex.completer.drain()
    assert ex.free_slots() == 2
    answer.set_result(set())  # none held
    for _ in range(2):  # the answer reaches renew() (through wait_for's inner task)
        await asyncio.sleep(0)
    ex._launch_waiting(ex.claimable())  # what the tick does now, in the same iteration
    await renewal
    await settle(runtime)
    assert [r for r in waiting if r.task is not None], "no run was launched: test setup"
    assert all(r.ctx.lease_lost for r in waiting)
    assert not ran
    assert not ex.active
    assert ex.counts["lease_lost"] == 3, ex.counts
    lost = {"job": "quick", "outcome": "lease_lost"}
    assert runtime.metrics.registry.get_sample_value("soloist_runs_total", lost) == 3
