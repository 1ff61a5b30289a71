"""The drain's store side: make a fresh store, insert the benchmark's tasks, wait until they
have run, and read when the first started and the last finished.

:func:`measure_drain <soloist_bench.workloads.measure_drain>` does this in the bench's own
process for this code. With ``--compare-src`` the baseline's workers run another checkout's
soloist, which may keep an older store layout (a schema version, say) and refuses a store
that this code migrated; so for the baseline the same steps run in a process of their own on
that soloist, ``python -m soloist_bench feed URL TASKS`` (:func:`feed_main`): it migrates the
store with that code, prints ``ready``, waits for a line on stdin (the workers have
started), inserts the tasks, waits for them and prints one JSON line (:func:`summary`).

This module imports only what both sides have had since the drain was first measured:
``open_store``, the occurrence models and ``validate_payload``."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from soloist_bench.config import DRAIN_TIMEOUT, NOOP

if TYPE_CHECKING:
    from soloist.models import NewOccurrence, Occurrence
    from soloist.stores.base import Store

__all__ = ["feed_main", "finished", "items", "summary"]


def items(count: int, due: Callable[[int], datetime]) -> list[NewOccurrence]:
    """``count`` tasks built and validated as :meth:`Operations.enqueue` builds one."""
    from soloist.models import Kind, NewOccurrence, Overlap
    from soloist.payload import validate_payload

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


async def finished(store: Store, count: int, timeout: float) -> list[Occurrence]:
    """Wait until nothing of the benchmark task is claimable or running; its rows."""
    from soloist.models import State

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


def summary(rows: list[Occurrence]) -> dict[str, Any]:
    """What a drain reads off its rows: the first start, the last finish (RFC 3339) and
    how many instances ran them."""
    first = min(o.started_at for o in rows if o.started_at is not None)
    last = max(o.finished_at for o in rows if o.finished_at is not None)
    return {
        "first_started": first.isoformat(),
        "last_finished": last.isoformat(),
        "instances_used": len({o.instance_id for o in rows}),
    }


async def _feed(url: str, tasks: int) -> dict[str, Any]:
    from soloist.stores import open_store

    store = open_store(url)
    try:
        await store.migrate()
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        now = await store.now()
        batch = items(tasks, lambda i: now)
        started = time.perf_counter()
        await store.occurrence_insert_many(batch)
        inserted = time.perf_counter()
        rows = await finished(store, tasks, DRAIN_TIMEOUT)
        done = time.perf_counter()
        return {**summary(rows), "insert_s": inserted - started, "wait_s": done - inserted}
    finally:
        await store.close()


def feed_main(url: str, tasks: int) -> None:
    """``python -m soloist_bench feed URL TASKS`` (see the module docstring)."""
    print(json.dumps(asyncio.run(_feed(url, tasks))), flush=True)
