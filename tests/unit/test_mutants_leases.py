"""Lease handling where ``make mutate MUTATE=leases`` found no test: a renewal the store
refuses loses the run; ``ctx.aheartbeat()`` renews a held lease and says why it cannot;
``ctx.heartbeat()`` refuses to run on the handler's own loop; the heartbeater backs off
after failed renewals and starts again from the beat once one succeeds."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from test_leases import BEAT, T0, TTL, RenewalCounter, claim_one, ended, make_app

from soloist.errors import LeaseLostError, OccurrenceCancelledError
from soloist.models import Claimed, State
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
