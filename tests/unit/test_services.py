"""The services' shared bundle: one injected clock drives every deadline (a FakeClock moves
lease deadlines with no real waiting), services built alone count into NO_METRICS, and the
runtime reads no system clock of its own."""

from __future__ import annotations

import ast
import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import soloist.runtime
from soloist import Scheduler
from soloist.errors import StoreUnavailableError
from soloist.metrics import NO_METRICS
from soloist.runtime import Runtime
from soloist.runtime.executor import (
    BLOCKED_RECHECK,
    JUST_DUE_RECHECK,
    Executor,
    Run,
    idle_delay,
)
from soloist.runtime.leases import Heartbeater
from soloist.runtime.service import ServiceBundle
from soloist.stores.base import Store
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
#: A 9 s lease: 1 s margin, so a runner trusts it until 8 s after the renewal was sent.
TTL = timedelta(seconds=9)
TRUSTED = 8.0
BEAT = timedelta(seconds=3)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def app(clock: FakeClock) -> Scheduler:
    app = Scheduler(
        MemoryStore("memory://", clock=clock), instance_id="a", clock=clock, lease_ttl="9s"
    )

    @app.task(name="quick")
    async def quick(ctx: Any) -> int:
        return 1

    return app


def executor_alone(clock: FakeClock, app: Scheduler, store: Store) -> Executor:
    """An executor built from a bare bundle (no Runtime, no metrics)."""
    return Executor(
        ServiceBundle(clock, "a"),
        store,
        app.registry,
        concurrency=2,
        lease_ttl=TTL,
        poll_interval=timedelta(seconds=1),
    )


async def claim_gated(app: Scheduler, executor: Executor) -> tuple[Run, asyncio.Event]:
    """Claim one run of an async task that waits for the returned gate; return once its
    handler runs."""
    gate, running = asyncio.Event(), asyncio.Event()

    @app.task(name="slow")
    async def slow(ctx: Any) -> None:
        running.set()
        await gate.wait()

    occ_id = await app.aenqueue("slow")
    await executor.tick()
    await asyncio.wait_for(running.wait(), 5)
    return executor.active[occ_id], gate


async def fail_renewals(*args: Any, **kwargs: Any) -> set[str]:
    raise StoreUnavailableError("no route to host (injected)")


async def ended(run: Run) -> None:
    assert run.task is not None
    await asyncio.wait_for(asyncio.gather(run.task, return_exceptions=True), 5)


def test_fake_monotonic_time_moves_with_now(clock: FakeClock) -> None:
    """FakeClock's monotonic reading moves exactly as far as now() on advance() and set()."""
    start = clock.monotonic()
    clock.advance(1.5)
    clock.advance(timedelta(milliseconds=250))
    assert clock.monotonic() - start == 1.75
    assert clock.now() - T0 == timedelta(seconds=1.75)
    clock.set(T0 + timedelta(seconds=10))
    assert clock.monotonic() - start == 10.0


async def test_the_executor_keeps_lease_deadlines_on_the_injected_clock(
    clock: FakeClock, app: Scheduler
) -> None:
    """A run's lease deadline is read from the bundle's clock: once the FakeClock passes it,
    check_leases() gives the lease up and cancels the async handler, with no real waiting."""
    executor = executor_alone(clock, app, await app.astore())
    run, _gate = await claim_gated(app, executor)
    assert run.lease_deadline == clock.monotonic() + TRUSTED

    clock.advance(TRUSTED - 0.1)
    assert executor.check_leases() == TRUSTED  # still trusted: the deadline is ahead
    assert not run.ctx.lease_lost

    clock.advance(0.1)
    assert executor.check_leases() is None
    assert run.ctx.lease_lost and run.cancelled_for_lease
    await ended(run)
    assert executor.counts["lease_lost"] == 1
    executor.pool.shutdown(wait=False)


