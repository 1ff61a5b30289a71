"""Leader failover with the default lease TTL, measured on real processes."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from typing import Any

from soloist.config import DEFAULT_ELECTION, DEFAULT_LEASE_TTL
from soloist.models import LeaderLease, State
from soloist.stores import open_store
from soloist.stores.base import Store
from soloist_bench.config import FAILOVER_JOB, READY_TIMEOUT, BenchConfig
from soloist_bench.targets import Target

__all__ = ["measure_failover"]


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
                "soloist_bench",
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
