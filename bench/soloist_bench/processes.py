"""The instances under measurement: worker processes (``python -m soloist_bench worker``,
:mod:`soloist_bench.worker`) or in-process instances for ``memory://``, and the failover
instances (``python -m soloist_bench leader``)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from soloist import logs
from soloist.clock import to_epoch_us
from soloist.context import JobContext
from soloist.scheduler import Scheduler
from soloist.schedules import every
from soloist.stores.base import Store
from soloist_bench.compare import worker_env
from soloist_bench.config import FAILOVER_JOB, NOOP, PLANNED, READY_TIMEOUT
from soloist_bench.worker import RunCounter, scheduler_options, serve, worker_main

__all__ = ["RunCounter", "Workers", "leader_main", "scheduled_main", "worker_main"]


class Workers:
    """``count`` soloist instances serving the benchmark task on ``url``, its handler a
    plain ``def`` or an ``async def`` (``handler``), logging as ``app.run()`` sets up by
    default (``log_mode="default"``) or WARNING only (``"quiet"``). Worker processes run
    this process's soloist, or with ``src`` (``--compare-src``) the one in that folder
    (``src`` first on their ``PYTHONPATH``). After the block, :attr:`runs` holds the runs
    of the task by handler kind (as the handlers counted them), :attr:`log_lines` the
    lines the instances logged, :attr:`soloist_dirs` the folders of the soloist
    packages the worker processes said they ran and :attr:`cpu_s` the CPU seconds the
    worker processes spent serving (None for in-process instances, or when a worker did not
    say: a soloist too old to report it)."""

    def __init__(
        self,
        url: str,
        count: int,
        concurrency: int | None,
        memory: Store | None,
        handler: str = "async",
        log_mode: str = "quiet",
        src: str | None = None,
    ):
        if src is not None and memory is not None:
            raise ValueError(f"in-process instances cannot run the soloist of {src}")
        self.url, self.count, self.concurrency, self.memory = url, count, concurrency, memory
        self.handler, self.log_mode, self.src = handler, log_mode, src
        self.procs: list[asyncio.subprocess.Process] = []
        self.apps: list[Scheduler] = []
        self.runs: dict[str, int] = {}
        self.log_lines = 0
        self.soloist_dirs: set[str] = set()
        self.cpu_s: float | None = None
        self._cpu: list[float] = []
        self._counter = RunCounter()  # in-process instances
        # The workers' stderr (their logs), shown if one fails to start; open as long as
        # they run, closed by __aexit__.
        self._logs = tempfile.TemporaryFile("w+")  # noqa: SIM115
        self._restore_logging: Callable[[], None] | None = None

    async def __aenter__(self) -> Workers:
        if self.memory is not None:  # one process: the instances share the store object
            if self.log_mode == "default":
                self._restore_logging = _log_to(self._logs)
            for _ in range(self.count):
                app = Scheduler(self.memory, **scheduler_options(self.concurrency))
                app.task(name=NOOP)(self._counter.handler(self.handler))
                await app.start()
                self.apps.append(app)
        else:
            argv = ["-m", "soloist_bench", "worker", self.url]
            if self.concurrency is not None:
                argv += ["--concurrency", str(self.concurrency)]
            argv += ["--handler", self.handler, "--logging", self.log_mode]
            for _ in range(self.count):
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    *argv,
                    stdout=subprocess.PIPE,
                    stderr=self._logs,
                    env=worker_env(self.src),
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
            self.runs = dict(self._counter.counts)
            for proc in self.procs:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in self.procs:
                try:
                    await asyncio.wait_for(self._collect(proc), 30)
                except asyncio.TimeoutError:
                    proc.kill()
                    await proc.wait()
            if self.procs and len(self._cpu) == len(self.procs):
                self.cpu_s = sum(self._cpu)
            self._logs.flush()
            self._logs.seek(0)
            self.log_lines = sum(1 for _ in self._logs)
        finally:
            if self._restore_logging is not None:
                self._restore_logging()
            self._logs.close()

    async def _collect(self, proc: asyncio.subprocess.Process) -> None:
        """Wait for a stopped worker; add the runs it reported (its last line)."""
        assert proc.stdout is not None
        out = await proc.stdout.read()
        await proc.wait()
        for line in out.decode().splitlines():
            if line.startswith("{"):
                reported = json.loads(line)
                for kind, count in reported["runs"].items():
                    self.runs[kind] = self.runs.get(kind, 0) + int(count)
                if reported.get("soloist"):
                    self.soloist_dirs.add(reported["soloist"])
                if isinstance(reported.get("cpu_s"), (int, float)):
                    self._cpu.append(float(reported["cpu_s"]))


def _log_to(stream: Any) -> Callable[[], None]:
    """Send the root logger's INFO lines as text to ``stream``, as ``app.run()`` does to
    stderr in a program that has not configured logging (:func:`soloist.logs.configure`);
    returns what puts the previous set-up back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.TextFormatter())
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)

    def restore() -> None:
        root.handlers[:] = handlers
        root.setLevel(level)

    return restore


def leader_main(url: str, instance_id: str) -> None:
    """One failover-measurement instance: leader mode, default lease TTL, a job every
    second; prints ``ready`` once started, serves until a signal."""
    app = Scheduler(url, mode="leader", instance_id=instance_id, grace_period="2s")

    @app.job(every("1s"), name=FAILOVER_JOB, overlap="allow", catch_up="all")
    async def failover_tick(ctx: JobContext) -> None:
        return None

    asyncio.run(serve(app))


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

    asyncio.run(serve(app, every_second=write_report))