async def test_the_heartbeater_wakes_at_the_lease_deadline_of_the_injected_clock(
    clock: FakeClock, app: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While renewals fail, the heartbeater's next wake is the run's lease deadline measured
    on the FakeClock (not its 3 s beat), and its tick at that deadline loses the lease."""
    store = await app.astore()
    executor = executor_alone(clock, app, store)
    heartbeater = Heartbeater(ServiceBundle(clock, "a"), executor, BEAT)
    run, _gate = await claim_gated(app, executor)
    monkeypatch.setattr(store, "lease_renew", fail_renewals)

    clock.advance(TRUSTED - 0.05)
    assert await heartbeater.tick() == pytest.approx(0.05)  # only the deadline is left
    assert not run.ctx.lease_lost and heartbeater.failures == 1

    clock.advance(0.05)
    await heartbeater.tick()
    assert run.ctx.lease_lost
    await ended(run)
    executor.pool.shutdown(wait=False)


async def test_a_running_heartbeater_loses_a_lease_when_the_fake_clock_passes_it(
    clock: FakeClock, app: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heartbeater's loop sleeps on the FakeClock and measures leases on it: moving the
    fake time 8 s cancels the handler at once (real time could not: the test allows 5 s)."""
    store = await app.astore()
    executor = executor_alone(clock, app, store)
    heartbeater = Heartbeater(ServiceBundle(clock, "a"), executor, BEAT)
    run, _gate = await claim_gated(app, executor)
    monkeypatch.setattr(store, "lease_renew", fail_renewals)
    await heartbeater.start()
    try:
        while clock.monotonic() < TRUSTED:
            await sleeping_on(clock)
            assert not run.ctx.lease_lost
            clock.advance(0.25)
        await ended(run)
        assert run.ctx.lease_lost and run.cancelled_for_lease
    finally:
        await heartbeater.stop()
        executor.pool.shutdown(wait=False)


async def sleeping_on(clock: FakeClock) -> None:
    """Let the event loop run until a service sleeps on ``clock``."""
    for _ in range(10_000):
        if clock.sleepers:
            return
        await asyncio.sleep(0)
    raise AssertionError("no service went to sleep on the fake clock")


async def test_a_service_built_without_metrics_counts_into_no_metrics(
    clock: FakeClock, app: Scheduler
) -> None:
    """A bare bundle's metrics are NO_METRICS, and an executor built with it runs and
    records a handler (no service checks for missing metrics)."""
    bundle = ServiceBundle(clock, "a")
    assert bundle.metrics is NO_METRICS
    executor = executor_alone(clock, app, await app.astore())
    occ_id = await app.aenqueue("quick")
    await executor.tick()
    await ended(executor.active[occ_id])
    assert executor.counts["succeeded"] == 1
    executor.pool.shutdown(wait=False)


async def test_the_runtime_gives_every_service_one_bundle(clock: FakeClock, app: Scheduler) -> None:
    """The Runtime builds one bundle (its clock, instance id and metrics) and every
    service, and the store recovery, uses it."""
    runtime = Runtime(await app.astore(), app.registry, app.config, clock)
    bundle = runtime.bundle
    assert (bundle.clock, bundle.instance_id, bundle.metrics) == (clock, "a", runtime.metrics)
    assert all(service.bundle is bundle for service in runtime.services())
    assert all(service.clock is clock for service in runtime.services())
    assert runtime.recovery.metrics is runtime.metrics
    assert runtime.recovery.clock is clock


#: Reads of the system's time that the runtime must leave to its Clock.
SYSTEM_CLOCK_READS = ("time.monotonic", "time.time", "loop.time(", "datetime.now(", "utcnow(")


def test_the_runtime_reads_no_system_clock() -> None:
    """No module of soloist.runtime imports ``time`` or reads the system clock: all time
    comes from the injected Clock, so a FakeClock drives every deadline."""
    offenders: dict[str, list[str]] = {}
    for path in sorted(Path(soloist.runtime.__file__).parent.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        found = [read for read in SYSTEM_CLOCK_READS if read in source]
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                found += [a.name for a in node.names if a.name == "time"]
            elif isinstance(node, ast.ImportFrom) and node.module == "time":
                found.append("from time import")
        if found:
            offenders[path.name] = found
    assert offenders == {}


def test_an_executor_waits_little_for_work_that_came_due_a_moment_ago() -> None:
    """Work due in the future is waited for; work due a moment ago (not due yet for the
    claim just made, whose clock read came first) is looked at again within milliseconds;
    work due long ago but not claimable (held back by overlap) only every 0.2 s."""
    assert idle_delay(0.3, 1.0) == 0.3 and idle_delay(5.0, 1.0) == 1.0
    assert idle_delay(-0.004, 1.0) == JUST_DUE_RECHECK < 0.01
    assert idle_delay(-2.0, 1.0) == BLOCKED_RECHECK
    assert idle_delay(-2.0, 0.1) == 0.1
