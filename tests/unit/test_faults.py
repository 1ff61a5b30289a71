"""Faults on the fake clock: store errors on the lease path, lost leases, skewed clocks,
long outages and backlogs. Each test drives the services tick by tick."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from soloist import ConfigError, Scheduler, every
from soloist.errors import LeaseLostError, StoreUnavailableError
from soloist.models import Claimed, Outcome, State
from soloist.runtime import Runtime
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


async def started(app: Scheduler) -> Runtime:
    store = await app._ready_store()
    runtime = Runtime(store, app.registry, app.config, app.clock)
    await runtime.register()
    return runtime


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
    assert occ_id in runtime.executor.active  # it runs again, although retries=0


async def test_the_heartbeater_never_backs_off_longer_than_its_interval(
    clock: FakeClock, store: FaultyStore
) -> None:
    """Failing renewals are tried again at the next beat, not after an error backoff."""
    app = make_app(clock, store)
    gate = asyncio.Event()
    app.task(name="work")(lambda ctx: None)

    @app.task(name="slow")
    async def slow(ctx) -> None:  # type: ignore[no-untyped-def]
        await gate.wait()

    runtime = await started(app)
    await app.aenqueue("slow")
    await runtime.executor.tick()
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
    gate = asyncio.Event()

    @app.task(name="slow")
    async def slow(ctx) -> None:  # type: ignore[no-untyped-def]
        await gate.wait()

    runtime = await started(app)
    occ_id = await app.aenqueue("slow")
    await runtime.executor.tick()
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
        delay = await runtime.planner.tick()
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
    await runtime.planner.tick()
    clock.advance(timedelta(hours=10))
    now = clock.now()
    await runtime.planner.tick()
    plans = sorted(o.plan_time for o in await store.occurrence_list(job="tick", limit=100))
    missed = [p for p in plans if T0 + timedelta(seconds=1) < p < now - timedelta(seconds=10)]
    assert len(missed) == 1 and missed[0] >= now - timedelta(seconds=11)


async def test_catch_up_all_keeps_only_the_window(clock: FakeClock) -> None:
    """catch_up='all' with catch_up_window='5s' after a minute down keeps only the missed
    instants of the last five seconds."""
    store = MemoryStore("memory://", clock=clock)
    app = make_app(clock, store, misfire_grace="0s")
    app.job(every("1s"), name="tick", catch_up="all", catch_up_window="5s")(lambda ctx: None)
    runtime = await started(app)
    await runtime.planner.tick()
    clock.advance(60)
    now = clock.now()
    await runtime.planner.tick()
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
    await runtime.planner.tick()
    clock.advance(9)
    await runtime.planner.tick()
    for _ in range(30):
        await runtime.executor.tick()
        await settle(runtime)
    rows = await store.occurrence_list(job="tick", limit=100)
    due = [o for o in rows if o.plan_time <= clock.now()]
    assert sorted(o.state.value for o in due) == ["succeeded"] * 9
    assert order == sorted(order) and len(order) == 9
