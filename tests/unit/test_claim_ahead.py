"""Claiming ahead (soloist.runtime.executor, "Claiming ahead"): while handlers are short a
claim takes more than the free slots; the runs it took ahead start with no further claim,
keep their leases, are handed back when slots stay busy, and at a graceful stop."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

from ticks import started

from soloist import Scheduler
from soloist.models import State
from soloist.runtime import Runtime
from soloist.runtime.executor import AHEAD_HANDBACK, AHEAD_MAX, AHEAD_WAIT
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


def make(clock: FakeClock, concurrency: int = 2, **options: Any) -> tuple[Scheduler, MemoryStore]:
    store = MemoryStore("memory://", clock=clock)
    app = Scheduler(
        store, instance_id="a", clock=clock, lease_ttl="9s", concurrency=concurrency, **options
    )
    return app, store


def count_claims(runtime: Runtime, waiting: list[int] | None = None) -> list[tuple[int, int]]:
    """(asked, got) of each claim the executor makes from now on; ``waiting`` gets how
    many runs were waiting when each claim was made."""
    calls: list[tuple[int, int]] = []
    executor = runtime.executor
    claim = executor.store.occurrence_claim

    async def counting(*args: Any, **kwargs: Any) -> Any:
        if waiting is not None:
            waiting.append(len(executor.waiting))
        got = await claim(*args, **kwargs)
        calls.append((args[2], len(got)))
        return got

    executor.store.occurrence_claim = counting  # type: ignore[method-assign]
    return calls


async def settle(runtime: Runtime) -> None:
    """Let every started handler finish and its outcome be written."""
    for _ in range(50):
        tasks = [r.task for r in runtime.executor.active.values() if r.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await runtime.executor.completer.drain()
        await asyncio.sleep(0)


async def test_short_handlers_are_claimed_ahead_and_start_without_another_claim() -> None:
    clock = FakeClock(T0)
    app, store = make(clock)
    ran: list[str] = []

    @app.task
    async def quick(ctx) -> None:  # type: ignore[no-untyped-def]
        ran.append(ctx.occurrence_id)

    runtime = await started(app)
    waiting_at_claim: list[int] = []
    calls = count_claims(runtime, waiting_at_claim)
    executor = runtime.executor
    ids = [await app.aenqueue(quick) for _ in range(40)]
    await executor.tick()  # no handler has finished yet: the free slots only
    assert calls == [(2, 2)] and not executor.waiting
    await settle(runtime)
    assert executor.duration is not None and executor.duration < AHEAD_WAIT
    await executor.tick()
    ahead = 2 * AHEAD_MAX  # concurrency 2: ten times that at most
    # The free slots (any due work), then the line (only overlap "allow").
    assert calls[1:] == [(2, 2), (ahead, ahead)]
    assert len(executor.waiting) == ahead and len(executor.active) == 2 + ahead
    # The waiting runs hold leases, renewed like running ones.
    waiting = list(executor.waiting)
    for run in waiting:
        occ = await store.occurrence_get(run.occ.id)
        assert occ is not None and occ.state is State.RUNNING and occ.instance_id == "a"
    assert await executor.renew(list(executor.active.values()))
    # Slots free up: the waiting runs start, two at a time, with no claim in between
    # until the line is down to half its target; then it is topped up in one claim.
    for _ in range(100):
        await settle(runtime)
        if len(ran) == len(ids):
            break
        await executor.tick()
    assert sorted(ran) == sorted(ids)
    assert all(waiting <= ahead // 2 for waiting in waiting_at_claim[2:])
    assert calls[3] == (ahead // 2, ahead // 2)
    # 40 runs in 5 claims that found work: 2, 2 + 20, 10, and the 6 left.
    assert [got for _, got in calls if got] == [2, 2, 20, 10, 6]
    await runtime.stop()
    assert executor.claimed_ahead >= ahead
    assert not executor.waiting and not executor.active


async def test_nothing_is_claimed_ahead_while_a_handler_runs_longer() -> None:
    clock = FakeClock(T0)
    app, _ = make(clock)
    gate = asyncio.Event()

    @app.task
    async def quick(ctx) -> None:  # type: ignore[no-untyped-def]
        return None

    @app.task
    async def slow(ctx) -> None:  # type: ignore[no-untyped-def]
        await gate.wait()

    runtime = await started(app)
    calls = count_claims(runtime)
    executor = runtime.executor
    await app.aenqueue(quick)
    await executor.tick()
    await settle(runtime)  # a short run: claiming ahead would be on
    await app.aenqueue(slow)
    await executor.tick()
    # Only the slow one was there: the claim for the free slots found less than it asked
    # for, so no claim ahead follows it.
    assert calls[-1] == (2, 1)
    clock.advance(AHEAD_WAIT * 2)  # the slow handler now runs longer than AHEAD_WAIT
    for _ in range(5):
        await app.aenqueue(quick)
    await executor.tick()
    assert calls[-1] == (1, 1)  # the one free slot, nothing ahead
    assert not executor.waiting
    gate.set()
    await settle(runtime)
    await runtime.stop()


async def test_handlers_taking_longer_than_the_wait_are_never_claimed_ahead() -> None:
    clock = FakeClock(T0)
    app, _ = make(clock)

    @app.task
    async def steady(ctx) -> None:  # type: ignore[no-untyped-def]
        clock.advance(AHEAD_WAIT * 2)  # each run takes 2 x AHEAD_WAIT on the fake clock

    runtime = await started(app)
    calls = count_claims(runtime)
    for _ in range(6):
        await app.aenqueue(steady)
    for _ in range(4):
        await runtime.executor.tick()
        await settle(runtime)
    assert calls and all(asked <= 2 for asked, _ in calls)
    assert runtime.executor.claimed_ahead == 0
    await runtime.stop()


async def test_runs_waiting_too_long_are_handed_back_for_any_instance() -> None:
    clock = FakeClock(T0)
    app, store = make(clock)
    gate = asyncio.Event()
    ran: list[str] = []

    @app.task
    async def quick(ctx) -> None:  # type: ignore[no-untyped-def]
        ran.append(ctx.occurrence_id)

    @app.task
    async def slow(ctx) -> None:  # type: ignore[no-untyped-def]
        await gate.wait()

    runtime = await started(app)
    executor = runtime.executor
    await app.aenqueue(quick)
    await executor.tick()
    await settle(runtime)
    # Two slow runs take both slots; the quick ones claimed with them wait.
    slow_ids = [await app.aenqueue(slow) for _ in range(2)]
    clock.advance(0.001)
    quick_ids = [await app.aenqueue(quick) for _ in range(3)]
    await executor.tick()
    assert {r.occ.id for r in executor.waiting} == set(quick_ids)
    await executor.tick()  # not waited long enough yet: kept
    assert len(executor.waiting) == 3
    clock.advance(AHEAD_HANDBACK + 0.01)
    await executor.tick()
    assert not executor.waiting and executor.handed_back == 3
    assert set(executor.active) == set(slow_ids)
    for occ_id in quick_ids:
        occ = await store.occurrence_get(occ_id)
        assert occ is not None and occ.state is State.SCHEDULED and occ.attempt == 0
        attempts = await store.occurrence_attempts(occ_id)
        assert [a.outcome for a in attempts] == ["released"]
    # Another instance takes them at once.
    claimed = await store.occurrence_claim("b", ["quick"], 10, runtime.config.lease_ttl)
    assert {o.id for o in claimed} == set(quick_ids)
    assert all(o.attempt == 1 for o in claimed)
    assert not ran[1:]  # none of them ran here
    gate.set()
    await settle(runtime)
    await runtime.stop()


async def test_a_graceful_stop_hands_back_the_runs_claimed_ahead() -> None:
    clock = FakeClock(T0)
    app, store = make(clock, grace_period="1s")
    gate = asyncio.Event()

    @app.task
    async def quick(ctx) -> None:  # type: ignore[no-untyped-def]
        await gate.wait()

    runtime = await started(app)
    executor = runtime.executor
    await app.aenqueue(quick)
    gate.set()
    await executor.tick()
    await settle(runtime)
    gate.clear()
    ids = [await app.aenqueue(quick) for _ in range(6)]
    await executor.tick()
    assert len(executor.waiting) == 4
    gate.set()  # the two running ones finish within the grace period
    await asyncio.wait_for(runtime.stop(), 5)
    states = {}
    for occ_id in ids:
        occ = await store.occurrence_get(occ_id)
        assert occ is not None
        states[occ_id] = occ.state
    assert sorted(states.values()) == sorted([State.SUCCEEDED] * 2 + [State.SCHEDULED] * 4)
    assert not executor.waiting
