"""The executor's store traffic: batched completions, per-run fencing, drain, wake-ups."""

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
from soloist.models import Claimed, Kind, NewOccurrence, Outcome, State
from soloist.runtime import Runtime
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


class CountingStore:
    """A memory store that records the runners' writes, in order, and can hold
    completions back (``hold``) or announce work (``notify``) on demand."""

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner
        self.calls: list[tuple[str, list[str]]] = []
        self.completing = asyncio.Event()  # set when a completion write has begun
        self.hold = asyncio.Event()
        self.hold.set()
        self.notify = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def completes(self, instance: str) -> list[list[str]]:
        """The ids of each completion write of ``instance``, in order."""
        return [ids for call, ids in self.calls if call == f"complete:{instance}"]

    async def occurrence_complete(
        self, instance_id: str, outcomes: Sequence[Outcome], now: datetime | None = None
    ) -> set[str]:
        self.calls.append((f"complete:{instance_id}", [o.id for o in outcomes]))
        self.completing.set()
        await self.hold.wait()
        return await self._inner.occurrence_complete(instance_id, outcomes, now)

    async def lease_release(
        self, instance_id: str, claims: Sequence[Claimed], now: datetime | None = None
    ) -> set[str]:
        self.calls.append((f"release:{instance_id}", [c.id for c in claims]))
        return await self._inner.lease_release(instance_id, claims, now)

    async def work_wait(self, timeout: float) -> bool:
        await self.notify.wait()
        self.notify.clear()
        return True


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(clock: FakeClock) -> CountingStore:
    return CountingStore(MemoryStore("memory://", clock=clock))


def make_app(clock: FakeClock, store: CountingStore, iid: str, **options: Any) -> Scheduler:
    return Scheduler(
        store,  # type: ignore[arg-type]
        instance_id=iid,
        clock=clock,
        lease_ttl="9s",
        concurrency=100,
        **options,
    )


async def settle(runtime: Runtime) -> None:
    tasks = [r.task for r in runtime.executor.active.values() if r.task is not None]
    if tasks:
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)


async def test_runs_finishing_together_share_one_completion_write(
    clock: FakeClock, store: CountingStore
) -> None:
    """50 runs that finish in the same moment are recorded by one store call, not 50."""
    app = make_app(clock, store, "a")
    gate = asyncio.Event()

    @app.task
    async def job(ctx) -> int:  # type: ignore[no-untyped-def]
        await gate.wait()
        return ctx.attempt  # type: ignore[no-any-return]

    runtime = await started(app)
    ids = [await app.aenqueue(job) for _ in range(50)]
    await runtime.executor.tick()
    assert len(runtime.executor.active) == 50
    gate.set()
    await settle(runtime)
    writes = store.completes("a")
    assert len(writes) == 1 and sorted(writes[0]) == sorted(ids)
    for occ_id in ids:
        occ = await store.occurrence_get(occ_id)
        assert occ is not None and (occ.state, occ.result) == (State.SUCCEEDED, 1)
    assert runtime.executor.counts["succeeded"] == 50


async def test_outcomes_arriving_during_a_write_go_in_the_next_one(
    clock: FakeClock, store: CountingStore
) -> None:
    """While one write is in flight, finishing runs queue up and share the next write."""
    app = make_app(clock, store, "a")

    @app.task
    async def quick(ctx) -> None:  # type: ignore[no-untyped-def]
        return None

    runtime = await started(app)
    store.hold.clear()
    first = await app.aenqueue(quick)
    await runtime.executor.tick()
    await asyncio.wait_for(store.completing.wait(), 5)  # the first write is held
    later = [await app.aenqueue(quick) for _ in range(20)]
    await runtime.executor.tick()
    for _ in range(5):
        await asyncio.sleep(0)  # the 20 finish and queue behind the held write
    store.hold.set()
    await settle(runtime)
    assert store.completes("a") == [[first], later]


