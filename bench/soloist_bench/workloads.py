"""The measurements of soloist's own work: drain, enqueue and lateness (the module
docstring of :mod:`soloist_bench` describes each)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from soloist.models import Kind, NewOccurrence, Occurrence, Overlap, State
from soloist.payload import validate_payload
from soloist.scheduler import Scheduler
from soloist.stores import open_store
from soloist.stores.base import Store
from soloist_bench.compare import expected_soloist_dir
from soloist_bench.config import DRAIN_TIMEOUT, NOOP, BenchConfig, DrainSetting, noop
from soloist_bench.processes import Workers
from soloist_bench.report import ms, percentiles
from soloist_bench.targets import Target

__all__ = ["measure_drain", "measure_enqueue", "measure_lateness"]


def _items(count: int, due: Callable[[int], datetime]) -> list[NewOccurrence]:
    """``count`` tasks built and validated as :meth:`Operations.enqueue` builds one."""
    return [
        NewOccurrence(
            dedupe_key=f"t:{uuid.uuid4().hex}",
            job=NOOP,
            task=NOOP,
            scope="",
            plan_time=due(i),
            due_at=due(i),
            kind=Kind.TASK,
            max_attempts=1,
            overlap=Overlap.ALLOW,
            payload=validate_payload({}),
        )
        for i in range(count)
    ]


async def _finished(store: Store, count: int, timeout: float) -> list[Occurrence]:
    """Wait until nothing of the benchmark task is claimable or running; its rows."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        idle = await store.occurrence_next_due([NOOP]) is None
        if idle and not await store.occurrence_list(state=State.RUNNING, limit=1):
            break
        await asyncio.sleep(0.02)
    else:
        raise TimeoutError(f"the benchmark tasks did not finish within {timeout:.0f}s")
    rows = await store.occurrence_list(job=NOOP, limit=count + 1)
    bad = [o for o in rows if o.state is not State.SUCCEEDED]
    if len(rows) != count or bad:
        raise RuntimeError(f"{len(rows)} rows, {len(bad)} not succeeded (e.g. {bad[:1]})")
    return rows


async def measure_drain(
    target: Target, config: BenchConfig, setting: DrainSetting, src: str | None = None
) -> dict[str, Any]:
    """One drain of ``config.tasks`` no-op tasks by ``setting.processes`` workers of
    ``setting.concurrency`` slots, the task's handler of kind ``setting.handler``; the
    worker processes run the soloist in ``src`` if given (``--compare-src``), else this
    one (either checked against the folder each worker says it ran)."""
    url = target.fresh_url()
    store = open_store(url)
    try:
        await store.migrate()
        memory = store if target.kind == "memory" else None
        workers = Workers(
            url,
            setting.processes,
            setting.concurrency,
            memory,
            handler=setting.handler,
            log_mode=config.worker_logging,
            src=src,
        )
        async with workers:
            now = await store.now()
            items = _items(config.tasks, lambda i: now)
            started = time.perf_counter()
            await store.occurrence_insert_many(items)
            inserted = time.perf_counter()
            workers.wake()
            rows = await _finished(store, config.tasks, DRAIN_TIMEOUT)
            done = time.perf_counter()
        expected = expected_soloist_dir(src)
        if memory is None and workers.soloist_dirs - {expected}:
            ran = ", ".join(sorted(workers.soloist_dirs))
            raise RuntimeError(f"the drain's workers ran the soloist at {ran}, not {expected}")
        first = min(o.started_at for o in rows if o.started_at is not None)
        last = max(o.finished_at for o in rows if o.finished_at is not None)
        window = (last - first).total_seconds()
        runners = {o.instance_id for o in rows}
        cpu: dict[str, float] = {}
        if workers.cpu_s is not None:
            # All worker processes' CPU from ready to SIGTERM per execution: what one
            # execution costs the workers, hardly moved by other load on the machine.
            cpu = {
                "worker_cpu_s": workers.cpu_s,
                "cpu_us_per_run": workers.cpu_s / config.tasks * 1e6,
            }
        return {
            "per_s": config.tasks / window,
            "window_s": window,
            "insert_s": inserted - started,
            "wall_per_s": config.tasks / (done - inserted),
            "instances_used": len(runners),
            # As the handlers counted them (the workers report theirs when they stop).
            "handler_runs": workers.runs,
            "worker_log_lines": workers.log_lines,
            **cpu,
        }
    finally:
        await store.close()


async def measure_enqueue(target: Target, config: BenchConfig) -> dict[str, Any]:
    url = target.fresh_url()
    store = open_store(url)
    app = Scheduler(store)
    app.task(name=NOOP)(noop)
    try:
        await store.migrate()
        calls = config.enqueue_calls
        started = time.perf_counter()
        for _ in range(calls):
            await app.aenqueue(NOOP)
        single = calls / (time.perf_counter() - started)
        now = await store.now()
        later = now + timedelta(days=1)  # not due: nothing else touches these rows
        started = time.perf_counter()
        for offset in range(0, config.tasks, config.batch):
            count = min(config.batch, config.tasks - offset)
            await store.occurrence_insert_many(_items(count, lambda i: later))
        many = config.tasks / (time.perf_counter() - started)
        started = time.perf_counter()
        await app.aenqueue_many(NOOP, ({} for _ in range(config.tasks)), delay="1d")
        bulk = config.tasks / (time.perf_counter() - started)
        return {
            "single_per_s": single,
            "insert_many_rows_per_s": many,
            "enqueue_many_per_s": bulk,
        }
    finally:
        await store.close()


async def measure_lateness(target: Target, config: BenchConfig) -> dict[str, Any]:
    url = target.fresh_url()
    store = open_store(url)
    app = Scheduler(store)
    app.task(name=NOOP)(noop)
    try:
        await store.migrate()
        memory = store if target.kind == "memory" else None
        async with Workers(url, 1, None, memory, "async", config.worker_logging) as workers:
            now = await store.now()
            first = now + timedelta(seconds=1)
            step = timedelta(seconds=config.spacing)
            await store.occurrence_insert_many(_items(config.samples, lambda i: first + i * step))
            workers.wake()
            wait = 1 + config.samples * config.spacing + 30
            timer = await _finished(store, config.samples, wait)
            # "Now" tasks from this process, one at a time, the worker idle in between.
            since = await store.now()
            enqueuer = workers.apps[0] if memory is not None else app
            for _ in range(config.samples):
                await enqueuer.aenqueue(NOOP)
                await asyncio.sleep(config.spacing)
            rows = await _finished(store, 2 * config.samples, 30)
        woken = [o for o in rows if o.created_at >= since]
        return {
            "timer_ms": percentiles([ms(o.started_at, o.due_at) for o in timer]),
            "wake_ms": percentiles([ms(o.started_at, o.created_at) for o in woken]),
        }
    finally:
        await store.close()
