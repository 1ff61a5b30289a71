"""Faults on the fake clock: store errors on the lease path, lost leases, skewed clocks,
long outages and backlogs. Each test drives the services tick by tick."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from ticks import plan_tick, started

from soloist import ConfigError, Scheduler, every
from soloist.errors import LeaseLostError, StoreUnavailableError
from soloist.models import Claimed, Outcome, State
from soloist.runtime import Runtime
from soloist.runtime.service import ServiceBundle
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


class FaultyStore:
    """A memory store whose lease-path calls fail on demand: ``complete_errors`` /
    ``renew_errors`` raise before the write that many times (-1: always); ``lose_replies``
    applies that many completions and then raises (the answer is lost); ``refuse`` raises
    for every completion that contains one of those occurrence ids."""

    def __init__(self, inner: MemoryStore, on_renew: Any = None) -> None:
        self._inner = inner
        self.complete_errors = 0
        self.renew_errors = 0
        self.lose_replies = 0
        self.refuse: set[str] = set()
        self.on_renew = on_renew
        self.complete_calls: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def occurrence_complete(
        self, instance_id: str, outcomes: Sequence[Outcome], now: datetime | None = None
    ) -> set[str]:
        self.complete_calls.append([o.id for o in outcomes])
        if self.complete_errors:
            self.complete_errors -= 1 if self.complete_errors > 0 else 0
            raise StoreUnavailableError("connection terminated (injected)")
        if self.refuse.intersection(o.id for o in outcomes):
            raise StoreUnavailableError("refused (injected)")
        applied = await self._inner.occurrence_complete(instance_id, outcomes, now)
        if self.lose_replies:
            self.lose_replies -= 1
            raise StoreUnavailableError("server closed the connection (injected)")
        return applied

    async def lease_renew(
        self,
        instance_id: str,
        claims: Sequence[Claimed],
        lease_ttl: timedelta,
        now: datetime | None = None,
    ) -> set[str]:
        if self.on_renew is not None:
            self.on_renew()
        if self.renew_errors:
            self.renew_errors -= 1 if self.renew_errors > 0 else 0
            raise StoreUnavailableError("no route to host (injected)")
        return await self._inner.lease_renew(instance_id, claims, lease_ttl, now)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(clock: FakeClock) -> FaultyStore:
    return FaultyStore(MemoryStore("memory://", clock=clock))


def make_app(clock: FakeClock, store: Any, iid: str = "a", **options: Any) -> Scheduler:
    # lease 9 s: heartbeat 3 s, a runner trusts its lease until 8 s after a renewal is sent
    return Scheduler(store, instance_id=iid, clock=clock, lease_ttl="9s", **options)


async def start_gated(app: Scheduler) -> tuple[Runtime, str, asyncio.Event]:
    """A runtime that has claimed one run of an async task ``slow`` which waits for the
    returned gate."""
    gate = asyncio.Event()

    @app.task(name="slow")
    async def slow(ctx) -> None:  # type: ignore[no-untyped-def]
        await gate.wait()

    runtime = await started(app)
    occ_id = await app.aenqueue("slow")
    await runtime.executor.tick()
    return runtime, occ_id, gate


async def settle(runtime: Runtime, timeout: float = 5) -> None:
    tasks = [r.task for r in runtime.executor.active.values() if r.task is not None]
    if tasks:
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout)


# -- outcomes survive store errors ------------------------------------------------------------
async def test_an_outcome_is_retried_through_transient_store_errors(
    clock: FakeClock, store: FaultyStore
) -> None:
    """Two failed completion writes (a terminated connection) do not drop the outcome."""
    app = make_app(clock, store)
    app.task(name="work")(lambda ctx: "done")
    runtime = await started(app)
    occ_id = await app.aenqueue("work")
    store.complete_errors = 2
    await runtime.executor.tick()
    await settle(runtime)
    occ = await store.occurrence_get(occ_id)
    assert occ is not None and (occ.state, occ.result) == (State.SUCCEEDED, "done")
    assert len(store.complete_calls) == 3
    assert runtime.executor.counts["succeeded"] == 1


async def test_a_write_whose_answer_was_lost_counts_as_applied(
    clock: FakeClock, store: FaultyStore
) -> None:
    """A completion that committed but whose reply was lost is not reported as fenced:
    the retry is refused by the fence, and the audit log shows the write was ours."""
    app = make_app(clock, store)
    app.task(name="work")(lambda ctx: "done")
    runtime = await started(app)
    occ_id = await app.aenqueue("work")
    store.lose_replies = 1
    await runtime.executor.tick()
    await settle(runtime)
    occ = await store.occurrence_get(occ_id)
    assert occ is not None and occ.state is State.SUCCEEDED
    assert runtime.executor.counts["succeeded"] == 1
    assert runtime.executor.counts["fenced"] == 0
    assert [a.outcome for a in await store.occurrence_attempts(occ_id)] == ["succeeded"]


async def test_one_refused_outcome_does_not_fail_the_others_in_its_batch(
    clock: FakeClock, store: FaultyStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch write that fails because of one outcome is retried outcome by outcome: the
    others are recorded; the refused one is given up at its lease deadline, logged as
    running again, and nothing is written for it."""
    app = make_app(clock, store)
    gate = asyncio.Event()

    @app.task(name="work")
    async def work(ctx) -> None:  # type: ignore[no-untyped-def]
        await gate.wait()

    runtime = await started(app)
    ids = [await app.aenqueue("work") for _ in range(3)]
    store.refuse = {ids[1]}
    await runtime.executor.tick()
    gate.set()  # the three finish together: one batch with the refused one in it
    ok = [runtime.executor.active[i].task for i in (ids[0], ids[2])]
    await asyncio.wait_for(asyncio.gather(*ok), 5)  # type: ignore[arg-type]
    assert store.complete_calls[0] == ids or sorted(store.complete_calls[0]) == sorted(ids)
    for occ_id in (ids[0], ids[2]):
        occ = await store.occurrence_get(occ_id)
        assert occ is not None and occ.state is State.SUCCEEDED
    stuck = runtime.executor.active[ids[1]]
    assert stuck.recorded and not stuck.task.done()  # type: ignore[union-attr]
    with caplog.at_level(logging.ERROR, logger="soloist"):
        clock.advance(9)  # past its lease deadline (8 s): given up
        await settle(runtime)
    occ = await store.occurrence_get(ids[1])
    assert occ is not None and occ.state is State.RUNNING  # left for the reaper
    assert runtime.executor.counts["unrecorded"] == 1
    assert any("runs again" in r.getMessage() for r in caplog.records)


