"""``soloist demo``: three real instances on one SQLite file, one killed with SIGKILL.

The parent process starts the instances (``python -m soloist.demo URL INSTANCE_ID``), prints
who ran each second's occurrence, kills one instance while it runs a job, stops the others
with SIGTERM, and then checks the history: every second of the run has exactly one
succeeded occurrence, none missing. It returns whether that verdict holds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

from soloist.models import Occurrence, State
from soloist.scheduler import Scheduler
from soloist.schedules import every
from soloist.stores import open_store

JOB = "tick"
LEASE_TTL = "3s"


def build_app(store_url: str, instance_id: str) -> Scheduler:
    """The app every demo instance runs: one job each second that takes 0.4 s."""
    app = Scheduler(
        store_url, instance_id=instance_id, lease_ttl=LEASE_TTL, heartbeat="1s", grace_period="5s"
    )

    # overlap="allow": a run is still in flight when the next second is due (and the run of
    # a killed instance stays "running" until its lease expires).
    @app.job(every("1s"), name=JOB, overlap="allow", retries=2, backoff="fixed")
    def tick(ctx: object) -> str:
        time.sleep(0.4)
        return "ok"

    return app


def _history(url: str) -> list[Occurrence]:
    async def fetch() -> list[Occurrence]:
        store = open_store(url)
        try:
            await store.migrate()
            return await store.occurrence_list(job=JOB, limit=10_000)
        finally:
            await store.close()

    return asyncio.run(fetch())


def _clock(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%H:%M:%S")


def run_demo(seconds: int = 14, instances: int = 3, echo: Callable[[str], None] = print) -> bool:
    workdir = Path(tempfile.mkdtemp(prefix="soloist-demo-"))
    url = f"sqlite:///{workdir / 'demo.db'}"
    echo(f"soloist demo: {instances} instances, store {url}, job '{JOB}' every second")
    asyncio.run(_migrate(url))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for n in range(1, instances + 1):
        iid = f"instance-{n}"
        with open(workdir / f"{iid}.log", "wb") as log:
            procs[iid] = subprocess.Popen(
                [sys.executable, "-m", "soloist.demo", url, iid], stdout=log, stderr=log
            )
        echo(f"  started {iid} (pid {procs[iid].pid})")
    started = time.monotonic()
    shown: set[str] = set()
    killed: str | None = None
    try:
        while time.monotonic() - started < seconds:
            time.sleep(0.25)
            history = _history(url)
            for occ in sorted(history, key=lambda o: o.plan_time):
                if occ.state is State.SUCCEEDED and occ.id not in shown:
                    shown.add(occ.id)
                    note = f"  (attempt {occ.attempt}: picked up)" if occ.attempt > 1 else ""
                    echo(f"  {_clock(occ.plan_time)}  ran on {occ.instance_id}{note}")
            if killed is None and time.monotonic() - started > seconds * 0.4:
                killed = _kill_one(url, procs, history, echo)
        echo("stopping the survivors with SIGTERM")
        stopped_at = datetime.now(timezone.utc)
        for iid, proc in procs.items():
            if iid != killed:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            proc.wait(timeout=30)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    return verdict(_history(url), stopped_at - timedelta(seconds=2), echo)


def _kill_one(
    url: str,
    procs: dict[str, subprocess.Popen[bytes]],
    history: list[Occurrence],
    echo: Callable[[str], None],
) -> str:
    # Aim at an instance in the middle of a run: that run must be picked up by another.
    deadline = time.monotonic() + 3
    busy = [o for o in history if o.state is State.RUNNING and o.instance_id in procs]
    while not busy and time.monotonic() < deadline:
        time.sleep(0.05)
        busy = [o for o in _history(url) if o.state is State.RUNNING and o.instance_id in procs]
    victim = busy[0].instance_id if busy else sorted(procs)[1 % len(procs)]
    assert victim is not None
    os.kill(procs[victim].pid, signal.SIGKILL)
    procs[victim].wait()
    what = f"while it ran {_clock(busy[0].plan_time)}" if busy else "between runs"
    echo(f"  kill -9 {victim} (pid {procs[victim].pid}) {what}")
    return victim


def verdict(history: list[Occurrence], until: datetime, echo: Callable[[str], None]) -> bool:
    """Every whole second from the first plan time to ``until`` succeeded exactly once."""
    window = [o for o in history if o.plan_time <= until]
    if not window:
        echo("FAIL: nothing ran")
        return False
    first = min(o.plan_time for o in window)
    expected = int((until - first).total_seconds()) + 1
    by_plan: dict[datetime, list[Occurrence]] = {}
    for occ in window:
        by_plan.setdefault(occ.plan_time, []).append(occ)
    missing = [
        first + timedelta(seconds=k)
        for k in range(expected)
        if not any(
            o.state is State.SUCCEEDED for o in by_plan.get(first + timedelta(seconds=k), [])
        )
    ]
    doubled = [p for p, occs in by_plan.items() if len(occs) > 1]
    retried = sum(1 for o in window if o.attempt > 1 and o.state is State.SUCCEEDED)
    runners = sorted({o.instance_id or "-" for o in window})
    echo(
        f"history: {len(window)} occurrences from {_clock(first)} to {_clock(until)} "
        f"on {', '.join(runners)}; {retried} picked up after the kill"
    )
    if missing or doubled:
        echo(
            f"FAIL: {len(missing)} second(s) missing {[_clock(m) for m in missing]}, "
            f"{len(doubled)} doubled"
        )
        return False
    echo(f"PASS: each of the {expected} seconds ran exactly once, none lost")
    return True


async def _migrate(url: str) -> None:
    store = open_store(url)
    try:
        await store.migrate()
    finally:
        await store.close()


if __name__ == "__main__":
    build_app(sys.argv[1], sys.argv[2]).run()
