"""``soloist bench operator``: what an operator's views cost with many dynamic schedules.

For each store and each size N (``--jobs 10000,100000``), on fresh storage:

1. **schedules**: N dynamic schedules of the no-op task ``operator_noop``, ``every(interval)``
   (default 1 h), their first instants spread evenly over one interval starting 10 s
   ahead (a steady N / interval runs per second, as independent schedules would be). One is
   added with ``app.schedules.aadd``; the others are copies of it written by the store's
   bulk paths, ``job_upsert`` of dynamic records and ``plan_cursor_ensure`` of their
   streams, 1000 at a time (what ``job_add`` writes, one schedule per call, in batches).
2. **history**: one occurrence of each schedule, due at once, inserted with
   ``occurrence_insert_many`` (1000 a call), so that every job has a last outcome once the
   instance has run them.
3. **the instance**: one ``soloist run soloist_bench.operator_app:app --store URL --http
   127.0.0.1:PORT`` process with the library's defaults, which plans the schedules and runs
   the backlog; the measurement waits until its ``/metrics`` counts N successful runs under
   ``job="(dynamic)"`` (``drain_s``).
4. **the views**, while the instance runs the schedules: ``requests`` rounds (default 7),
   each one request to ``/healthz``, ``/readyz``, ``/status``, one page of
   ``/api/jobs?limit=50`` (and the next page, when the answer gives a ``next_cursor``) and
   ``/metrics``, over one kept-alive HTTP connection, timed by the client. A round starts
   at least 5.5 s after the last ``/metrics`` request, so that every one reads the store's
   counts afresh (they are cached 5 s), as a Prometheus scrape every 15 s does.
   Reported per endpoint: the median and the maximum latency, the size of the answer and
   its status; and the instance's successful runs during the rounds (it is running them).

The bars of issue 15 are checked on the medians: ``/status`` under 200 ms, one page of
``/api/jobs`` under 100 ms, ``/metrics`` under 200 KB. ``memory://`` is not measured (the
instance is another process). Storage is removed afterwards (a fresh PostgreSQL schema or
Redis key prefix per size, from :class:`soloist_bench.targets.Target`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

from prometheus_client.parser import text_string_to_metric_families

from soloist.metrics import AGGREGATED
from soloist.models import JobRecord, Kind, NewOccurrence
from soloist.scheduler import Scheduler
from soloist.schedules import every
from soloist.stores import open_store
from soloist.stores.base import Store
from soloist_bench.baselines import server_version
from soloist_bench.operator_app import OPERATOR_TASK
from soloist_bench.targets import Target

__all__ = ["OperatorConfig", "operator_main", "parse_sizes", "run_operator"]

#: The endpoints measured, in the order of a round (the jobs' next page when there is one).
ENDPOINTS = ("healthz", "readyz", "status", "jobs_page", "jobs_next_page", "metrics")
#: One page of the job list, as the dashboard asks for it.
JOBS_PAGE = "/api/jobs?limit=50"
#: Rows written per bulk call.
BATCH = 1000
#: Seconds from adding the schedules to the first of their instants (the instance runs
#: them from the start; those that come due while the schedules are still being written
#: run late, once each, as the catch-up policy says).
FIRST_AFTER = 10.0
#: A round starts at least this long after the last request to /metrics: past the 5 s
#: for which the instance serves its last reading of the store's counts.
ROUND_SPACING = 5.5
#: Seconds for the instance to answer /healthz after it was started.
START_TIMEOUT = 120.0
#: The bars of issue 15.
BAR_STATUS_MS = 200.0
BAR_JOBS_PAGE_MS = 100.0
BAR_METRICS_BYTES = 200_000
APP = "soloist_bench.operator_app:app"

Echo = Callable[[str], None]


@dataclasses.dataclass
class OperatorConfig:
    """What ``soloist bench operator`` measures (its options)."""

    stores: list[str]
    sizes: list[int]
    requests: int = 7
    interval: float = 3600.0
    json_path: str | None = None
    echo: Echo = print


def parse_sizes(text: str) -> list[int]:
    """``--jobs``: sizes separated by commas (``10000,100000``), each a whole number of at
    least 1; ValueError naming the bad one otherwise."""
    sizes = []
    for part in text.split(","):
        part = part.strip().replace("_", "")
        if not part.isdigit() or int(part) < 1:
            raise ValueError(
                f"invalid --jobs {text!r}: {part!r} is not a number of schedules (expected "
                "whole numbers of at least 1 separated by commas, e.g. 10000,100000)"
            )
        sizes.append(int(part))
    return sizes


# -- the schedules ----------------------------------------------------------------------------
def name_of(i: int, count: int) -> str:
    """Schedule names sort as they were numbered (zero-padded): pages follow them."""
    return f"op-{i:0{len(str(count - 1))}d}"


async def add_schedules(store: Store, count: int, interval: float) -> dict[str, float]:
    """The ``count`` dynamic schedules and one due occurrence of each (steps 1 and 2 of the
    module docstring); the seconds each step took."""
    app = Scheduler(store, instance_id="bench-operator")
    app.task(name=OPERATOR_TASK)(_noop)
    now = await store.now()
    base = now + timedelta(seconds=FIRST_AFTER)
    started = time.perf_counter()
    first = await app.schedules.aadd(
        name_of(0, count), task=OPERATOR_TASK, schedule=every(interval, start=base)
    )
    step = interval / count
    records: list[JobRecord] = []
    for i in range(1, count):
        schedule = {**first.schedule}
        start = base + timedelta(seconds=i * step)
        schedule["schedule"] = {**schedule["schedule"], "start": start.isoformat()}
        records.append(dataclasses.replace(first, name=name_of(i, count), schedule=schedule))
    for offset in range(0, len(records), BATCH):
        chunk = records[offset : offset + BATCH]
        await store.job_upsert(chunk)
        await store.plan_cursor_ensure([(record.name, "") for record in chunk])
    added = time.perf_counter() - started
    started = time.perf_counter()
    due = await store.now()
    for offset in range(0, count, BATCH):
        items = [
            NewOccurrence(
                dedupe_key=f"operator-seed:{name_of(i, count)}",
                job=name_of(i, count),
                task=OPERATOR_TASK,
                scope="",
                plan_time=due,
                due_at=due,
                kind=Kind.SCHEDULE,
            )
            for i in range(offset, min(offset + BATCH, count))
        ]
        await store.occurrence_insert_many(items)
    return {"add_s": added, "history_insert_s": time.perf_counter() - started}


def _noop(ctx: object) -> None:
    return None


# -- the instance -----------------------------------------------------------------------------
class Instance:
    """One ``soloist run`` process with ``--http`` on a free loopback port; its log (stderr)
    in a temporary file."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.port = _free_port()
        self.log: IO[str] = tempfile.TemporaryFile("w+")  # noqa: SIM115
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "soloist", "run", APP, "--store", self.url]
        argv += ["--http", f"127.0.0.1:{self.port}", "--instance-id", "operator-1"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SOLOIST_")}
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.log, env=env)

    def tail(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-3000:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Client:
    """GET requests over one kept-alive connection, timed from sending to the last byte.
    The server closes a connection idle for 5 s (uvicorn's keep-alive): one idle for
    longer than :data:`IDLE_S` is replaced before the request, outside the timing."""

    IDLE_S = 4.0

    def __init__(self, port: int, timeout: float = 60.0) -> None:
        self.port, self.timeout = port, timeout
        self.conn = self._connect()
        self.used = time.monotonic()
        #: When /metrics was last asked for (its store counts are cached 5 s).
        self.metrics_at = float("-inf")

    def _connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)

    def get(self, path: str) -> tuple[int, bytes, float]:
        """(status, body, seconds); status 0 if no answer came within the timeout."""
        if time.monotonic() - self.used > self.IDLE_S:
            self.conn.close()
            self.conn = self._connect()
            self.conn.connect()
        started = time.perf_counter()
        try:
            self.conn.request("GET", path)
            answer = self.conn.getresponse()
            body = answer.read()
        except TimeoutError:
            self.conn.close()
            self.conn = self._connect()
            return 0, b"", time.perf_counter() - started
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = self._connect()  # a fresh connection for the next request
            raise
        finally:
            self.used = time.monotonic()
            if path == "/metrics":
                self.metrics_at = self.used
        return answer.status, body, time.perf_counter() - started

    def close(self) -> None:
        self.conn.close()


