"""The instances under measurement: worker processes (``python -m soloist_bench worker``)
or in-process instances for ``memory://``, and the failover instances (``python -m
soloist_bench leader``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from soloist.clock import to_epoch_us
from soloist.context import JobContext
from soloist.scheduler import Scheduler
from soloist.schedules import every
from soloist.stores.base import Store
from soloist_bench.config import FAILOVER_JOB, NOOP, PLANNED, READY_TIMEOUT, noop

__all__ = ["Workers", "leader_main", "scheduled_main", "worker_main"]


class Workers:
    """``count`` soloist instances serving the benchmark task on ``url``."""

    def __init__(self, url: str, count: int, concurrency: int | None, memory: Store | None):
        self.url, self.count, self.concurrency, self.memory = url, count, concurrency, memory
        self.procs: list[asyncio.subprocess.Process] = []
        self.apps: list[Scheduler] = []
        # The workers' stderr, shown if one fails to start; open as long as they run,
        # closed by __aexit__.
        self._logs = tempfile.TemporaryFile("w+")  # noqa: SIM115

    async def __aenter__(self) -> Workers:
        if self.memory is not None:  # one process: the instances share the store object
            for _ in range(self.count):
                app = Scheduler(self.memory, **_options(self.concurrency))
                app.task(name=NOOP)(noop)
                await app.start()
                self.apps.append(app)
        else:
            argv = ["-m", "soloist_bench", "worker", self.url]
            if self.concurrency is not None:
                argv += ["--concurrency", str(self.concurrency)]
            for _ in range(self.count):
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, *argv, stdout=subprocess.PIPE, stderr=self._logs
                )
                self.procs.append(proc)
            for proc in self.procs:
                await self._ready(proc)
        await asyncio.sleep(0.3)  # let them reach their idle wait (LISTEN on PostgreSQL)
        return self

    def wake(self) -> None:
        """Tell in-process instances that work was inserted behind their back (worker
        processes learn it from the store, or by polling)."""
        for app in self.apps:
            if app.runtime is not None:
                app.runtime.wake()

    async def _ready(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), READY_TIMEOUT)
        if line.strip() != b"ready":
            self._logs.seek(0)
            raise RuntimeError(f"a worker did not start: {self._logs.read()[-2000:]}")

    async def __aexit__(self, *exc: object) -> None:
        try:
            for app in self.apps:
                await app.stop()
            for proc in self.procs:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in self.procs:
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except asyncio.TimeoutError:
                    proc.kill()
                    await proc.wait()
        finally:
            self._logs.close()


def _options(concurrency: int | None) -> dict[str, Any]:
    options: dict[str, Any] = {"grace_period": "5s"}
    if concurrency is not None:
        options["concurrency"] = concurrency
    return options


def worker_main(url: str, concurrency: int | None) -> None:
    """One benchmark worker process: serve the no-op task until SIGTERM. Prints ``ready``
    once started. Logging stays unconfigured (WARNING and above reach stderr)."""
    app = Scheduler(url, **_options(concurrency))
    app.task(name=NOOP)(noop)
    asyncio.run(_serve(app))


def leader_main(url: str, instance_id: str) -> None:
    """One failover-measurement instance: leader mode, default lease TTL, a job every
    second; prints ``ready`` once started, serves until a signal."""
    app = Scheduler(url, mode="leader", instance_id=instance_id, grace_period="2s")

    @app.job(every("1s"), name=FAILOVER_JOB, overlap="allow", catch_up="all")
    async def failover_tick(ctx: JobContext) -> None:
        return None

    asyncio.run(_serve(app))


def scheduled_main(url: str, instance_id: str, logdir: str) -> None:
    """One planning-figure instance (default options): runs the dynamic schedules' task,
    a sync no-op that appends ``job, plan time (epoch us), its own start (epoch us, wall
    clock)`` to ``LOGDIR/INSTANCE_ID.runs``, and writes ``Runtime.report()`` (the
    instance's part of ``GET /status``) to ``LOGDIR/INSTANCE_ID.json`` every second. Prints
    ``ready`` once started; serves until SIGTERM (or SIGKILL)."""
    app = Scheduler(url, instance_id=instance_id, grace_period="5s")
    runs = os.open(
        os.path.join(logdir, f"{instance_id}.runs"), os.O_WRONLY | os.O_CREAT | os.O_APPEND
    )

    @app.task(name=PLANNED)
    def planned(ctx: JobContext) -> None:
        # One write(2) on an O_APPEND file per run: lines of concurrent runs never mix.
        line = f"{ctx.job}\t{to_epoch_us(ctx.plan_time)}\t{time.time_ns() // 1000}\n"
        os.write(runs, line.encode())

    report_path = os.path.join(logdir, f"{instance_id}.json")

    def write_report() -> None:
        runtime = app.runtime
        if runtime is None:
            return
        # Not GET /status itself: its "jobs" part reads every job's last run (one store
        # round trip per schedule), which would load the instance being measured.
        data = {"pid": os.getpid(), "at": time.time(), **runtime.report()}
        with open(report_path + ".tmp", "w", encoding="utf-8") as out:
            json.dump(data, out)
        os.replace(report_path + ".tmp", report_path)

    asyncio.run(_serve(app, every_second=write_report))


async def _serve(app: Scheduler, every_second: Callable[[], None] | None = None) -> None:
    """Start ``app``, print ``ready``, serve until SIGTERM (calling ``every_second``, if
    given, once at the start and then every second), then stop."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await app.start()
    if every_second is not None:
        every_second()
    print("ready", flush=True)
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), 1.0 if every_second is not None else None)
        except asyncio.TimeoutError:
            assert every_second is not None
            every_second()
    await app.stop()
