"""Chaos app: a job every second and queued tasks, all with the DEFAULT job and task options
(retries=0, overlap skip, catch_up latest, max_crashes 3). The one exception:
``CHAOS_CATCH_UP`` sets the job's ``catch_up``, for the scenario about that option.

Instance settings come from the environment (``SOLOIST_LEASE_TTL``, ``SOLOIST_MODE``) or
are set here (a short poll interval and grace period so that tests move quickly).

Every handler, once its work is done, appends one line to the file named by ``CHAOS_OUT``:
``<occurrence id> <key> <instance id> <pid> <fencing token>``, the key being the plan time
for the job and ``n=<n>`` for a task. It is one ``write`` on an ``O_APPEND`` descriptor, so
lines of concurrent processes never interleave. That file is the handlers' side effect,
kept outside the store: it shows each completed execution, where the store shows only
the recorded outcome (tests/chaos/figures.py compares the two).
"""

from __future__ import annotations

import asyncio
import os
import time

from soloist import JobContext, Scheduler, every

app = Scheduler(poll_interval="0.2s", grace_period="3s")


def _completed(ctx: JobContext, key: str) -> None:
    line = f"{ctx.occurrence_id} {key} {ctx.instance_id} {os.getpid()} {ctx.fencing_token}\n"
    fd = os.open(os.environ["CHAOS_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


#: Default options, unless a scenario about the catch-up policy sets CHAOS_CATCH_UP.
TICK_OPTIONS = {"catch_up": os.environ["CHAOS_CATCH_UP"]} if "CHAOS_CATCH_UP" in os.environ else {}


@app.job(every("1s"), name="tick", **TICK_OPTIONS)
def tick(ctx: JobContext) -> str:
    _completed(ctx, ctx.plan_time.isoformat())
    return ctx.instance_id


@app.task
def work(ctx: JobContext, n: int, seconds: float) -> int:
    """A sync handler (a worker thread: it cannot be interrupted)."""
    time.sleep(seconds)
    _completed(ctx, f"n={n}")
    return n


@app.task
async def awork(ctx: JobContext, n: int, seconds: float) -> int:
    """An async handler (cancelled when its lease is lost)."""
    await asyncio.sleep(seconds)
    _completed(ctx, f"n={n}")
    return n