async def test_a_fenced_outcome_in_a_batch_is_reported_for_its_run_only(
    clock: FakeClock, store: CountingStore, caplog: pytest.LogCaptureFixture
) -> None:
    """In one batch, the stale run is logged as fenced; the others are recorded."""
    caplog.set_level(logging.INFO, logger="soloist")
    gate = asyncio.Event()
    apps = []
    for iid in ("a", "b"):
        app = make_app(clock, store, iid)

        @app.task(name="work", retries=1)
        async def work(ctx) -> str:  # type: ignore[no-untyped-def]
            if ctx.instance_id == "a":
                await gate.wait()
            return ctx.instance_id  # type: ignore[no-any-return]

        apps.append(app)
    a, b = [await started(app) for app in apps]
    stale = await apps[0].aenqueue("work")
    await a.executor.tick()
    clock.advance(10)  # a's lease of `stale` (9 s) expires: a looks frozen
    assert [o.id for o in await store.occurrence_reap()] == [stale]
    await b.executor.tick()  # b retries it and succeeds
    await settle(b)
    fresh = [await apps[0].aenqueue("work") for _ in range(2)]
    await a.executor.tick()
    gate.set()  # a's three runs finish together: one batch with a stale member
    await settle(a)
    assert [sorted(ids) for ids in store.completes("a")] == [sorted([stale, *fresh])]
    assert a.executor.counts == {
        "succeeded": 2,
        "failed": 0,
        "dead": 0,
        "cancelled": 0,
        "fenced": 1,
        "lease_lost": 0,
        "unrecorded": 0,
    }
    fenced = [r for r in caplog.records if getattr(r, "action", None) == "fenced"]
    assert [r.execution_id for r in fenced] == [stale]  # type: ignore[attr-defined]
    succeeded = {
        r.execution_id  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "action", None) == "succeeded" and r.instance_id == "a"  # type: ignore[attr-defined]
    }
    assert succeeded == set(fresh)
    occ = await store.occurrence_get(stale)
    assert occ is not None and (occ.state, occ.instance_id, occ.result) == (
        State.SUCCEEDED,
        "b",
        "b",
    )


async def test_drain_writes_queued_outcomes_and_releases_the_rest_at_once(
    clock: FakeClock, store: CountingStore
) -> None:
    """On stop, outcomes still waiting to be written are written (not released), and the
    lease of the still-running handler is handed back at once, without waiting for those
    writes (a store that is slow to take them must not delay the hand-over)."""
    app = make_app(clock, store, "a", grace_period="2s")

    @app.task
    async def quick(ctx) -> None:  # type: ignore[no-untyped-def]
        return None

    @app.task
    async def forever(ctx) -> None:  # type: ignore[no-untyped-def]
        await asyncio.Event().wait()

    runtime = await started(app)
    store.hold.clear()
    stuck = await app.aenqueue(forever)
    first = await app.aenqueue(quick)
    await runtime.executor.tick()
    await asyncio.wait_for(store.completing.wait(), 5)  # `first` is being written, held
    queued = [await app.aenqueue(quick) for _ in range(3)]
    await runtime.executor.tick()  # these finish and wait in the completer's queue
    stopping = asyncio.create_task(runtime.stop())
    for _ in range(40):  # the grace period runs out while the write is still held
        await asyncio.sleep(0.01)
        clock.advance(0.1)
    assert not stopping.done()
    assert store.calls == [("complete:a", [first]), ("release:a", [stuck])]
    store.hold.set()
    await asyncio.wait_for(stopping, 5)
    assert store.calls == [
        ("complete:a", [first]),
        ("release:a", [stuck]),
        ("complete:a", queued),
    ]
    for occ_id in (first, *queued):
        occ = await store.occurrence_get(occ_id)
        assert occ is not None and occ.state is State.SUCCEEDED
    occ = await store.occurrence_get(stuck)
    assert occ is not None and (occ.state, occ.error_code) == (State.SCHEDULED, "cancelled")


