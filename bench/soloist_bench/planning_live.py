"""The planning figure, parts 2 and 3: dynamic schedules run by real instance processes.

``schedules`` dynamic schedules ``every(interval)``, spread evenly over the interval (each
one's ``start`` is ``interval / schedules`` after the previous one's: a steady
``schedules / interval`` runs per second, as independent schedules would be, rather than
one burst of every schedule on the same grid instant), are run by ``instances`` processes
(``python -m soloist_bench scheduled``, default options: distributed mode, 64 partitions,
concurrency 10) with a sync no-op handler that records each run in a file of its own
process (:func:`soloist_bench.processes.scheduled_main`). After ``warmup`` seconds a
window of ``window`` seconds is measured:

* **lateness**: handler start (wall clock, in the handler) minus plan time, for the runs
  planned in the window;
* **skipped**: instants of the window with no run recorded, and occurrences of the window
  the store holds as ``skipped``;
* **doubled**: (job, plan time) pairs run more than once, over the whole measurement;
* **work**: each instance's CPU (``/proc/<pid>/stat``), and its planner's streams and CPU
  seconds (``Runtime.report()``, what ``GET /status`` shows for the instance).

With ``rebalance``, one more instance then joins (a second window: planning work per
instance should fall), and then the holder of the most partitions is killed with SIGKILL:
the seconds until all of its partitions have a new holder (polling
``store.partition_list()``), and the instants lost from the kill to ``interval`` (at least
lease TTL + 5 s) after it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from typing import IO, Any

from soloist.clock import to_epoch_us
from soloist.config import DEFAULT_LEASE_TTL
from soloist.models import JobRecord, State
from soloist.runtime.partitions import DEFAULT_PARTITIONS
from soloist.scheduler import Scheduler
from soloist.schedules import every
from soloist.stores import open_store
from soloist.stores.base import Store
from soloist_bench.config import PLANNED, READY_TIMEOUT, BenchConfig
from soloist_bench.planning import add_schedules
from soloist_bench.report import percentiles
from soloist_bench.targets import Target

__all__ = ["measure_instances"]

#: Schedules added per second, assumed when choosing their first instant: a slower add
#: makes the first instants come due while the add still loads the machine, a backlog
#: that a fleet running at its capacity never drains (on 2 cores, 100,000 adds took
#: 108-147 s while instances ran). Measured at 680-925/s here; half of that, for margin.
ADD_RATE = 400
#: Seconds at least from adding the schedules to their first instants: an instance
#: learns of schedules added by another process at its planner's next wake-up, which is
#: ``refresh`` (5 x poll interval) at the latest while it has nothing to plan.
FIRST_AFTER = 6.0
#: Seconds to wait after a window for its last runs to be recorded.
DRAIN_MARGIN = 5.0


class Fleet:
    """The instance processes, their run files and their reports."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.logdir = tempfile.mkdtemp(prefix="soloist-bench-")
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.killed: set[str] = set()

    async def start(self, instance_id: str) -> None:
        with self._file(f"{instance_id}.err", "w") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "soloist_bench",
                "scheduled",
                self.url,
                instance_id,
                self.logdir,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        self.procs[instance_id] = proc
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), READY_TIMEOUT)
        if line.strip() != b"ready":
            with self._file(f"{instance_id}.err", "r") as err:
                raise RuntimeError(f"instance {instance_id} did not start: {err.read()[-2000:]}")

    def _file(self, name: str, mode: str) -> IO[str]:
        return open(os.path.join(self.logdir, name), mode, encoding="utf-8")

    def kill(self, instance_id: str) -> None:
        self.procs[instance_id].send_signal(signal.SIGKILL)
        self.killed.add(instance_id)

    def live(self) -> list[str]:
        return [i for i in self.procs if i not in self.killed]

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Each live instance's CPU seconds so far and its last report."""
        import json

        out = {}
        for iid in self.live():
            path = os.path.join(self.logdir, f"{iid}.json")
            with open(path, encoding="utf-8") as f:
                report = json.load(f)
            out[iid] = {"cpu_s": _cpu_seconds(self.procs[iid].pid), "report": report}
        return out

    def runs(self) -> list[tuple[str, int, int, str]]:
        """Every run recorded: job, plan time (epoch us), handler start (epoch us), instance."""
        out = []
        for iid in self.procs:
            path = os.path.join(self.logdir, f"{iid}.runs")
            if not os.path.exists(path):
                continue
            with open(path, encoding="utf-8") as f:
                for line in f:
                    parts = line.rstrip("\n").split("\t")
                    if len(parts) == 3:  # a SIGKILL may cut the last line
                        out.append((parts[0], int(parts[1]), int(parts[2]), iid))
        return out

    async def close(self) -> None:
        for proc in self.procs.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
        shutil.rmtree(self.logdir, ignore_errors=True)