def dynamic_runs(metrics_text: str) -> float:
    """Successful runs counted under ``job="(dynamic)"`` in a /metrics text."""
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "soloist_runs_total"
                and labels.get("job") == AGGREGATED
                and labels.get("outcome") == "succeeded"
            ):
                return float(sample.value)
    return 0.0


def wait_ready(client: Client, instance: Instance) -> float:
    started = time.monotonic()
    while time.monotonic() - started < START_TIMEOUT:
        assert instance.proc is not None
        if instance.proc.poll() is not None:
            raise RuntimeError(f"the instance exited: {instance.tail()}")
        try:
            if client.get("/healthz")[0] == 200:
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the instance did not answer /healthz: {instance.tail()}")


def wait_drained(client: Client, instance: Instance, count: int) -> float:
    """Seconds until the instance's /metrics counts ``count`` successful dynamic runs."""
    started = time.monotonic()
    timeout = 300 + count / 50  # far beyond a drain at 50 runs/s
    while time.monotonic() - started < timeout:
        assert instance.proc is not None
        if instance.proc.poll() is not None:
            raise RuntimeError(f"the instance exited: {instance.tail()}")
        status, body, _ = client.get("/metrics")
        if status == 200 and dynamic_runs(body.decode()) >= count:
            return time.monotonic() - started
        time.sleep(0.5 if count < 10_000 else 2.0)
    raise RuntimeError(f"the instance ran fewer than {count} schedules in {timeout:.0f}s")