async def test_runs_waiting_for_their_outcome_keep_their_leases_renewed(
    clock: FakeClock, store: FaultyStore
) -> None:
    """While an outcome cannot be written, the heartbeater still renews its lease, so the
    retries go on past the first TTL and the occurrence is not reaped meanwhile."""
    app = make_app(clock, store)
    app.task(name="work")(lambda ctx: "done")
    runtime = await started(app)
    occ_id = await app.aenqueue("work")
    store.complete_errors = -1
    await runtime.executor.tick()
    run = runtime.executor.active[occ_id]
    for _ in range(200):
        if run.recorded:
            break
        await asyncio.sleep(0.01)
    for _ in range(5):  # 15 s: well past the first lease
        clock.advance(3)
        await runtime.heartbeater.tick()
        assert await store.occurrence_reap() == []
    store.complete_errors = 0
    await settle(runtime)
    occ = await store.occurrence_get(occ_id)
    assert occ is not None and occ.state is State.SUCCEEDED


# -- lease loss is detected within a bound ----------------------------------------------------
async def test_a_lost_lease_cancels_the_async_handler_before_the_store_can_reap_it(
    clock: FakeClock, store: FaultyStore
) -> None:
    """Renewals fail for a whole TTL: the handler is cancelled and ctx.lease_lost is true
    before the store's lease expires; nothing is written; once reaped the occurrence runs
    again without spending a retry."""
    app = make_app(clock, store)
    seen: dict[str, Any] = {}
    started_event = asyncio.Event()

    @app.task(name="work")
    async def work(ctx) -> None:  # type: ignore[no-untyped-def]
        seen["ctx"] = ctx
        started_event.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen["lost_when_cancelled"] = ctx.lease_lost
            seen["store_reaps_then"] = [o.id for o in await store.occurrence_reap()]
            raise

    runtime = await started(app)
    occ_id = await app.aenqueue("work")
    await runtime.executor.tick()
    await started_event.wait()
    store.renew_errors = -1
    delays = []
    for step in (3, 3, 1.5):  # t = 3, 6, 7.5: renewals fail, the lease still trusted
        clock.advance(step)
        delays.append(await runtime.heartbeater.tick())
    assert "lost_when_cancelled" not in seen
    assert delays[0] == pytest.approx(0.1)  # a failed renewal is tried again soon
    assert max(delays) <= 3 and delays[-1] <= 0.5  # and the deadline (8 s) is not overslept
    clock.advance(0.5)  # t = 8: the local deadline (9 s TTL - 1 s margin)
    await runtime.heartbeater.tick()
    await settle(runtime)
    assert seen["lost_when_cancelled"] is True
    assert seen["store_reaps_then"] == []  # the store's lease had not expired yet
    with pytest.raises(LeaseLostError):
        await seen["ctx"].aheartbeat()
    occ = await store.occurrence_get(occ_id)
    assert occ is not None and occ.state is State.RUNNING  # nothing written: no "dead"
    assert runtime.executor.counts["lease_lost"] == 1
    clock.advance(1)  # t = 9: the store's lease expires
    (reaped,) = await store.occurrence_reap()
    assert (reaped.state, reaped.attempt, reaped.crashes) == (State.SCHEDULED, 0, 1)
    store.renew_errors = 0
    await runtime.executor.tick()
    rerun = runtime.executor.active[occ_id]  # it runs again, although retries=0
    assert rerun.occ.fencing_token == 2
    rerun.task.cancel()  # type: ignore[union-attr]
    await asyncio.gather(rerun.task, return_exceptions=True)  # type: ignore[arg-type]


