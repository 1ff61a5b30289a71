"""The measurements of soloist's own work: drain, enqueue and lateness (the module
docstring of :mod:`soloist_bench` describes each)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from datetime import datetime, timedelta
from typing import Any

from soloist.scheduler import Scheduler
from soloist.stores import open_store
from soloist_bench.compare import expected_soloist_dir, worker_env
from soloist_bench.config import (
    DRAIN_TIMEOUT,
    NOOP,
    READY_TIMEOUT,
    BenchConfig,
    DrainSetting,
    noop,
)
from soloist_bench.feed import finished, items, summary
from soloist_bench.processes import Workers
from soloist_bench.report import ms, percentiles
from soloist_bench.targets import Target

__all__ = ["measure_drain", "measure_enqueue", "measure_lateness"]


async def measure_drain(
    target: Target, config: BenchConfig, setting: DrainSetting, src: str | None = None
) -> dict[str, Any]:
    """One drain of ``config.tasks`` no-op tasks by ``setting.processes`` workers of
    ``setting.concurrency`` slots, the task's handler of kind ``setting.handler``; the
    worker processes run the soloist in ``src`` if given (``--compare-src``), else this
    one (either checked against the folder each worker says it ran)."""
    if src is not None:
        return await _drain_fed(target, config, setting, src)
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
        )
        async with workers:
            now = await store.now()
            batch = items(config.tasks, lambda i: now)
            started = time.perf_counter()
            await store.occurrence_insert_many(batch)
            inserted = time.perf_counter()
            workers.wake()
            rows = await finished(store, config.tasks, DRAIN_TIMEOUT)
            done = time.perf_counter()
        read = summary(rows)
    finally:
        await store.close()
    return _drain_figures(config, workers, read, inserted - started, done - inserted, None)


async def _drain_fed(
    target: Target, config: BenchConfig, setting: DrainSetting, src: str
) -> dict[str, Any]:
    """A drain whose workers run the soloist in ``src`` (``--compare-src``): the store is
    made, fed and read by a process on that soloist too (:mod:`soloist_bench.feed`), so
    that a checkout keeping an older store layout measures on its own."""
    url = target.fresh_url()
    feed = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "soloist_bench",
        "feed",
        url,
        str(config.tasks),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=worker_env(src),
    )
    assert feed.stdin is not None and feed.stdout is not None and feed.stderr is not None
    try:
        line = await asyncio.wait_for(feed.stdout.readline(), READY_TIMEOUT)
        if line.strip() != b"ready":
            raise RuntimeError(f"the baseline's store did not start: {await _said(feed)}")
        workers = Workers(
            url,
            setting.processes,
            setting.concurrency,
            None,
            handler=setting.handler,
            log_mode=config.worker_logging,
            src=src,
        )
        async with workers:
            feed.stdin.write(b"go\n")
            await feed.stdin.drain()
            out = await asyncio.wait_for(feed.stdout.readline(), DRAIN_TIMEOUT + 30)
        if not out.startswith(b"{"):
            raise RuntimeError(f"the baseline's drain failed: {await _said(feed)}")
        read = json.loads(out)
    finally:
        if feed.returncode is None:
            feed.kill()
        await feed.wait()
    return _drain_figures(config, workers, read, read["insert_s"], read["wait_s"], src)


async def _said(proc: asyncio.subprocess.Process) -> str:
    """The last of what ``proc`` wrote to stderr (once it has ended)."""
    assert proc.stderr is not None
    if proc.returncode is None:
        proc.kill()
    return (await proc.stderr.read()).decode(errors="replace")[-2000:]


def _drain_figures(
    config: BenchConfig,
    workers: Workers,
    read: dict[str, Any],
    insert_s: float,
    wait_s: float,
    src: str | None,
) -> dict[str, Any]:
    """A drain's figures from what its rows said (:func:`soloist_bench.feed.summary`)."""
    expected = expected_soloist_dir(src)
    if workers.memory is None and workers.soloist_dirs - {expected}:
        ran = ", ".join(sorted(workers.soloist_dirs))
        raise RuntimeError(f"the drain's workers ran the soloist at {ran}, not {expected}")
    first = datetime.fromisoformat(read["first_started"])
    last = datetime.fromisoformat(read["last_finished"])
    window = (last - first).total_seconds()
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
        "insert_s": insert_s,
        "wall_per_s": config.tasks / wait_s,
        "instances_used": read["instances_used"],
        # As the handlers counted them (the workers report theirs when they stop).
        "handler_runs": workers.runs,
        "worker_log_lines": workers.log_lines,
        **cpu,
    }


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
        # The sync twin as a Django view or a script calls it, in a thread without a loop:
        # a scheduler of its own, as such a process would make.
        sync_single = await asyncio.to_thread(_sync_enqueue_rate, url, calls)
        now = await store.now()
        later = now + timedelta(days=1)  # not due: nothing else touches these rows
        started = time.perf_counter()
        for offset in range(0, config.tasks, config.batch):
            count = min(config.batch, config.tasks - offset)
            await store.occurrence_insert_many(items(count, lambda i: later))
        many = config.tasks / (time.perf_counter() - started)
        started = time.perf_counter()
        await app.aenqueue_many(NOOP, ({} for _ in range(config.tasks)), delay="1d")
        bulk = config.tasks / (time.perf_counter() - started)
        return {
            "single_per_s": single,
            "sync_single_per_s": sync_single,
            "insert_many_rows_per_s": many,
            "enqueue_many_per_s": bulk,
        }
    finally:
        await store.close()


def _sync_enqueue_rate(url: str, calls: int) -> float:
    """Sequential sync ``enqueue`` calls per second, through a new scheduler on ``url``
    (its first call, which opens the store, is not counted)."""
    app = Scheduler(url)
    app.task(name=NOOP)(noop)
    try:
        app.enqueue(NOOP)
        started = time.perf_counter()
        for _ in range(calls):
            app.enqueue(NOOP)
        return calls / (time.perf_counter() - started)
    finally:
        app.close()


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
            await store.occurrence_insert_many(items(config.samples, lambda i: first + i * step))
            workers.wake()
            wait = 1 + config.samples * config.spacing + 30
            timer = await finished(store, config.samples, wait)
            # "Now" tasks from this process, one at a time, the worker idle in between.
            since = await store.now()
            enqueuer = workers.apps[0] if memory is not None else app
            for _ in range(config.samples):
                await enqueuer.aenqueue(NOOP)
                await asyncio.sleep(config.spacing)
            rows = await finished(store, 2 * config.samples, 30)
        woken = [o for o in rows if o.created_at >= since]
        return {
            "timer_ms": percentiles([ms(o.started_at, o.due_at) for o in timer]),
            "wake_ms": percentiles([ms(o.started_at, o.created_at) for o in woken]),
        }
    finally:
        await store.close()