async def test_idle_executor_wakes_when_the_store_signals_work(
    clock: FakeClock, store: CountingStore
) -> None:
    """An idle executor runs work another instance made due as soon as the store says so,
    not after its poll interval (one hour here, on a clock that does not move)."""
    app = make_app(clock, store, "a", poll_interval="1h")
    done = asyncio.Event()

    @app.task
    async def ping(ctx) -> None:  # type: ignore[no-untyped-def]
        done.set()

    runtime = await started(app)
    await runtime.executor.start()
    try:
        for _ in range(5):
            await asyncio.sleep(0)  # the first tick finds nothing and the executor waits
        assert not runtime.executor.active
        now = clock.now()
        # Written straight to the store, as another process would: no local wake-up.
        await store.occurrence_insert(
            NewOccurrence("t:1", "ping", "ping", "", now, now, Kind.TASK, max_attempts=1)
        )
        store.notify.set()
        await asyncio.wait_for(done.wait(), 5)
    finally:
        await runtime.executor.drain(0)


async def test_the_claim_takes_every_free_slot_in_one_call(
    clock: FakeClock, store: CountingStore
) -> None:
    """Due work is claimed up to the free slots in a single store call."""
    app = make_app(clock, store, "a")
    calls: list[int] = []
    claim = store._inner.occurrence_claim

    async def counting_claim(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[2])
        return await claim(*args, **kwargs)

    store.occurrence_claim = counting_claim  # type: ignore[method-assign]

    @app.task
    async def quick(ctx) -> None:  # type: ignore[no-untyped-def]
        return None

    runtime = await started(app)
    for _ in range(30):
        await app.aenqueue(quick)
    delay = await runtime.executor.tick()
    assert calls == [100] and len(runtime.executor.active) == 30
    assert delay == pytest.approx(1.0)  # nothing else due: wait up to the poll interval
    await settle(runtime)


