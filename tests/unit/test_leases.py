"""Lease upkeep driven tick by tick on a fake clock and the memory store: the heartbeater's
tick renews, the reaper's tick frees expired leases, and a lost lease is acted on (the
handler is told, an async one cancelled, nothing is written, ctx.heartbeat() raises)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from ticks import started

from soloist import Scheduler
from soloist.errors import LeaseLostError, StoreUnavailableError
from soloist.models import Claimed, ErrorCode, State
from soloist.runtime import Runtime
from soloist.runtime.executor import Run
from soloist.runtime.leases import Reaper
from soloist.runtime.service import ServiceBundle
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
#: Lease 9 s, heartbeat 3 s: a runner trusts its lease until 8 s after a renewal was sent.
TTL = 9.0
TRUSTED = 8.0
BEAT = 3.0


class RenewalCounter:
    """A memory store that counts lease renewals and fails them while ``failing``."""

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner
        self.renewals: list[list[str]] = []
        self.failing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def lease_renew(
        self,
        instance_id: str,
        claims: Sequence[Claimed],
        lease_ttl: timedelta,
        now: datetime | None = None,
    ) -> Any:
        self.renewals.append([c.id for c in claims])
        if self.failing:
            raise StoreUnavailableError("no route to host (injected)")
        return await self._inner.lease_renew(instance_id, claims, lease_ttl, now)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(clock: FakeClock) -> RenewalCounter:
    return RenewalCounter(MemoryStore("memory://", clock=clock))


def make_app(clock: FakeClock, store: Any, iid: str = "a", **options: Any) -> Scheduler:
    return Scheduler(
        store, instance_id=iid, clock=clock, lease_ttl=f"{TTL}s", heartbeat=f"{BEAT}s", **options
    )


async def claim_one(app: Scheduler) -> tuple[Runtime, Run, dict[str, Any]]:
    """A runtime that has claimed one run of an async task that waits until cancelled;
    ``seen`` gets its ctx, and ``cancelled`` once it is cancelled."""
    seen: dict[str, Any] = {"started": asyncio.Event()}

    @app.task(name="wait")
    async def wait(ctx: Any) -> None:
        seen["ctx"] = ctx
        seen["started"].set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen["cancelled"] = True
            raise

    runtime = await started(app)
    occ_id = await app.aenqueue("wait")
    await runtime.executor.tick()
    await asyncio.wait_for(seen["started"].wait(), 5)
    return runtime, runtime.executor.active[occ_id], seen


async def ended(run: Run, timeout: float = 5) -> None:
    assert run.task is not None
    await asyncio.wait_for(asyncio.gather(run.task, return_exceptions=True), timeout)


# -- the heartbeater's tick -------------------------------------------------------------------
async def test_a_heartbeater_tick_renews_each_running_lease_in_the_store(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """Each tick renews the run's lease in the store (one call) from the tick's time, and
    moves its local deadline on; ticks every beat keep it for a minute, far past the first
    TTL, and the reaper never finds it expired."""
    runtime, run, _ = await claim_one(make_app(clock, store))
    occ_id = run.occ.id
    assert run.lease_deadline == clock.monotonic() + TRUSTED
    for beat in range(1, 21):  # 60 s
        clock.advance(BEAT)
        assert await runtime.heartbeater.tick() == pytest.approx(BEAT)
        assert store.renewals[-1] == [occ_id]
        occ = await store.occurrence_get(occ_id)
        assert occ is not None and occ.lease_expires_at == clock.now() + timedelta(seconds=TTL)
        assert run.lease_deadline == pytest.approx(clock.monotonic() + TRUSTED)
        assert await runtime.reaper.tick() == BEAT
        assert runtime.reaper.reaped_total == 0, f"reaped after {beat * BEAT} s"
    assert len(store.renewals) == 20
    assert not run.ctx.lease_lost
    run.task.cancel()  # type: ignore[union-attr]
    await ended(run)


async def test_a_heartbeater_tick_without_runs_calls_nothing(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """With nothing running, a tick makes no store call and sleeps one beat."""
    runtime = await started(make_app(clock, store))
    assert await runtime.heartbeater.tick() == BEAT
    assert store.renewals == []


async def test_without_renewals_the_lease_expires_and_is_reaped(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """The counter-proof of the test above: the same run with no heartbeater tick is
    lost on the local clock at 8 s and reaped by the store at 9 s."""
    runtime, run, seen = await claim_one(make_app(clock, store))
    clock.advance(TRUSTED)
    runtime.executor.check_leases()
    await ended(run)
    assert run.ctx.lease_lost and seen["cancelled"]
    clock.advance(TTL - TRUSTED)
    assert await runtime.reaper.tick() == BEAT
    assert runtime.reaper.reaped_total == 1


# -- the reaper's tick --------------------------------------------------------------------------
async def test_a_reaper_tick_frees_only_expired_leases(
    clock: FakeClock, store: RenewalCounter, caplog: pytest.LogCaptureFixture
) -> None:
    """Another instance claimed two occurrences and died. Before the lease expires a
    reaper tick frees nothing; at expiry one tick makes both claimable again (a crash:
    no attempt spent), counts them, logs them and wakes the executor once; a second tick
    finds nothing more."""
    woken: list[int] = []
    reaper = Reaper(
        ServiceBundle(clock, "a"), store, timedelta(seconds=BEAT), lambda: woken.append(1)
    )
    app = make_app(clock, store)
    app.task(name="work")(lambda ctx: None)
    ids = [await app.aenqueue("work") for _ in range(2)]
    claimed = await store.occurrence_claim("dead", ["work"], 10, timedelta(seconds=TTL))
    assert sorted(o.id for o in claimed) == sorted(ids)

    clock.advance(TTL - 0.001)
    assert await reaper.tick() == BEAT
    assert (reaper.reaped_total, woken) == (0, [])
    for occ_id in ids:
        occ = await store.occurrence_get(occ_id)
        assert occ is not None and (occ.state, occ.instance_id) == (State.RUNNING, "dead")

    clock.advance(0.001)
    with caplog.at_level(logging.WARNING, logger="soloist"):
        assert await reaper.tick() == BEAT
    assert (reaper.reaped_total, woken) == (2, [1])
    for occ_id in ids:
        occ = await store.occurrence_get(occ_id)
        assert occ is not None
        assert (occ.state, occ.attempt, occ.crashes) == (State.SCHEDULED, 0, 1)
    expired = [r for r in caplog.records if getattr(r, "action", None) == "lease_expired"]
    assert sorted(getattr(r, "execution_id", None) for r in expired) == sorted(ids)
    assert all("held by dead expired" in r.getMessage() for r in expired)

    assert await reaper.tick() == BEAT
    assert (reaper.reaped_total, woken) == (2, [1])


async def test_a_reaper_tick_ends_a_crash_loop_dead(
    clock: FakeClock, store: RenewalCounter, caplog: pytest.LogCaptureFixture
) -> None:
    """max_crashes=2: the reaper's ticks run an occurrence whose runner died again twice
    (WARNING); the third time they end it dead with crash_loop (ERROR)."""
    reaper = Reaper(ServiceBundle(clock, "a"), store, timedelta(seconds=BEAT), lambda: None)
    app = make_app(clock, store)
    app.task(name="work", max_crashes=2)(lambda ctx: None)
    occ_id = await app.aenqueue("work")
    for crash in (1, 2, 3):
        assert len(await store.occurrence_claim("dead", ["work"], 1, timedelta(seconds=1))) == 1
        clock.advance(1)
        with caplog.at_level(logging.WARNING, logger="soloist"):
            await reaper.tick()
        occ = await store.occurrence_get(occ_id)
        assert occ is not None and occ.crashes == crash
    assert occ.state is State.DEAD and occ.error_code == ErrorCode.CRASH_LOOP.value
    assert [r.levelno for r in caplog.records if getattr(r, "action", None) == "lease_expired"] == [
        logging.WARNING,
        logging.WARNING,
        logging.ERROR,
    ]


# -- a lost lease is acted on ---------------------------------------------------------------------
async def test_lose_cancels_an_async_handler_and_writes_nothing(
    clock: FakeClock, store: RenewalCounter, caplog: pytest.LogCaptureFixture
) -> None:
    """Executor.lose() on a running async handler: ctx.lease_lost, the handler is
    cancelled at once, the run ends as lease_lost (counted and logged with that error
    code) and nothing is written; ctx.aheartbeat() then raises LeaseLostError."""
    runtime, run, seen = await claim_one(make_app(clock, store))
    with caplog.at_level(logging.WARNING, logger="soloist"):
        runtime.executor.lose(run)
        assert run.ctx.lease_lost
        await ended(run, timeout=1)
    assert seen.get("cancelled") is True
    assert runtime.executor.counts["lease_lost"] == 1
    assert [r for r in caplog.records if getattr(r, "error_code", None) == "lease_lost"]
    with pytest.raises(LeaseLostError):
        await seen["ctx"].aheartbeat()
    occ = await store.occurrence_get(run.occ.id)
    assert occ is not None and (occ.state, occ.attempt, occ.fencing_token) == (State.RUNNING, 1, 1)
    assert await store.occurrence_attempts(run.occ.id) == []
    runtime.executor.lose(run)  # twice: nothing more
    assert runtime.executor.counts["lease_lost"] == 1


async def test_a_sync_handler_learns_from_ctx_heartbeat_that_its_lease_was_lost(
    clock: FakeClock, store: RenewalCounter
) -> None:
    """Renewals fail for a whole TTL while a sync handler runs (it cannot be cancelled):
    at the local deadline the heartbeater's tick marks the lease lost, the handler's next
    ctx.heartbeat() raises LeaseLostError, and the run ends as lease_lost with nothing
    written; once the store's lease expires the occurrence is reaped and runs again,
    without spending a retry."""
    app = make_app(clock, store)
    running, proceed = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    @app.task(name="sync_work")
    def sync_work(ctx: Any) -> str:
        if ctx.fencing_token > 1:
            return "second run"
        running.set()
        proceed.wait(10)
        try:
            ctx.heartbeat()
        except LeaseLostError as exc:
            seen["raised"] = exc
            raise
        return "carried on after losing its lease"

    runtime = await started(app)
    occ_id = await app.aenqueue("sync_work")
    await runtime.executor.tick()
    run = runtime.executor.active[occ_id]
    assert await asyncio.to_thread(running.wait, 5)
    store.failing = True
    for step in (BEAT, BEAT, TRUSTED - 2 * BEAT):  # t = 3, 6: failed; t = 8: the deadline
        assert not run.ctx.lease_lost
        clock.advance(step)
        await runtime.heartbeater.tick()
    assert run.ctx.lease_lost and not run.cancelled_for_lease  # a sync handler: only told
    proceed.set()
    await ended(run)
    assert isinstance(seen.get("raised"), LeaseLostError)
    assert runtime.executor.counts["lease_lost"] == 1
    assert runtime.executor.counts["succeeded"] == 0
    occ = await store.occurrence_get(occ_id)
    assert occ is not None and (occ.state, occ.result) == (State.RUNNING, None)

    store.failing = False
    clock.advance(TTL - TRUSTED)  # t = 9: the store's lease expires
    await runtime.reaper.tick()
    await runtime.executor.tick()
    await ended(runtime.executor.active[occ_id])
    occ = await store.occurrence_get(occ_id)
    assert occ is not None
    assert (occ.state, occ.result, occ.attempt, occ.crashes) == (
        State.SUCCEEDED,
        "second run",
        1,
        1,
    )