async def test_the_heartbeater_never_backs_off_longer_than_its_interval(
    clock: FakeClock, store: FaultyStore
) -> None:
    """Failing renewals are tried again at the next beat, not after an error backoff."""
    runtime, _, gate = await start_gated(make_app(clock, store))
    store.renew_errors = -1
    for _ in range(6):
        assert await runtime.heartbeater.tick() <= 3.0
    gate.set()
    await settle(runtime)


async def test_a_renewal_extends_the_lease_from_when_it_was_sent(
    clock: FakeClock, store: FaultyStore
) -> None:
    """A renewal answered late extends the local deadline from its sending, not from its
    answer: the local deadline never outlives the store's lease."""
    app = make_app(clock, store)
    runtime, occ_id, gate = await start_gated(app)
    clock.advance(3)
    sent = clock.monotonic()
    store.on_renew = lambda: clock.advance(2)  # the answer takes 2 s
    await runtime.heartbeater.tick()
    run = runtime.executor.active[occ_id]
    assert run.lease_deadline == pytest.approx(sent + 9 - 1)
    gate.set()
    await settle(runtime)


# -- planning on the store's clock ------------------------------------------------------------
@pytest.mark.parametrize("skew", [-30, 30])
async def test_the_planner_sleeps_on_the_store_clock_whatever_the_local_clock(
    skew: int,
) -> None:
    """An instance whose clock is 30 s off plans every instant on time, without spinning:
    its sleeps are computed from the store's clock only."""
    store_clock = FakeClock(T0)
    local = FakeClock(T0 + timedelta(seconds=skew))
    store = MemoryStore("memory://", clock=store_clock)
    app = make_app(local, store)  # type: ignore[arg-type]
    app.job(every("1s"), name="tick")(lambda ctx: None)
    runtime = await started(app)
    for _ in range(20):
        delay = await plan_tick(runtime)
        assert 0 < delay <= 1.0
        store_clock.advance(delay)
        local.advance(delay)
    plans = sorted(o.plan_time for o in await store.occurrence_list(job="tick", limit=100))
    assert plans == [T0 + timedelta(seconds=s) for s in range(1, len(plans) + 1)]
    assert len(plans) >= 19