# -- the views --------------------------------------------------------------------------------
def measure_views(client: Client, rounds: int) -> dict[str, Any]:
    """``rounds`` rounds of requests to every endpoint (see the module docstring)."""
    timings: dict[str, list[float]] = {name: [] for name in ENDPOINTS}
    sizes: dict[str, int] = {}
    statuses: dict[str, list[int]] = {name: [] for name in ENDPOINTS}
    page: dict[str, Any] = {}
    runs_before: float | None = None
    runs_after = 0.0
    window_start = time.monotonic()
    for _ in range(rounds):
        wait = client.metrics_at + ROUND_SPACING - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        next_path: str | None = None
        for name in ENDPOINTS:
            if name == "jobs_next_page":
                if next_path is None:
                    continue
                path = next_path
            else:
                path = JOBS_PAGE if name == "jobs_page" else f"/{name}"
            status, body, seconds = client.get(path)
            timings[name].append(seconds * 1000)
            statuses[name].append(status)
            sizes[name] = len(body)
            if name == "jobs_page" and status == 200:
                data = json.loads(body)
                cursor = data.get("next_cursor")
                page = {"rows": len(data.get("jobs", [])), "next_cursor": cursor is not None}
                if cursor:
                    next_path = f"{JOBS_PAGE}&cursor={quote(str(cursor), safe='')}"
            if name == "metrics" and status == 200:
                runs = dynamic_runs(body.decode())
                runs_before = runs if runs_before is None else runs_before
                runs_after = runs
    window = time.monotonic() - window_start
    endpoints = {
        name: {
            "median_ms": statistics.median(timings[name]),
            "max_ms": max(timings[name]),
            "all_ms": [round(t, 2) for t in timings[name]],
            "bytes": sizes[name],
            "statuses": sorted(set(statuses[name])),
        }
        for name in ENDPOINTS
        if timings[name]
    }
    return {
        "endpoints": endpoints,
        "jobs_page": page,
        "window_s": window,
        "runs_during": runs_after - (runs_before or 0.0),
    }


def bars(views: dict[str, Any]) -> dict[str, bool]:
    endpoints = views["endpoints"]

    def ok(name: str) -> bool:
        return bool(endpoints[name]["statuses"] == [200])

    return {
        "status_under_200ms": ok("status") and endpoints["status"]["median_ms"] < BAR_STATUS_MS,
        "jobs_page_under_100ms": ok("jobs_page")
        and endpoints["jobs_page"]["median_ms"] < BAR_JOBS_PAGE_MS,
        "metrics_under_200kb": ok("metrics") and endpoints["metrics"]["bytes"] < BAR_METRICS_BYTES,
    }


