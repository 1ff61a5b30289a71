"""``soloist bench``: throughput and latency of one store, measured the same way each time.

Every figure is the median of ``runs`` repetitions, each on fresh data (a new PostgreSQL
schema, a new SQLite file, a new memory store), and comes with baselines measured in the
same invocation (store round trips, raw SQL on PostgreSQL, a pure-Python loop) so that
figures taken on a noisy machine can be compared as ratios. docs/benchmarks.md explains
the method and the results; bench/README.md says how to rerun.

* **drain**: ``tasks`` no-op tasks (an ``async`` handler returning None) are drained by 1
  and by 2 worker *processes* (``python -m soloist.bench worker``, each one soloist
  instance with ``concurrency`` slots). The workers start first and sit idle; then all
  tasks are inserted, due at once, in one ``occurrence_insert_many``, and the clock starts.
  The figure is ``tasks / (last finished_at - first started_at)``, both read from the
  store (the database clock): process start-up and the insert are outside the window.
* **enqueue**: sequential ``aenqueue`` calls per second (one statement each), and rows per
  second through ``occurrence_insert_many`` in batches of 1000, including building and
  validating the rows as ``enqueue`` does.
* **lateness** on an idle instance (one worker process, default settings): ``samples``
  tasks due at known instants ``spacing`` apart, inserted in advance (``started_at -
  due_at``: how precisely the executor's timer fires), and the same number enqueued "now"
  by this process while the worker idles (``started_at - created_at``: how fast a wake-up
  crosses processes; LISTEN/NOTIFY on PostgreSQL, the poll interval elsewhere).
* **failover**: measured by :func:`measure_failover` once leader mode has a measurement.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from soloist.config import DEFAULT_ELECTION, DEFAULT_LEASE_TTL
from soloist.context import JobContext
from soloist.models import Kind, LeaderLease, NewOccurrence, Occurrence, Overlap, State
from soloist.payload import validate_payload
from soloist.scheduler import Scheduler
from soloist.schedules import every
from soloist.stores import check_store_url, open_store
from soloist.stores.base import Store

__all__ = ["BenchConfig", "bench_main", "default_store_url", "run_bench"]

#: The benchmark's task: an async no-op (no thread hop, nothing but soloist's own work).
NOOP = "bench_noop"
#: A PostgreSQL server to try when no store is given (the test suite's default).
LOCAL_POSTGRES = "postgresql://127.0.0.1:5432/test"
FAILOVER_JOB = "failover_tick"
READY_TIMEOUT = 60.0
DRAIN_TIMEOUT = 300.0

Echo = Callable[[str], None]


@dataclass
class BenchConfig:
    stores: list[str]
    tasks: int = 10_000
    runs: int = 3
    concurrency: int = 1000
    processes: tuple[int, ...] = (1, 2)
    samples: int = 50
    spacing: float = 0.1
    enqueue_calls: int = 2_000
    batch: int = 1_000
    json_path: str | None = None
    echo: Echo = field(default=print)


async def _noop(ctx: JobContext) -> None:
    return None


# -- stores: fresh data per measurement -------------------------------------------------------
class Target:
    """Fresh, isolated stores of one kind (a new schema, file or memory store each time),
    removed again by :meth:`cleanup`."""

    def __init__(self, url: str) -> None:
        self.url = url
        scheme = check_store_url(url)
        kinds = {"postgres": "postgresql", "rediss": "redis"}
        self.kind = kinds.get(scheme, scheme)
        self._tmp = Path(tempfile.mkdtemp(prefix="soloist-bench-"))
        self._schemas: list[str] = []
        self._prefixes: list[str] = []

    @property
    def multiprocess(self) -> bool:
        return self.kind != "memory"

    def fresh_url(self) -> str:
        """A URL to new, empty storage. (A SQLite URL only selects the kind of store: each
        measurement uses a new file in a temporary directory.)"""
        if self.kind == "postgresql":
            self._schemas.append(f"soloist_bench_{uuid.uuid4().hex[:12]}")
            return f"{self.url}{'&' if '?' in self.url else '?'}schema={self._schemas[-1]}"
        if self.kind == "sqlite":
            return f"sqlite:///{self._tmp / uuid.uuid4().hex[:12]}.db"
        if self.kind == "redis":
            self._prefixes.append(f"soloist-bench-{uuid.uuid4().hex[:12]}")
            parts = urlsplit(self.url)
            query = [(k, v) for k, v in parse_qsl(parts.query) if k != "prefix"]
            query.append(("prefix", self._prefixes[-1]))
            return urlunsplit(parts._replace(query=urlencode(query)))
        return "memory://"

    async def cleanup(self) -> None:
        if self._schemas:
            async with raw_sql(self.url) as sql:
                for schema in self._schemas:
                    # The names are ours, [a-z0-9_] only: safe to quote as written.
                    await sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        self._schemas.clear()
        if self._prefixes:
            async with raw_redis(self.url) as client:
                for prefix in self._prefixes:
                    # Every key of a store is "{prefix}:..."; braces are glob-escaped.
                    pattern = f"\\{{{prefix}\\}}:*"
                    batch: list[Any] = []
                    async for key in client.scan_iter(match=pattern, count=1000):
                        batch.append(key)
                        if len(batch) >= 1000:
                            await client.unlink(*batch)
                            batch.clear()
                    if batch:
                        await client.unlink(*batch)
        self._prefixes.clear()
        shutil.rmtree(self._tmp, ignore_errors=True)


RawSQL = Callable[..., Awaitable[list[tuple[Any, ...]]]]


@contextlib.asynccontextmanager
async def raw_sql(url: str) -> AsyncIterator[RawSQL]:
    """``sql(query, params=None)`` running raw SQL on a connection of its own to the
    PostgreSQL server of ``url`` (its ``schema`` parameter aside), for the baselines and
    the clean-up: nothing of the store under measurement is borrowed. Only for PostgreSQL
    URLs; psycopg is imported here, so the core still never imports a driver."""
    import psycopg

    from soloist.stores.postgres import parse_url

    conn = await psycopg.AsyncConnection.connect(parse_url(url).conninfo, autocommit=True)

    async def sql(query: str, params: Any = None) -> list[tuple[Any, ...]]:
        cursor = await conn.execute(query, params)
        rows = await cursor.fetchall() if cursor.description is not None else []
        return [tuple(row) for row in rows]

    try:
        yield sql
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def raw_redis(url: str) -> AsyncIterator[Any]:
    """A redis-py client of its own to the server of ``url`` (soloist's options dropped),
    for the baseline and the clean-up. redis is imported here: the core never imports a
    driver."""
    import redis.asyncio

    parts = urlsplit(url)
    client = redis.asyncio.Redis.from_url(urlunsplit(parts._replace(query="")))
    try:
        yield client
    finally:
        await client.aclose()


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


# -- workers: real OS processes, or an in-process instance for memory:// ------------------------
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
                app.task(name=NOOP)(_noop)
                await app.start()
                self.apps.append(app)
        else:
            argv = ["-m", "soloist.bench", "worker", self.url]
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
    app.task(name=NOOP)(_noop)

    async def serve() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await app.start()
        print("ready", flush=True)
        await stop.wait()
        await app.stop()

    asyncio.run(serve())


# -- measurements -------------------------------------------------------------------------------
async def measure_drain(target: Target, config: BenchConfig, processes: int) -> dict[str, Any]:
    url = target.fresh_url()
    store = open_store(url)
    try:
        await store.migrate()
        memory = store if target.kind == "memory" else None
        async with Workers(url, processes, config.concurrency, memory) as workers:
            now = await store.now()
            items = _items(config.tasks, lambda i: now)
            started = time.perf_counter()
            await store.occurrence_insert_many(items)
            inserted = time.perf_counter()
            workers.wake()
            rows = await _finished(store, config.tasks, DRAIN_TIMEOUT)
            done = time.perf_counter()
        first = min(o.started_at for o in rows if o.started_at is not None)
        last = max(o.finished_at for o in rows if o.finished_at is not None)
        window = (last - first).total_seconds()
        runners = {o.instance_id for o in rows}
        return {
            "per_s": config.tasks / window,
            "window_s": window,
            "insert_s": inserted - started,
            "wall_per_s": config.tasks / (done - inserted),
            "instances_used": len(runners),
        }
    finally:
        await store.close()


async def measure_enqueue(target: Target, config: BenchConfig) -> dict[str, Any]:
    url = target.fresh_url()
    store = open_store(url)
    app = Scheduler(store)
    app.task(name=NOOP)(_noop)
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
    app.task(name=NOOP)(_noop)
    try:
        await store.migrate()
        memory = store if target.kind == "memory" else None
        async with Workers(url, 1, None, memory) as workers:
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
            "timer_ms": _percentiles([_ms(o.started_at, o.due_at) for o in timer]),
            "wake_ms": _percentiles([_ms(o.started_at, o.created_at) for o in woken]),
        }
    finally:
        await store.close()


async def measure_failover(target: Target, config: BenchConfig) -> dict[str, Any]:
    """Leader failover with the default lease TTL: three ``mode="leader"`` instances (real
    processes) run a job every second; kill -9 the leader, then SIGTERM the next one.
    Reports the seconds from each signal to the first occurrence started by the next
    leader (``started_at`` on the store's clock), and the epochs seen."""
    if not target.multiprocess:
        return {"skipped": f"not meaningful: {target.url} is one process"}
    url = target.fresh_url()
    store = open_store(url)
    procs: dict[str, asyncio.subprocess.Process] = {}
    try:
        await store.migrate()
        for iid in ("leader-a", "leader-b", "leader-c"):
            procs[iid] = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "soloist.bench",
                "leader",
                url,
                iid,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        for proc in procs.values():
            assert proc.stdout is not None
            await asyncio.wait_for(proc.stdout.readline(), READY_TIMEOUT)
        first = await _leader(store, exclude=set())
        kill9 = await _hand_over(store, procs, first, signal.SIGKILL)
        second = await _leader(store, exclude={first.leader_id})
        sigterm = await _hand_over(store, procs, second, signal.SIGTERM)
        third = await _leader(store, exclude={first.leader_id, second.leader_id})
        return {
            "kill9_s": kill9,
            "sigterm_s": sigterm,
            "lease_ttl_s": DEFAULT_LEASE_TTL.total_seconds(),
            "epochs": [first.epoch, second.epoch, third.epoch],
        }
    finally:
        for proc in procs.values():
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        await store.close()


async def _leader(store: Store, exclude: set[str]) -> LeaderLease:
    deadline = time.monotonic() + DEFAULT_LEASE_TTL.total_seconds() + 30
    while time.monotonic() < deadline:
        lease = await store.leader_get(DEFAULT_ELECTION)
        if lease is not None and lease.leader_id not in exclude:
            return lease
        await asyncio.sleep(0.05)
    raise RuntimeError("no new leader was elected")


async def _hand_over(
    store: Store,
    procs: dict[str, asyncio.subprocess.Process],
    leader: LeaderLease,
    how: signal.Signals,
) -> float:
    """Signal the leader; return the seconds until another instance started the job."""
    await _finished_by(store, leader.leader_id)  # it has been running the job
    procs[leader.leader_id].send_signal(how)
    sent = await store.now()
    deadline = time.monotonic() + DEFAULT_LEASE_TTL.total_seconds() + 30
    while time.monotonic() < deadline:
        rows = await store.occurrence_list(job=FAILOVER_JOB, limit=100)
        starts = [
            o.started_at
            for o in rows
            if o.started_at is not None
            and o.started_at > sent
            and o.instance_id not in (None, leader.leader_id)
        ]
        if starts:
            return (min(starts) - sent).total_seconds()
        await asyncio.sleep(0.02)
    raise RuntimeError(f"nobody ran {FAILOVER_JOB} after {how.name} of {leader.leader_id}")


async def _finished_by(store: Store, instance_id: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = await store.occurrence_list(job=FAILOVER_JOB, state=State.SUCCEEDED, limit=20)
        if any(o.instance_id == instance_id for o in rows):
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{instance_id} never ran {FAILOVER_JOB}")


def leader_main(url: str, instance_id: str) -> None:
    """One failover-measurement instance: leader mode, default lease TTL, a job every
    second; prints ``ready`` once started, serves until a signal."""
    app = Scheduler(url, mode="leader", instance_id=instance_id, grace_period="2s")

    @app.job(every("1s"), name=FAILOVER_JOB, overlap="allow", catch_up="all")
    async def failover_tick(ctx: JobContext) -> None:
        return None

    async def serve() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await app.start()
        print("ready", flush=True)
        await stop.wait()
        await app.stop()

    asyncio.run(serve())


async def measure_baseline(target: Target, config: BenchConfig) -> dict[str, Any]:
    """Figures of the machine and the server alone, to read the others against."""
    url = target.fresh_url()
    store = open_store(url)
    try:
        await store.migrate()
        result: dict[str, Any] = {"python_loops_per_s": _python_loops()}
        if target.kind == "postgresql":
            result["store_round_trips_per_s"] = await _rate(store.now, 1.0)
            async with raw_sql(url) as sql:

                async def select_one() -> None:
                    await sql("SELECT 1")

                result["select_1_per_s"] = await _rate(select_one, 1.0)
                schema = str(getattr(store, "schema", ""))
                result["raw_insert_rows_per_s"] = await _raw_insert_rate(sql, schema, config)
        if target.kind == "redis":
            result["store_round_trips_per_s"] = await _rate(store.now, 1.0)
            async with raw_redis(url) as client:
                result["ping_per_s"] = await _rate(client.ping, 1.0)
        return result
    finally:
        await store.close()


async def _raw_insert_rate(sql: RawSQL, schema: str, config: BenchConfig) -> float:
    """Rows/s of a plain ``INSERT ... SELECT FROM unnest`` of comparable rows (a text key,
    two timestamps, a small json), batches of ``config.batch``, one index."""
    table = f'"{schema}".bench_raw'  # in the fresh bench schema
    await sql(
        f"CREATE TABLE {table} (id text PRIMARY KEY, due_at timestamptz, "
        "created_at timestamptz, payload json)",
    )
    started = time.perf_counter()
    for offset in range(0, config.tasks, config.batch):
        ids = [uuid.uuid4().hex for _ in range(min(config.batch, config.tasks - offset))]
        await sql(
            f"INSERT INTO {table} SELECT id, now(), now(), '{{}}'::json "  # noqa: S608
            "FROM unnest(%(ids)s::text[]) AS id",
            {"ids": ids},
        )
    return config.tasks / (time.perf_counter() - started)


async def _rate(call: Callable[[], Awaitable[object]], seconds: float) -> float:
    count, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        await call()
        count += 1
    return count / elapsed


def _python_loops() -> float:
    """Iterations per second of a fixed pure-Python loop: this CPU's speed, right now."""
    started, data = time.perf_counter(), {}
    for i in range(300_000):
        data[i & 1023] = (i, str(i & 63))
    return 300_000 / (time.perf_counter() - started)


def _ms(later: datetime | None, earlier: datetime) -> float:
    assert later is not None
    return (later - earlier).total_seconds() * 1000


def _percentiles(values: list[float]) -> dict[str, float]:
    """p50, p99 (nearest rank: with fewer than 100 samples p99 is the maximum) and max."""
    ordered = sorted(values)

    def rank(p: int) -> float:
        return ordered[max(0, math.ceil(len(ordered) * p / 100) - 1)]

    return {"p50": rank(50), "p99": rank(99), "max": ordered[-1], "n": len(ordered)}


# -- the whole run --------------------------------------------------------------------------------
def _median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of every numeric figure over ``runs`` (nested dicts too), plus the runs."""
    first = runs[0]
    if "skipped" in first:
        return first
    merged: dict[str, Any] = {}
    for key, value in first.items():
        if isinstance(value, dict):
            merged[key] = _median_of([run[key] for run in runs])
        elif isinstance(value, (int, float)):
            merged[key] = statistics.median(run[key] for run in runs)
    return merged


async def _repeat(
    config: BenchConfig, name: str, measure: Callable[[], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    runs = []
    for i in range(config.runs):
        runs.append(await measure())
        config.echo(f"  {name} run {i + 1}/{config.runs}: {_brief(runs[-1])}")
        if "skipped" in runs[-1]:
            break
    return {**_median_of(runs), "runs": runs}


def _brief(result: dict[str, Any]) -> str:
    return ", ".join(
        f"{k}={_fmt(v)}" if not isinstance(v, dict) else f"{k}=({_brief(v)})"
        for k, v in result.items()
    )


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
    return str(value)


async def bench_store(url: str, config: BenchConfig) -> dict[str, Any]:
    target = Target(url)
    echo = config.echo
    echo(f"store {url} ({target.kind})")
    report: dict[str, Any] = {"store": url, "kind": target.kind}
    try:
        report["server_version"] = await _server_version(target)
        report["baseline"] = await _repeat(
            config, "baseline", lambda: measure_baseline(target, config)
        )
        drain: dict[str, Any] = {}
        for processes in config.processes:
            if processes > 1 and not target.multiprocess:
                drain[str(processes)] = {"skipped": f"not meaningful: {url} is one process"}
                continue
            drain[str(processes)] = await _repeat(
                config,
                f"drain with {processes} worker(s)",
                functools.partial(measure_drain, target, config, processes),
            )
        report["drain"] = drain
        report["enqueue"] = await _repeat(
            config, "enqueue", lambda: measure_enqueue(target, config)
        )
        report["lateness"] = await _repeat(
            config, "lateness", lambda: measure_lateness(target, config)
        )
        report["failover"] = await _repeat(
            config, "failover", lambda: measure_failover(target, config)
        )
        report["ratios"] = _ratios(report)
    finally:
        await target.cleanup()
    return report


def _ratios(report: dict[str, Any]) -> dict[str, float]:
    """Figures relative to this run's baselines: comparable across machines and moments
    better than the raw figures are (the server and the CPU are shared)."""
    base = report["baseline"]
    ratios: dict[str, float] = {}
    for processes, figures in report["drain"].items():
        if "per_s" in figures:
            ratios[f"drain_{processes}_per_million_python_loops"] = (
                figures["per_s"] / base["python_loops_per_s"] * 1e6
            )
            if "select_1_per_s" in base:
                ratios[f"drain_{processes}_over_select_1"] = (
                    figures["per_s"] / base["select_1_per_s"]
                )
            if "ping_per_s" in base:
                ratios[f"drain_{processes}_over_ping"] = figures["per_s"] / base["ping_per_s"]
    if "raw_insert_rows_per_s" in base:
        ratios["insert_many_over_raw_insert"] = (
            report["enqueue"]["insert_many_rows_per_s"] / base["raw_insert_rows_per_s"]
        )
    return ratios


async def _server_version(target: Target) -> str | None:
    if target.kind != "postgresql":
        return None
    async with raw_sql(target.url) as sql:
        rows = await sql("SHOW server_version")
    return str(rows[0][0]) if rows else None


async def run_bench(config: BenchConfig) -> dict[str, Any]:
    """Measure every store of ``config``; print a table; write JSON if asked."""
    started = datetime.now(timezone.utc)
    result: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "command": " ".join(["soloist", *sys.argv[1:]]),
        "settings": {
            "tasks": config.tasks,
            "runs": config.runs,
            "concurrency": config.concurrency,
            "samples": config.samples,
            "spacing_s": config.spacing,
            "enqueue_calls": config.enqueue_calls,
            "batch": config.batch,
        },
        "stores": [await bench_store(url, config) for url in config.stores],
    }
    for line in table(result):
        config.echo(line)
    return result


def bench_main(config: BenchConfig) -> dict[str, Any]:
    """Run :func:`run_bench` in a new event loop and write the JSON file if asked."""
    result = asyncio.run(run_bench(config))
    if config.json_path:
        Path(config.json_path).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        config.echo(f"\nwrote {config.json_path}")
    return result


def table(result: dict[str, Any]) -> Iterator[str]:
    """The headline figures as a Markdown table (medians; see the JSON for every run)."""
    yield ""
    yield (
        f"soloist bench, {result['date']}, nproc {result['nproc']}, Python {result['python']}, "
        f"{result['settings']['tasks']} tasks, median of {result['settings']['runs']} runs"
    )
    for store in result["stores"]:
        version = f" (PostgreSQL {store['server_version']})" if store["server_version"] else ""
        yield ""
        yield f"{store['kind']}{version}: {store['store']}"
        yield ""
        yield "| figure | median |"
        yield "|---|---|"
        for row in _rows(store):
            yield f"| {row[0]} | {row[1]} |"


def _rows(store: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for processes, figures in store["drain"].items():
        label = f"drain: executions/s, {processes} worker process(es)"
        yield label, figures.get("skipped") or f"{figures['per_s']:,.0f}"
    enqueue = store["enqueue"]
    yield "enqueue: aenqueue calls/s (sequential)", f"{enqueue['single_per_s']:,.0f}"
    yield (
        "enqueue: insert_many rows/s (batches of 1000)",
        f"{enqueue['insert_many_rows_per_s']:,.0f}",
    )
    yield (
        "enqueue: enqueue_many tasks/s (2 chunks of 1000 in flight)",
        f"{enqueue['enqueue_many_per_s']:,.0f}",
    )
    late = store["lateness"]
    for key, label in (("timer_ms", "lateness, due at a set time"), ("wake_ms", "wake-up latency")):
        yield f"{label}: p50 / p99 ms (idle)", f"{late[key]['p50']:.1f} / {late[key]['p99']:.1f}"
    failover = store["failover"]
    if "skipped" in failover:
        yield "failover", failover["skipped"]
    else:
        ttl = failover["lease_ttl_s"]
        yield (
            f"failover after kill -9 of the leader, s (TTL {ttl:g} s)",
            f"{failover['kill9_s']:.2f}",
        )
        yield "failover after SIGTERM of the leader, s", f"{failover['sigterm_s']:.2f}"
    base = store["baseline"]
    if "store_round_trips_per_s" in base:
        yield (
            "baseline: store round trips/s (store.now())",
            f"{base['store_round_trips_per_s']:,.0f}",
        )
    if "select_1_per_s" in base:
        yield "baseline: SELECT 1 round trips/s", f"{base['select_1_per_s']:,.0f}"
        yield (
            "baseline: raw INSERT rows/s (batches of 1000)",
            f"{base['raw_insert_rows_per_s']:,.0f}",
        )
    yield "baseline: pure-Python loop iterations/s", f"{base['python_loops_per_s']:,.0f}"
    for name, value in store["ratios"].items():
        yield f"ratio: {name}", f"{value:.3g}"


def default_store_url() -> str:
    """``SOLOIST_STORE_URL``, else a local PostgreSQL if one answers, else a SQLite file."""
    explicit = os.environ.get("SOLOIST_STORE_URL")
    if explicit:
        return explicit

    async def reachable() -> bool:
        store = open_store(LOCAL_POSTGRES)
        try:
            await asyncio.wait_for(store.now(), 5)
            return True
        except Exception:
            return False
        finally:
            with contextlib.suppress(Exception):
                await store.close()

    try:
        return LOCAL_POSTGRES if asyncio.run(reachable()) else "sqlite:///soloist-bench.db"
    except Exception:
        return "sqlite:///soloist-bench.db"


def main(argv: list[str]) -> None:
    """``python -m soloist.bench worker URL [--concurrency N]``: one worker process;
    ``python -m soloist.bench leader URL INSTANCE_ID``: one failover instance."""
    if len(argv) == 3 and argv[0] == "leader":
        leader_main(argv[1], argv[2])
        return
    if len(argv) >= 2 and argv[0] == "worker":
        concurrency = int(argv[3]) if len(argv) >= 4 and argv[2] == "--concurrency" else None
        worker_main(argv[1], concurrency)
        return
    raise SystemExit("usage: python -m soloist.bench worker URL [--concurrency N]")


if __name__ == "__main__":
    main(sys.argv[1:])
