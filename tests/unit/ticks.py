"""Driving a runtime by hand in unit tests: its services built but not looping, each tick
called by the test (on a fake clock)."""

from __future__ import annotations

from soloist import Scheduler
from soloist.runtime import Runtime


async def started(app: Scheduler) -> Runtime:
    """A runtime whose services are built but not looping: the test calls tick()."""
    store = await app.astore()
    runtime = Runtime(store, app.registry, app.config, app.clock)
    await runtime.register()
    return runtime


async def plan_tick(runtime: Runtime) -> float:
    """One planner tick after one of the partition service (in distributed mode)."""
    if runtime.partitions is not None:
        await runtime.partitions.tick()
    return await runtime.planner.tick()
