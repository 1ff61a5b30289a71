"""The planning figure, part 1: what one planner tick costs, in-process.

A store whose planning index holds ``tick_streams`` dynamic schedules, of which
``tick_due`` are due at every tick, against a store holding only those ``tick_due``: the
same ticks should cost the same (O(due), not O(schedules)). The planner is driven tick by
tick, as tests/unit/test_runtime.py does: a :class:`soloist.runtime.Runtime` built on the
store (distributed mode, default options), one partitions tick, then one planner tick.

The background streams run ``every("1d")`` from a day ahead (not due during the run); the
due ones ``every("1s")``. The first ticks take the never-planned streams of the index once
(``job_add`` enters each one due at once); their cost is reported too (``first_pass_s``).
The measured ticks then run about a second apart, so that each one finds the due streams
due again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
from datetime import timedelta
from typing import Any

from soloist.context import JobContext
from soloist.models import JobRecord
from soloist.runtime import Runtime
from soloist.runtime.planner import BATCH, MAX_BATCHES
from soloist.scheduler import Scheduler
from soloist.schedules import every
from soloist.stores import open_store
from soloist.stores.base import Store
from soloist_bench.config import PLANNED, BenchConfig
from soloist_bench.targets import Target

__all__ = ["add_schedules", "copies", "measure_tick_cost"]

#: Dynamic schedules written concurrently (``job_add`` calls in flight).
ADD_IN_FLIGHT = 64


async def add_schedules(store: Store, records: list[JobRecord]) -> float:
    """Add dynamic schedules (copies of one added with ``app.schedules.aadd``, see
    :func:`copies`) by ``job_add`` calls, ``ADD_IN_FLIGHT`` at a time; the seconds taken."""
    started = time.perf_counter()
    for offset in range(0, len(records), ADD_IN_FLIGHT):
        chunk = records[offset : offset + ADD_IN_FLIGHT]
        await asyncio.gather(*(store.job_add(record) for record in chunk))
    return time.perf_counter() - started


def copies(template: JobRecord, names: list[str]) -> list[JobRecord]:
    return [dataclasses.replace(template, name=name) for name in names]


def _sync_noop(ctx: JobContext) -> None:
    return None


async def _tick(runtime: Runtime) -> tuple[float, int, int]:
    """One partitions tick (not timed), then one timed planner tick: seconds, round trips,
    streams planned."""
    if runtime.partitions is not None:
        await runtime.partitions.tick()
    planner = runtime.planner
    trips, streams = planner.round_trips, planner.streams_total
    started = time.perf_counter()
    await planner.tick()
    return (
        time.perf_counter() - started,
        planner.round_trips - trips,
        planner.streams_total - streams,
    )


async def _ticks_over(target: Target, config: BenchConfig, background: int) -> dict[str, Any]:
    url = target.fresh_url()
    store = open_store(url)
    app = Scheduler(store, instance_id="bench-planner")
    app.task(name=PLANNED)(_sync_noop)
    try:
        await store.migrate()
        now = await store.now()
        added = 0.0
        if background:
            idle = await app.schedules.aadd(
                "bg-0", task=PLANNED, schedule=every("1d", start=now + timedelta(days=1))
            )
            names = [f"bg-{i}" for i in range(1, background)]
            added = await add_schedules(store, copies(idle, names))
        due = await app.schedules.aadd("due-0", task=PLANNED, schedule=every("1s"))
        await add_schedules(store, copies(due, [f"due-{i}" for i in range(1, config.tick_due)]))
        runtime = Runtime(store, app.registry, app.config, app.clock)
        await runtime.register()
        # The first ticks plan every never-planned stream once (the whole index).
        started, first_ticks, first_streams = time.perf_counter(), 0, 0
        while True:
            _, _, streams = await _tick(runtime)
            first_ticks, first_streams = first_ticks + 1, first_streams + streams
            if streams < BATCH * MAX_BATCHES:  # the tick found all that was due
                break
        first_pass = time.perf_counter() - started
        seconds, trips, planned = [], [], []
        for _ in range(config.ticks):
            await asyncio.sleep(1.05)  # every due stream is due again
            took, rt, streams = await _tick(runtime)
            seconds.append(took)
            trips.append(rt)
            planned.append(streams)
        return {
            "streams_in_index": background + config.tick_due,
            "add_s": added,
            "first_pass_s": first_pass,
            "first_pass_ticks": first_ticks,
            "tick_ms": statistics.median(seconds) * 1000,
            "tick_ms_all": [round(s * 1000, 2) for s in seconds],
            "round_trips_per_tick": statistics.median(trips),
            "streams_per_tick": statistics.median(planned),
        }
    finally:
        await store.close()


async def measure_tick_cost(target: Target, config: BenchConfig) -> dict[str, Any]:
    """Planner tick cost with ``tick_streams`` streams in the index against only the
    ``tick_due`` due ones (medians of ``ticks`` ticks each), and their ratios."""
    big = await _ticks_over(target, config, config.tick_streams - config.tick_due)
    small = await _ticks_over(target, config, 0)
    return {
        "large": big,
        "small": small,
        "tick_ratio": big["tick_ms"] / small["tick_ms"],
        "round_trip_ratio": big["round_trips_per_tick"] / small["round_trips_per_tick"],
    }