# -- catch-up after a long outage -------------------------------------------------------------
async def test_latest_after_a_long_outage_runs_the_newest_missed_instant(
    clock: FakeClock,
) -> None:
    """catch_up='latest' after ten hours down plans the newest missed instant (not one
    hours old), and finds it without walking every instant in between."""
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store)
    app.job(every("1s"), name="tick")(lambda ctx: None)
    runtime = await started(app)
    await plan_tick(runtime)
    clock.advance(timedelta(hours=10))
    now = clock.now()
    await plan_tick(runtime)
    plans = sorted(o.plan_time for o in await store.occurrence_list(job="tick", limit=100))
    grace = app.config.misfire_grace  # the default: lease TTL (9 s here) + 2 s
    assert grace == timedelta(seconds=11)
    missed = [p for p in plans if T0 + timedelta(seconds=1) < p < now - grace]
    assert len(missed) == 1 and missed[0] >= now - grace - timedelta(seconds=1)


async def test_catch_up_all_keeps_only_the_window(clock: FakeClock) -> None:
    """catch_up='all' with catch_up_window='5s' after a minute down keeps only the missed
    instants of the last five seconds."""
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, misfire_grace="0s")
    app.job(every("1s"), name="tick", catch_up="all", catch_up_window="5s")(lambda ctx: None)
    runtime = await started(app)
    await plan_tick(runtime)
    clock.advance(60)
    now = clock.now()
    await plan_tick(runtime)
    plans = sorted(o.plan_time for o in await store.occurrence_list(job="tick", limit=1000))
    kept = [p for p in plans if T0 + timedelta(seconds=1) < p <= now]
    assert kept == [now - timedelta(seconds=s) for s in range(5, -1, -1)]


def test_catch_up_all_with_overlap_skip_is_refused(clock: FakeClock) -> None:
    """The contradiction is refused at definition time, with the fix in the message."""
    app = make_app(clock, MemoryStore("memory://", clock=clock))
    with pytest.raises(ConfigError, match="overlap='queue'"):
        app.job(every("1s"), name="tick", catch_up="all", overlap="skip")
    app.task(name="t")(lambda ctx: None)
    with pytest.raises(ConfigError, match="overlap='queue'"):
        app.schedules.add("dyn", task="t", schedule=every("1s"), catch_up="all", overlap="skip")


async def test_a_catch_up_all_backlog_runs_in_order_without_skipping(
    clock: FakeClock,
) -> None:
    """After nine missed instants, catch_up='all' with the default overlap runs all nine,
    one after the other, in plan order; none is recorded skipped."""
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, misfire_grace="0s")
    order: list[datetime] = []

    @app.job(every("1s"), name="tick", catch_up="all")
    async def tick(ctx) -> None:  # type: ignore[no-untyped-def]
        order.append(ctx.plan_time)

    runtime = await started(app)
    await plan_tick(runtime)
    clock.advance(9)
    await plan_tick(runtime)
    for _ in range(30):
        await runtime.executor.tick()
        await settle(runtime)
    rows = await store.occurrence_list(job="tick", limit=100)
    due = [o for o in rows if o.plan_time <= clock.now()]
    assert sorted(o.state.value for o in due) == ["succeeded"] * 9
    assert order == sorted(order) and len(order) == 9


