"""The chaos tier's cluster: the acceptance tier's real ``soloist run`` processes, running
the workload app (``apps/workload.py``, default options), plus what every scenario does at
its end: wait for the work to settle, stop the instances, compute the figures
(figures.py), print them and assert them.

A scenario starts instances (each may get its own store URL, e.g. through a black-hole
proxy, and its own environment, e.g. a libfaketime clock), queues tasks, waits for a moment
to strike (conditions with deadlines, never fixed sleeps), applies its fault, and calls
:meth:`ChaosCluster.finish`.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

from acceptance.cluster import SOLOIST, Cluster, Instance, wait_for
from soloist.models import Attempt, Kind, Occurrence, State

from .figures import TICK, Figures, compute, read_completions

T = TypeVar("T")

HERE = Path(__file__).parent
APP = HERE / "apps" / "workload.py"
ENQUEUE = HERE / "enqueue.py"

#: ``SOLOIST_CHAOS``: unset, the quick subset (``make test``); ``all``, every scenario on
#: every store at the quick sizes; ``long`` (``make chaos``), every scenario with more work.
CHAOS = os.environ.get("SOLOIST_CHAOS", "").strip().lower()
LONG = CHAOS == "long"
EVERY_SCENARIO = CHAOS in ("all", "long")
#: Each scenario's figures, for the summary printed at the end of the session (conftest).
REPORT: list[dict[str, Any]] = []
#: The workload's default concurrency (slots per instance): a kill can cut off at most
#: this many handlers between their side effect and their outcome write.
CONCURRENCY = 10
TERMINAL = (State.SUCCEEDED, State.DEAD, State.SKIPPED)


def scaled(quick: T, long: T) -> T:
    return long if LONG else quick


class ChaosCluster(Cluster):
    """Instances of the workload app on one store, and the scenario's bookkeeping."""

    def __init__(
        self, workdir: Path, url: str | None, *, name: str, ttl: str = "2s", mode: str | None = None
    ) -> None:
        super().__init__(workdir, url)
        self.name = name
        self.ttl = ttl
        self.mode = mode
        self.out = workdir / "completions.txt"
        self.tasks: list[int] = []
        #: Faults that can cut a handler off between its side effect and its outcome write
        #: (kill -9; a freeze or a black hole outlasting the lease).
        self.faults = 0
        self.began = time.monotonic()
        self.feeders: list[subprocess.Popen[bytes]] = []
        #: Extra environment of the ``soloist`` commands the test runs (status, ...).

    # -- processes ------------------------------------------------------------------------
    def start(  # type: ignore[override]
        self, iid: str, *, url: str | None = None, **env: str
    ) -> Instance:
        """Start the workload app as instance ``iid`` against ``url`` (default: the
        cluster's store), with extra environment ``env``; do not wait for it."""
        log_path = self.workdir / f"{iid}.log"
        environ = self._env() | {"SOLOIST_LEASE_TTL": self.ttl, "CHAOS_OUT": str(self.out)}
        if self.mode is not None:
            environ["SOLOIST_MODE"] = self.mode
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [SOLOIST, "run", f"{APP}:app", "--store", url or self.url, "--instance-id", iid],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=environ | env,
            )
        instance = Instance(iid, proc, log_path)
        self.instances.append(instance)
        return instance

    def start_all(  # type: ignore[override]
        self, *iids: str, timeout: float = 30, url: str | None = None, **env: str
    ) -> list[Instance]:
        started = [self.start(iid, url=url, **env) for iid in iids]
        for instance in started:
            wait_for(lambda i=instance: self._has_started(i), timeout, f"{instance.iid} to start")
        return started

    def by_id(self, iid: str) -> Instance:
        return next(i for i in self.instances if i.iid == iid)

    def enqueue_tasks(
        self,
        count: int,
        seconds: tuple[float, float],
        *,
        rate: float | None = None,
        delay: str | None = None,
        env: dict[str, str] | None = None,
    ) -> list[int]:
        """Queue ``count`` tasks, alternately ``work`` (sync) and ``awork`` (async), each
        sleeping between ``seconds[0]`` and ``seconds[1]`` (fixed per task), from a
        process of its own (with extra environment ``env``): all at once, or ``rate`` per
        second (then this returns at once; :meth:`finish` waits for the feeder). Returns
        their numbers."""
        first = len(self.tasks)
        numbers = list(range(first, first + count))
        tasks = [
            ["work" if n % 2 == 0 else "awork",
             {"n": n, "seconds": round(random.Random(n).uniform(*seconds), 3)}]
            for n in numbers
        ]  # fmt: skip
        spec = json.dumps({"tasks": tasks, "rate": rate, "delay": delay})
        feeder = subprocess.Popen(
            [sys.executable, str(ENQUEUE), self.url, spec],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self._env() | (env or {}),
        )
        self.feeders.append(feeder)
        self.tasks += numbers
        if rate is None:
            self.wait_fed()
        return numbers

    def wait_fed(self, timeout: float = 120) -> None:
        """Wait for every feeder to have queued all its tasks (fails if one failed)."""
        while self.feeders:
            feeder = self.feeders.pop(0)
            out, _ = feeder.communicate(timeout=timeout)
            assert feeder.returncode == 0, f"enqueueing failed:\n{out.decode(errors='replace')}"

    def close(self) -> None:
        for feeder in self.feeders:
            feeder.kill()
            feeder.wait(timeout=10)
        super().close()

    # -- the store (reads are retried: the store may be the one being hurt) -----------------
    def _read(self, call: Callable[[], Any], what: str) -> Any:
        deadline = time.monotonic() + 30
        while True:
            try:
                return asyncio.run(call())
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise AssertionError(f"reading {what} kept failing: {exc!r}") from exc
                time.sleep(0.2)

    def history(self, job: str | None = None) -> list[Occurrence]:
        result: list[Occurrence] = self._read(
            lambda: self._store.occurrence_list(job=job, limit=100_000), "the history"
        )
        return result

    def attempts(self, occurrence_id: str) -> list[Attempt]:
        result: list[Attempt] = self._read(
            lambda: self._store.occurrence_attempts(occurrence_id), "an audit log"
        )
        return result

    def store_now(self) -> datetime:
        result: datetime = self._read(self._store.now, "the store's clock")
        return result

    def running_on(self, iid: str) -> list[Occurrence]:
        """The tasks that instance ``iid`` holds as running now."""
        return [
            o
            for o in self.history()
            if o.state is State.RUNNING and o.instance_id == iid and o.kind is Kind.TASK
        ]

    def busiest(
        self, candidates: list[Instance], minimum: int
    ) -> tuple[Instance, list[Occurrence]]:
        """Wait for one of ``candidates`` to hold at least ``minimum`` running tasks; return
        it with them."""

        def probe() -> tuple[Instance, list[Occurrence]] | None:
            history = self.history()
            best: tuple[Instance, list[Occurrence]] | None = None
            for instance in candidates:
                held = [
                    o
                    for o in history
                    if o.state is State.RUNNING
                    and o.instance_id == instance.iid
                    and o.kind is Kind.TASK
                ]
                if len(held) >= minimum and (best is None or len(held) > len(best[1])):
                    best = (instance, held)
            return best

        return wait_for(probe, 30, f"an instance running {minimum} tasks", interval=0.05)

    def taken_over(self, held: list[Occurrence]) -> bool:
        """Whether every occurrence of ``held`` was reaped: ended, or claimed again."""
        now = {o.id: o for o in self.history()}
        return all(
            now[o.id].state is not State.RUNNING or now[o.id].fencing_token > o.fencing_token
            for o in held
        )

    def leader_after_a_run(self, timeout: float = 30) -> str:
        """The leader's id, just after it finished a run of the every-second job (so that
        a kill now lands between runs)."""

        def probe() -> str | None:
            leader = self.status()["leader_id"]
            ticks = [o for o in self.history(TICK) if o.instance_id == leader]
            last = max(ticks, key=lambda o: o.plan_time, default=None)
            fresh = (
                last is not None
                and last.state is State.SUCCEEDED
                and last.finished_at is not None
                and self.store_now() - last.finished_at < timedelta(seconds=0.5)
            )
            return leader if fresh else None

        found: str = wait_for(probe, timeout, "the leader to finish a run", interval=0.05)
        return found

    def wait_until_done(self, share: float, timeout: float = 60) -> None:
        """Wait until ``share`` of the tasks queued so far (or being fed) succeeded."""
        target = math.ceil(share * len(self.tasks))

        def done() -> bool:
            return (
                sum(o.kind is Kind.TASK and o.state is State.SUCCEEDED for o in self.history())
                >= target
            )

        wait_for(done, timeout, f"{target} tasks to succeed")

    def unsettled_tasks(self) -> list[int]:
        states = {o.payload.get("n"): o.state for o in self.history() if o.kind is Kind.TASK}
        return [n for n in self.tasks if states.get(n) not in TERMINAL]

    # -- the end of every scenario --------------------------------------------------------
    def finish(
        self,
        *,
        allowed_doubles: int = 0,
        clock_offset: float = 0.0,
        drain_timeout: float = 90,
        min_run: float = 10,
    ) -> Figures:
        """Wait for every task to end and every past instant to settle (and for the run
        to have lasted ``min_run`` seconds, so that the every-second job has a record to
        check), stop the instances (SIGTERM), compute the figures, print them, and assert
        them: every loss 0, and at most ``allowed_doubles`` doubled completions.
        ``clock_offset``: how far the instances' clock (the store's, for SQLite) is from
        this process's."""
        self.wait_fed()
        drained = _settles(lambda: not self.unsettled_tasks(), drain_timeout)
        _settles(lambda: time.monotonic() - self.began >= min_run, min_run)
        until = _floor_second(
            self.store_now() + timedelta(seconds=clock_offset) - timedelta(seconds=2)
        )
        ticks_settled = _settles(
            lambda: all(o.state in TERMINAL for o in self.history(TICK) if o.plan_time <= until),
            30,
        )
        exits = self.stop_all()
        history = self.history()
        ticks = [o.plan_time for o in history if o.job == TICK and o.plan_time <= until]
        first = min(ticks) if ticks else until
        figures = compute(
            history,
            read_completions(self.out),
            tasks=self.tasks,
            instants=(first, until),
            attempts=self.attempts,
        )
        elapsed = time.monotonic() - self.began
        if not drained:
            figures.details.insert(0, "tasks still unsettled at the deadline")
        if not ticks_settled:
            figures.details.insert(0, "instants still unsettled at the deadline")
        line = f"chaos {self.name}: {figures.line()} faults={self.faults} in {elapsed:.1f}s"
        print(line)
        entry = {"scenario": self.name, **figures.losses(), "faults": self.faults}
        entry |= {
            "completions_doubled": figures.completions_doubled,
            "allowed_doubles": allowed_doubles,
            "tasks": figures.tasks,
            "instants": figures.instants,
            "overlap_skips": figures.overlap_skips,
            "crashes": figures.crashes,
            "seconds": round(elapsed, 1),
            "exits": exits,
        }
        entry["passed"] = not any(figures.losses().values()) and (
            figures.completions_doubled <= allowed_doubles
        )
        REPORT.append(entry)
        if os.environ.get("SOLOIST_CHAOS_REPORT"):
            with open(os.environ["SOLOIST_CHAOS_REPORT"], "a", encoding="utf-8") as out:
                out.write(json.dumps(entry) + "\n")
        message = f"chaos {self.name} (faults={self.faults}): {figures.report()}"
        assert figures.losses() == dict.fromkeys(figures.LOSSES, 0), message
        assert figures.completions_doubled <= allowed_doubles, (
            f"{message}\nmore doubled completions than the {self.faults} fault(s) x "
            f"{CONCURRENCY} slots can explain ({allowed_doubles})"
        )
        return figures

    def stop_all(self) -> dict[str, int | None]:
        """SIGTERM every live instance (waking a frozen one) and wait for it; their exit
        statuses by id (None: it had to be killed)."""
        for instance in self.instances:
            if instance.alive:
                instance.send(signal.SIGCONT)
                instance.send(signal.SIGTERM)
        exits: dict[str, int | None] = {}
        for instance in self.instances:
            try:
                exits[instance.iid] = instance.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                instance.send(signal.SIGKILL)
                instance.proc.wait(timeout=10)
                exits[instance.iid] = None
        return exits


def _settles(condition: Callable[[], bool], timeout: float) -> bool:
    """Whether ``condition`` became true within ``timeout`` (polled; no exception)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _floor_second(t: datetime) -> datetime:
    return datetime.fromtimestamp(math.floor(t.timestamp()), tz=timezone.utc)