# -- one size, one store, the whole run --------------------------------------------------------
async def measure_size(target: Target, config: OperatorConfig, count: int) -> dict[str, Any]:
    url = target.fresh_url()
    store = open_store(url)
    result: dict[str, Any] = {"jobs": count, "interval_s": config.interval}
    try:
        await store.migrate()
        result.update(await add_schedules(store, count, config.interval))
    finally:
        await store.close()
    config.echo(
        f"  schedules written in {result['add_s']:.1f}s, their runs in "
        f"{result['history_insert_s']:.1f}s; starting the instance"
    )
    instance = Instance(url)
    client = Client(instance.port)
    try:
        instance.start()
        result["start_s"] = await asyncio.to_thread(wait_ready, client, instance)
        result["drain_s"] = await asyncio.to_thread(wait_drained, client, instance, count)
        config.echo(f"  the instance ran them in {result['drain_s']:.1f}s; timing the views")
        views = await asyncio.to_thread(measure_views, client, config.requests)
        result.update(views)
        result["runs_per_s_during"] = views["runs_during"] / views["window_s"]
        result["bars"] = bars(views)
    finally:
        client.close()
        await asyncio.to_thread(instance.stop)
    return result


async def measure_store(url: str, config: OperatorConfig) -> dict[str, Any]:
    target = Target(url)
    report: dict[str, Any] = {"store": url, "kind": target.kind}
    if not target.multiprocess:
        report["skipped"] = f"not meaningful: {url} is one process (the instance is another)"
        return report
    try:
        report["server_version"] = await server_version(target)
        report["sizes"] = []
        for count in config.sizes:
            config.echo(f"store {url}: {count} dynamic schedules")
            figures = await measure_size(target, config, count)
            config.echo(f"  {brief(figures)}")
            report["sizes"].append(figures)
    finally:
        await target.cleanup()
    return report


def brief(figures: dict[str, Any]) -> str:
    endpoints = figures["endpoints"]
    parts = [f"add {figures['add_s']:.1f}s", f"drain {figures['drain_s']:.1f}s"]
    for name, values in endpoints.items():
        parts.append(f"{name} {values['median_ms']:.1f} ms ({values['bytes']:,} B)")
    return ", ".join(parts)


def table(result: dict[str, Any]) -> list[str]:
    """The medians as a Markdown table, one row per store and size."""
    lines = [
        "",
        f"soloist bench operator, {result['date']}, nproc {result['nproc']}, Python "
        f"{result['python']}, median of {result['settings']['requests']} requests",
        "",
        "| store | schedules | /status ms | /api/jobs page ms | /metrics KB | /metrics ms "
        "| /healthz ms | /readyz ms | runs/s meanwhile | bars |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for store in result["stores"]:
        if "skipped" in store:
            lines.append(f"| {store['kind']} | {store['skipped']} |||||||||")
            continue
        for size in store["sizes"]:
            e = size["endpoints"]
            met = (
                "all met"
                if all(size["bars"].values())
                else "missed: " + ", ".join(name for name, ok in size["bars"].items() if not ok)
            )
            lines.append(
                f"| {store['kind']} | {size['jobs']:,} | {_ms(e, 'status')} | "
                f"{_ms(e, 'jobs_page')} | {e['metrics']['bytes'] / 1000:.1f} | "
                f"{_ms(e, 'metrics')} | {_ms(e, 'healthz')} | {_ms(e, 'readyz')} | "
                f"{size['runs_per_s_during']:.1f} | {met} |"
            )
    return lines


def _ms(endpoints: dict[str, Any], name: str) -> str:
    values = endpoints[name]
    text = f"{values['median_ms']:.1f}"
    if values["statuses"] == [200]:
        return text
    said = ", ".join(str(s) if s else "no answer in 60 s" for s in values["statuses"])
    return f"{text} (HTTP {said})"


async def run_operator(config: OperatorConfig) -> dict[str, Any]:
    result: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "command": " ".join(["soloist", *sys.argv[1:]]),
        "settings": {
            "sizes": config.sizes,
            "requests": config.requests,
            "interval_s": config.interval,
            "jobs_page": JOBS_PAGE,
            "round_spacing_s": ROUND_SPACING,
        },
        "stores": [await measure_store(url, config) for url in config.stores],
    }
    for line in table(result):
        config.echo(line)
    return result


def operator_main(config: OperatorConfig) -> dict[str, Any]:
    """Run :func:`run_operator` in a new event loop and write the JSON file if asked."""
    result = asyncio.run(run_operator(config))
    if config.json_path:
        Path(config.json_path).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        config.echo(f"\nwrote {config.json_path}")
    return result