# -- found by an adversarial review ---------------------------------------------------------
async def _until(cond: Any, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never became true")


# F1 ------------------------------------------------------------------------------------------
async def test_a_reclaimed_occurrence_is_not_forgotten_when_the_stale_run_ends(
    clock: FakeClock, store: FaultyStore
) -> None:
    """A sync handler outlives its lease (store outage); the store reaps it and this same
    instance claims the occurrence again while the stale thread still runs. When the stale
    run ends, the new run must still be tracked (renewed, drained, counted)."""
    app = make_app(clock, store, concurrency=2)
    gates = [threading.Event(), threading.Event()]
    calls: list[int] = []

    @app.task(name="work", retries=1)
    def work(ctx) -> None:  # type: ignore[no-untyped-def]
        n = len(calls)
        calls.append(ctx.fencing_token)
        gates[n].wait(10)

    runtime = await started(app)
    ex = runtime.executor
    occ_id = await app.aenqueue("work")
    await ex.tick()
    old = ex.active[occ_id]
    await _until(lambda: len(calls) == 1)
    store.renew_errors = -1  # the store is unreachable for a whole TTL
    for step in (3, 3, 2):  # t = 8: local deadline, the sync handler cannot be stopped
        clock.advance(step)
        await runtime.heartbeater.tick()
    assert old.ctx.lease_lost
    clock.advance(1.5)  # t = 9.5: the store's lease has expired
    store.renew_errors = 0
    assert [o.id for o in await store.occurrence_reap()] == [occ_id]
    await ex.tick()  # this instance claims it again: same id, new token
    new = ex.active[occ_id]
    assert new is not old
    await _until(lambda: len(calls) == 2)
    gates[0].set()  # the stale thread ends; its fenced write is refused
    await asyncio.wait_for(old.task, 5)  # type: ignore[arg-type]
    try:
        # BUG: _finished(occ_id) popped the *new* run from executor.active
        assert ex.active.get(occ_id) is new, "the live run was dropped from executor.active"
        # consequence: the heartbeater no longer renews it, the store reaps it while it runs
        for _ in range(4):
            clock.advance(3)
            await runtime.heartbeater.tick()
        assert await store.occurrence_reap() == [], "the live run's lease was reaped"
    finally:
        gates[1].set()
        await asyncio.wait_for(new.task, 5)  # type: ignore[arg-type]


# F2 ------------------------------------------------------------------------------------------
async def test_a_heartbeat_too_long_for_the_lease_is_refused_and_the_longest_allowed_works(
    clock: FakeClock, store: FaultyStore
) -> None:
    """A heartbeat must leave room for a second renewal before the lease deadline
    (ttl - margin): 8.5 s with a 9 s lease is refused; at the longest allowed (4 s) a
    healthy lease is never declared lost."""
    with pytest.raises(ConfigError, match=r"heartbeat 8\.5s"):
        make_app(clock, store, heartbeat="8.5s")
    app = make_app(clock, store, heartbeat="4s")
    runtime, occ_id, gate = await start_gated(app)
    run = runtime.executor.active[occ_id]
    for _ in range(5):
        delay = await runtime.heartbeater.tick()
        clock.advance(delay)
    try:
        assert not run.ctx.lease_lost, "a healthy lease was declared lost"
    finally:
        gate.set()
        await settle(runtime)


# F3 ------------------------------------------------------------------------------------------
class SlowStore(FaultyStore):
    """Completions take ``delay`` real seconds (a busy database)."""

    delay = 0.2

    async def occurrence_complete(self, instance_id, outcomes, now=None):  # type: ignore[no-untyped-def]
        self.complete_calls.append([o.id for o in outcomes])
        await asyncio.sleep(self.delay)
        return await self._inner.occurrence_complete(instance_id, outcomes, now)


async def test_an_outcome_the_store_would_accept_gets_more_than_50ms(clock: FakeClock) -> None:
    """A sync run outlives its *local* lease deadline (t = 8 s) but finishes while the
    store's lease is still valid (until 9 s). Its fenced write would apply, but it gets only
    MIN_CALL_TIMEOUT (50 ms) on a store answering in 200 ms: the outcome is dropped
    ('unrecorded'), the occurrence runs again: the handler's work is done twice."""
    from soloist.stores.memory import MemoryStore

    store = SlowStore(MemoryStore("memory://", clock=clock))
    app = make_app(clock, store)
    gate = threading.Event()

    @app.task(name="sync")
    def sync(ctx) -> str:  # type: ignore[no-untyped-def]
        gate.wait(10)
        return "sync done"

    runtime = await started(app)
    ex = runtime.executor
    a = await app.aenqueue("sync")
    await ex.tick()
    store.renew_errors = -1
    for step in (3, 3, 2):  # t = 8: the local deadline; the store lease lasts to 9
        clock.advance(step)
        await runtime.heartbeater.tick()
    assert ex.active[a].ctx.lease_lost
    gate.set()
    await settle(runtime)
    got = await store.occurrence_get(a)
    assert got is not None
    assert ex.counts["unrecorded"] == 0 and got.state is State.SUCCEEDED, (
        f"dropped: {ex.counts}, state {got.state}"
    )


async def test_one_late_outcome_does_not_shrink_the_whole_batch_deadline(
    clock: FakeClock,
) -> None:
    """A batch's call deadline is the *earliest* of its outcomes' deadlines: one late
    outcome gives 2000 healthy ones 50 ms; on a 200 ms store the batch times out and every
    outcome is retried on its own (N calls instead of 1)."""
    from soloist.models import Outcome
    from soloist.runtime.completer import Completer
    from soloist.stores.memory import MemoryStore

    inner = MemoryStore("memory://", clock=clock)
    store = SlowStore(inner)
    app = make_app(clock, store)
    app.task(name="t")(lambda ctx: None)
    await started(app)
    ids = [await app.aenqueue("t") for _ in range(5)]
    claimed = await inner.occurrence_claim(
        "a", ["t"], 5, __import__("datetime").timedelta(seconds=9)
    )
    bundle = ServiceBundle(clock, "a")
    completer = Completer(bundle, store, call_timeout=3.0)  # type: ignore[arg-type]
    now = clock.monotonic()
    outs = [Outcome(o.id, o.fencing_token, State.SUCCEEDED) for o in claimed]
    deadlines = [now - 0.5] + [now + 8] * 4  # the first one's local lease just passed
    results = await asyncio.gather(
        *(completer.complete(o, (lambda d=d: d)) for o, d in zip(outs, deadlines, strict=True)),
        return_exceptions=True,
    )
    print("calls", [len(c) for c in store.complete_calls], results)
    assert len(store.complete_calls) == 1, "the batch timed out and was split"
    assert results == [True] * 5
    assert sorted(ids) == sorted(o.id for o in claimed)


# F4 ------------------------------------------------------------------------------------------
async def test_an_outcome_the_store_always_refuses_is_not_retried_forever(
    clock: FakeClock, store: FaultyStore
) -> None:
    """A deterministic write error (e.g. PostgreSQL: psycopg.DataError 'text fields cannot
    contain NUL' for a handler raising ValueError('a\\x00b')) is retried while the
    heartbeater keeps extending the lease: the occurrence stays 'running' forever, is never
    reaped, and drain() never returns."""
    app = make_app(clock, store)

    @app.task(name="work")
    def work(ctx) -> None:  # type: ignore[no-untyped-def]
        raise ValueError("bad\x00byte")

    runtime = await started(app)
    occ_id = await app.aenqueue("work")
    store.refuse = {occ_id}  # stands for the DataError: every write of it fails
    await runtime.executor.tick()
    await _until(lambda: runtime.executor.active[occ_id].recorded)
    drain = asyncio.ensure_future(runtime.executor.drain(0))
    for _ in range(200):  # 10 minutes of healthy heartbeats
        clock.advance(3)
        await runtime.heartbeater.tick()
        await asyncio.sleep(0.005)
        if drain.done():
            break
    try:
        occ = await store.occurrence_get(occ_id)
        assert occ is not None
        assert drain.done(), f"drain() still waiting after 10 min; occurrence {occ.state.value}"
    finally:
        store.refuse = set()
        await asyncio.wait_for(drain, 5)


# F5 ------------------------------------------------------------------------------------------
async def test_a_handler_cancelled_for_its_lease_is_not_recorded_dead(
    clock: FakeClock, store: FaultyStore
) -> None:
    """lose() cancels the async handler; its cleanup raises something other than
    CancelledError (a client library's own error, a failing 'finally: await close()').
    _run classifies it handler_error and writes it: the store's lease is still valid (the
    margin), so the fenced write applies and the occurrence is 'dead' (retries=0), where a
    lease loss must write nothing and run again."""
    app = make_app(clock, store)
    started_event = asyncio.Event()

    @app.task(name="work")
    async def work(ctx) -> None:  # type: ignore[no-untyped-def]
        started_event.set()
        try:
            await asyncio.Event().wait()
        finally:
            raise ConnectionError("connection closed while cancelling")

    runtime = await started(app)
    occ_id = await app.aenqueue("work")
    await runtime.executor.tick()
    await started_event.wait()
    store.renew_errors = -1
    for step in (3, 3, 2):  # t = 8: local deadline: lose() cancels the handler
        clock.advance(step)
        await runtime.heartbeater.tick()
    await settle(runtime)
    occ = await store.occurrence_get(occ_id)
    assert occ is not None
    assert occ.state is State.RUNNING, f"written {occ.state.value} ({occ.error_code})"
    assert runtime.executor.counts["lease_lost"] == 1


# F6 ------------------------------------------------------------------------------------------
async def test_instants_within_misfire_grace_are_not_cut_by_a_shorter_window(
    clock: FakeClock,
) -> None:
    """catch_up_window only bounds *missed* instants (older than misfire_grace). The new
    walk start max(cursor, now - window) also drops instants still inside the grace
    period when catch_up_window < misfire_grace (the default grace: at least 10 s)."""
    from datetime import timedelta

    from soloist import every
    from soloist.stores.memory import MemoryStore

    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store)  # misfire_grace 11 s (default: lease TTL 9 s + 2 s)
    app.job(every("1s"), name="tick", catch_up="all", catch_up_window="3s")(lambda ctx: None)
    runtime = await started(app)
    await plan_tick(runtime)
    t0 = clock.now()
    clock.advance(8)  # down 8 s: every instant is late but within the grace
    await plan_tick(runtime)
    plans = sorted(o.plan_time for o in await store.occurrence_list(job="tick", limit=100))
    late = [p for p in plans if p <= clock.now()]
    # t0+1 may have been planned by the first tick (lookahead); t0+2..t0+8 must all be there
    assert [t0 + timedelta(seconds=s) for s in range(2, 9)] == [
        p for p in late if p > t0 + timedelta(seconds=1)
    ]