async def test_sync_handlers_hand_their_results_back_in_bursts(
    clock: FakeClock, store: CountingStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Sync handlers run in worker threads; each result reaches its own run, and a sync
    handler past its timeout is recorded as timeout while its late result is ignored: once
    it has returned (the pool logs leaked_thread_returned), the occurrence still has no
    result and was written once."""
    app = make_app(clock, store, "a")
    release = asyncio.Event()
    slow_started = asyncio.Event()
    loop = asyncio.get_running_loop()

    @app.task
    def double(ctx, n: int) -> int:  # type: ignore[no-untyped-def]
        return n * 2

    @app.task(timeout=0.05)
    def slow(ctx) -> str:  # type: ignore[no-untyped-def]
        loop.call_soon_threadsafe(slow_started.set)
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result(5)
        return "late"

    runtime = await started(app)
    late = await app.aenqueue(slow)
    ids = {await app.aenqueue(double, {"n": n}): n for n in range(40)}
    await runtime.executor.tick()
    await asyncio.wait_for(slow_started.wait(), 5)
    await settle(runtime)
    for occ_id, n in ids.items():
        occ = await store.occurrence_get(occ_id)
        assert occ is not None and (occ.state, occ.result) == (State.SUCCEEDED, 2 * n)
    occ = await store.occurrence_get(late)
    assert occ is not None and (occ.state, occ.error_code, occ.result) == (
        State.DEAD,
        "timeout",
        None,
    )

    def returned() -> bool:
        return any(getattr(r, "action", None) == "leaked_thread_returned" for r in caplog.records)

    with caplog.at_level(logging.INFO, logger="soloist"):
        release.set()  # the abandoned thread finishes; its result goes nowhere
        for _ in range(500):
            if returned():
                break
            await asyncio.sleep(0.01)
        assert returned(), "the abandoned handler never returned"
    await runtime.executor.drain(0)  # any write still queued is made
    occ = await store.occurrence_get(late)
    assert occ is not None and (occ.state, occ.error_code, occ.result) == (
        State.DEAD,
        "timeout",
        None,
    )
    assert sum(ids.count(late) for ids in store.completes("a")) == 1


@pytest.mark.parametrize("coming", [True, False])
async def test_a_write_waits_a_moment_only_while_more_outcomes_are_coming(
    clock: FakeClock, store: CountingStore, coming: bool
) -> None:
    """The completer's ``hold()``: while it says outcomes are about to come (short sync
    handlers still in the worker threads), a write waits HOLD for them, and an outcome
    arriving within that moment shares the write; otherwise the first outcome is written
    at once and a later one goes in a write of its own."""
    from soloist.runtime.completer import HOLD, Completer
    from soloist.runtime.service import ServiceBundle

    occs = [
        NewOccurrence(
            dedupe_key=f"t:{n}",
            job="j",
            task="j",
            scope="",
            plan_time=T0,
            due_at=T0,
            kind=Kind.TASK,
            max_attempts=1,
            payload={},
        )
        for n in range(2)
    ]
    for occ in occs:
        await store.occurrence_insert(occ)
    claimed = await store.occurrence_claim("a", ["j"], 2, timedelta(seconds=9))
    outcomes = [Outcome(c.id, c.fencing_token, State.SUCCEEDED) for c in claimed]
    completer = Completer(
        ServiceBundle(clock, "a"),
        store,  # type: ignore[arg-type]
        call_timeout=3.0,
        hold=lambda: coming,
    )
    first = asyncio.ensure_future(completer.complete(outcomes[0]))
    if not coming:
        # Written at once: the write has begun after a few turns of the loop, however
        # loaded the box (no timer involved); an outcome coming later writes on its own.
        for _ in range(5):
            await asyncio.sleep(0)
        assert store.completing.is_set(), "the write waited with nothing coming"
        assert await asyncio.wait_for(first, 5)
        assert await asyncio.wait_for(completer.complete(outcomes[1]), 5)
        assert store.completes("a") == [[outcomes[0].id], [outcomes[1].id]]
        return
    # The second outcome comes a fifth of the moment later (timers fire in order, so it
    # is queued before the held write goes, however late the loop wakes).
    second: list[asyncio.Future[bool]] = []
    asyncio.get_running_loop().call_later(
        HOLD / 5,
        lambda: second.append(asyncio.ensure_future(completer.complete(outcomes[1]))),
    )
    assert await asyncio.wait_for(first, 5)
    assert await asyncio.wait_for(second[0], 5)
    assert store.completes("a") == [[outcomes[0].id, outcomes[1].id]]


async def in_the_pool(pool: Any) -> None:
    """Wait (a few loop turns) until the run's task has handed its call to the pool."""
    for _ in range(100):
        if pool.in_flight == 1:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{pool.in_flight} call(s) in flight, expected 1")


async def test_the_executor_holds_writes_only_while_short_sync_handlers_are_running(
    clock: FakeClock, store: CountingStore
) -> None:
    """Wired to the executor: outcomes are held while a ``def`` handler is in the worker
    threads and handlers are short; not before any handler finished (no duration known),
    not once the running handler has run long, not once the threads are empty."""
    app = make_app(clock, store, "a")
    go = threading.Event()

    @app.task
    def job(ctx) -> None:  # type: ignore[no-untyped-def]
        go.wait(5)

    runtime = await started(app)
    ex = runtime.executor
    assert ex.completer.hold is not None
    await app.aenqueue(job)
    await ex.tick()
    await in_the_pool(ex.pool)
    assert not ex.completer.hold()  # no handler has finished: no duration known yet
    go.set()
    await settle(runtime)
    await ex.completer.drain()
    assert ex.pool.in_flight == 0 and not ex.completer.hold()
    go.clear()
    await app.aenqueue(job)
    await ex.tick()
    await in_the_pool(ex.pool)
    assert ex.completer.hold()  # a short handler is running in a thread
    clock.advance(1)  # ... until it has run long: its outcome is not about to come
    assert not ex.completer.hold()
    go.set()
    await settle(runtime)
    assert not ex.completer.hold()