def _cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (fields 14 and 15 of /proc/<pid>/stat), in seconds."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _sleep_until(store: Store, moment: datetime) -> None:
    delay = (moment - await store.now()).total_seconds()
    if delay > 0:
        await asyncio.sleep(delay)


async def _holders(store: Store) -> collections.Counter[str]:
    return collections.Counter(lease.holder for lease in await store.partition_list())


async def _spread(store: Store, instances: list[str], timeout: float) -> float:
    """Wait until every partition is held, by exactly ``instances``; the seconds taken."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        holders = await _holders(store)
        if sum(holders.values()) == DEFAULT_PARTITIONS and set(holders) == set(instances):
            return time.monotonic() - started
        await asyncio.sleep(0.1)
    raise RuntimeError(f"partitions not spread over {instances}: {dict(await _holders(store))}")


@dataclasses.dataclass
class Plan:
    """The schedules: ``count`` of them, the i-th first due at ``base + i * interval /
    count``, then every ``interval``."""

    count: int
    interval_us: int
    base_us: int

    def start_us(self, i: int) -> int:
        return self.base_us + i * self.interval_us // self.count

    def instants(self, a_us: int, b_us: int) -> set[tuple[str, int]]:
        """Every (job, plan time) of the schedules in ``[a_us, b_us)``."""
        out = set()
        for i in range(self.count):
            start = self.start_us(i)
            k = max(0, math.ceil((a_us - start) / self.interval_us))
            t = start + k * self.interval_us
            while t < b_us:
                out.add((f"p-{i}", t))
                t += self.interval_us
        return out


async def _add(store: Store, app: Scheduler, plan: Plan, interval: float) -> float:
    base = _at(plan.base_us)
    template = await app.schedules.aadd("p-0", task=PLANNED, schedule=every(interval, start=base))
    records: list[JobRecord] = []
    for i in range(1, plan.count):
        start = base + timedelta(microseconds=plan.start_us(i) - plan.base_us)
        schedule = {**template.schedule}
        schedule["schedule"] = {**schedule["schedule"], "start": start.isoformat()}
        records.append(dataclasses.replace(template, name=f"p-{i}", schedule=schedule))
    return await add_schedules(store, records)


def _work(before: dict[str, Any], after: dict[str, Any], seconds: float) -> dict[str, Any]:
    """Per instance over a window: CPU %, planner streams/s and CPU seconds, partitions."""
    out = {}
    for iid, end in after.items():
        start = before.get(iid)
        if start is None:
            continue
        planner0, planner1 = start["report"]["planner"], end["report"]["planner"]
        out[iid] = {
            "cpu_percent": 100 * (end["cpu_s"] - start["cpu_s"]) / seconds,
            "planner_streams_per_s": (planner1["streams"] - planner0["streams"]) / seconds,
            "planner_cpu_s": planner1["cpu_seconds"] - planner0["cpu_seconds"],
            "planner_round_trips_per_s": (planner1["round_trips"] - planner0["round_trips"])
            / seconds,
            "partitions_held": len(end["report"].get("partitions", {}).get("held", [])),
        }
    return out


def _window(
    runs: list[tuple[str, int, int, str]],
    skipped_in_store: list[int],
    plan: Plan,
    a_us: int,
    b_us: int,
) -> dict[str, Any]:
    """Lateness and skipped instants of ``[a_us, b_us)``."""
    expected = plan.instants(a_us, b_us)
    ran = {(job, p) for job, p, _, _ in runs if a_us <= p < b_us}
    late = [(s - p) / 1000 for job, p, s, _ in runs if a_us <= p < b_us]
    return {
        "seconds": (b_us - a_us) / 1e6,
        "expected_runs": len(expected),
        "runs": len(ran & expected),
        "runs_per_s": len(ran & expected) / ((b_us - a_us) / 1e6),
        "skipped": len(expected - ran),
        "skipped_in_store": sum(1 for p in skipped_in_store if a_us <= p < b_us),
        "lateness_ms": percentiles(late) if late else {"n": 0},
        # p50 / p99 lateness of the runs planned in each 10 s slice of the window: a
        # backlog building or draining shows here.
        "lateness_by_10s": _slices(runs, a_us, b_us),
    }


def _slices(runs: list[tuple[str, int, int, str]], a_us: int, b_us: int) -> list[list[float]]:
    out = []
    for lo in range(a_us, b_us, 10_000_000):
        late = [(s - p) / 1000 for _, p, s, _ in runs if lo <= p < min(lo + 10_000_000, b_us)]
        if late:
            figures = percentiles(late)
            out.append([round(figures["p50"], 1), round(figures["p99"], 1)])
    return out


async def measure_instances(
    target: Target,
    config: BenchConfig,
    *,
    schedules: int,
    interval: float,
    instances: int,
    rebalance: bool,
) -> dict[str, Any]:
    """Parts 2 (one instance) and 3 (``rebalance``: several, one joining, one killed)."""
    if not target.multiprocess:
        return {"skipped": f"not meaningful: {target.url} is one process"}
    url = target.fresh_url()
    store = open_store(url)
    app = Scheduler(store)
    app.task(name=PLANNED)(_noop)
    fleet = Fleet(url)
    result: dict[str, Any] = {"schedules": schedules, "interval_s": interval}
    try:
        await store.migrate()
        ids = [f"plan-{n}" for n in range(1, instances + 1)]
        for iid in ids:
            await fleet.start(iid)
        result["partitions_spread_s"] = await _spread(store, ids, 60)
        now = await store.now()
        lead = max(FIRST_AFTER, schedules / ADD_RATE)
        plan = Plan(schedules, int(interval * 1e6), to_epoch_us(now) + int(lead * 1e6))
        result["add_s"] = await _add(store, app, plan, interval)
        windows: list[tuple[str, int, int]] = []
        start = max(await store.now(), _at(plan.base_us)) + timedelta(seconds=config.warmup)
        await _sleep_until(store, start)
        work, a = {}, start
        before = fleet.snapshot()
        b = a + timedelta(seconds=config.window)
        await _sleep_until(store, b)
        work[_named(instances)] = _work(before, fleet.snapshot(), config.window)
        windows.append((_named(instances), to_epoch_us(a), to_epoch_us(b)))
        if rebalance:
            joined = f"plan-{instances + 1}"
            await fleet.start(joined)
            result["rebalance_s"] = await _spread(store, [*ids, joined], 60)
            a = await store.now() + timedelta(seconds=2)
            await _sleep_until(store, a)
            before = fleet.snapshot()
            b = a + timedelta(seconds=config.window)
            await _sleep_until(store, b)
            work[_named(instances + 1)] = _work(before, fleet.snapshot(), config.window)
            windows.append((_named(instances + 1), to_epoch_us(a), to_epoch_us(b)))
            result["failover"] = await _kill_holder(store, fleet)
            a = _at(result["failover"]["killed_at_us"])
            span = max(interval, DEFAULT_LEASE_TTL.total_seconds() + 5)
            b = a + timedelta(seconds=span)
            await _sleep_until(store, b)
            windows.append(("after kill -9", to_epoch_us(a), to_epoch_us(b)))
        await asyncio.sleep(DRAIN_MARGIN)
        runs = fleet.runs()
        skipped = [
            to_epoch_us(o.plan_time)
            for o in await store.occurrence_list(state=State.SKIPPED, limit=10 * schedules)
        ]
        result["windows"] = {
            name: _window(runs, skipped, plan, a_us, b_us) for name, a_us, b_us in windows
        }
        result["work"] = work
        result.update(_doubled(runs, fleet.killed))
        return result
    finally:
        await fleet.close()
        await store.close()


def _named(instances: int) -> str:
    return "1 instance" if instances == 1 else f"{instances} instances"


def _noop(ctx: object) -> None:
    return None


def _at(epoch_us: int) -> datetime:
    return datetime.fromtimestamp(epoch_us / 1e6, timezone.utc)


def _doubled(runs: list[tuple[str, int, int, str]], killed: set[str]) -> dict[str, int]:
    """(job, plan time) pairs run more than once; those whose first run was on a killed
    instance (a run cut by kill -9 is run again: at least once, as documented) apart."""
    by_key: dict[tuple[str, int], list[tuple[int, str]]] = collections.defaultdict(list)
    for job, plan_us, start_us, iid in runs:
        by_key[(job, plan_us)].append((start_us, iid))
    doubled = [sorted(v) for v in by_key.values() if len(v) > 1]
    after_kill = sum(1 for v in doubled if v[0][1] in killed)
    return {"doubled": len(doubled) - after_kill, "rerun_after_kill": after_kill}


async def _kill_holder(store: Store, fleet: Fleet) -> dict[str, Any]:
    """SIGKILL the holder of the most partitions; seconds until all have another holder."""
    holders = await _holders(store)
    victim, held = holders.most_common(1)[0]
    fleet.kill(victim)
    killed_at = await store.now()
    started = time.monotonic()
    deadline = started + DEFAULT_LEASE_TTL.total_seconds() + 60
    while time.monotonic() < deadline:
        holders = await _holders(store)
        if victim not in holders and sum(holders.values()) == DEFAULT_PARTITIONS:
            moved: float | None = time.monotonic() - started
            break
        await asyncio.sleep(0.1)
    else:
        moved = None  # not within lease TTL + 60 s
    return {
        "killed": victim,
        "partitions_held": held,
        "moved_s": moved,
        "lease_ttl_s": DEFAULT_LEASE_TTL.total_seconds(),
        "killed_at_us": to_epoch_us(killed_at),
    }