# F7 ------------------------------------------------------------------------------------------
async def test_a_claim_answered_after_its_local_deadline_is_not_run(
    clock: FakeClock, store: FaultyStore
) -> None:
    """A claim processed at t=6 (store lease to 15) whose reply arrives at 14.95, past the
    local deadline (14): the handler is not started (the store may reap the occurrence any
    moment), nothing is written, and it runs again once reaped."""
    app = make_app(clock, store)
    ran: list[int] = []

    @app.task(name="work")
    async def work(ctx) -> None:  # type: ignore[no-untyped-def]
        ran.append(ctx.fencing_token)

    runtime = await started(app)
    occ_id = await app.aenqueue("work")
    clock.advance(6)
    inner_claim = store._inner.occurrence_claim

    async def slow_claim(*a: Any, **k: Any) -> Any:
        got = await inner_claim(*a, **k)
        clock.advance(8.95)  # the reply arrives at t = 14.95
        return got

    store.occurrence_claim = slow_claim  # type: ignore[method-assign]
    await runtime.executor.tick()
    await settle(runtime)
    assert ran == [] and runtime.executor.counts["lease_lost"] == 1
    clock.advance(0.05)  # t = 15: the store's lease expires
    assert [o.id for o in await store.occurrence_reap()] == [occ_id]
    store.occurrence_claim = inner_claim  # type: ignore[method-assign]
    await runtime.executor.tick()
    await settle(runtime)
    assert ran == [2]


async def test_a_run_whose_lease_is_short_wakes_the_heartbeater(
    clock: FakeClock, store: FaultyStore
) -> None:
    """A claim answered late leaves a lease deadline nearer than one heartbeat: the
    heartbeater is woken so that it does not sleep past that deadline."""
    app = make_app(clock, store)
    woken: list[bool] = []
    gate = asyncio.Event()

    @app.task(name="work")
    async def work(ctx) -> None:  # type: ignore[no-untyped-def]
        await gate.wait()

    runtime = await started(app)
    runtime.executor.on_short_lease = lambda: woken.append(True)
    await app.aenqueue("work")
    inner_claim = store._inner.occurrence_claim

    async def slow_claim(*a: Any, **k: Any) -> Any:
        got = await inner_claim(*a, **k)
        clock.advance(6)  # the reply arrives 6 s late: 2 s of trust left (< 3 s beat)
        return got

    store.occurrence_claim = slow_claim  # type: ignore[method-assign]
    await runtime.executor.tick()
    assert woken == [True]
    gate.set()
    await settle(runtime)


async def test_a_stray_cancelled_error_does_not_end_a_service_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A CancelledError that escapes from a call a service made (a driver that cut its
    connection), not from stopping the service, is a failed tick: the loop goes on. (Had
    it ended, the instance would silently stop claiming while it still looked alive.)"""
    from soloist.clock import SystemClock
    from soloist.runtime.service import Service, ServiceBundle

    ticked = asyncio.Event()

    class Flaky(Service):
        name = "flaky"
        calls = 0

        async def tick(self) -> float:
            self.calls += 1
            if self.calls == 1:
                raise asyncio.CancelledError  # as from inside a cut connection
            ticked.set()
            return 60.0

    service = Flaky(ServiceBundle(SystemClock(), "a"))
    await service.start()
    await asyncio.wait_for(ticked.wait(), 5)
    assert service.running and service.calls == 2
    await service.stop()  # a real stop still ends it
    assert not service.running
    assert not [r for r in caplog.records if getattr(r, "action", None) == "service_died"]


async def test_a_failed_wake_up_wait_together_with_a_local_wake_does_not_raise(
    clock: FakeClock, store: FaultyStore
) -> None:
    """The executor's idle wait: when the store's wake-up wait fails in the same turn as a
    local wake-up, the wait returns (it used to raise the store's error, outside the
    loop's error handling, and the executor stopped for good: chaos, pg_terminate_backend)."""
    app = make_app(clock, store)
    runtime = await started(app)
    executor = runtime.executor

    cut = asyncio.Event()

    async def broken(timeout: float) -> bool:
        await cut.wait()
        raise StoreUnavailableError("server closed the connection (injected)")

    store.work_wait = broken  # type: ignore[method-assign]
    executor._wake = asyncio.Event()  # as start() makes it, without the loop running
    executor._starved = True  # the last tick found too little work: wait for the store
    # The connection is cut in the very turn a local wake-up comes: both waits end together.
    asyncio.get_running_loop().call_later(0.05, lambda: (cut.set(), executor.wake()))
    await asyncio.wait_for(executor.wait(5.0), 5)  # returns, does not raise
