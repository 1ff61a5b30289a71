"""Acceptance app: queued tasks whose length the test chooses (``soloist run work.py:app``).

Leases are short (TTL 2 s, heartbeat 0.5 s) and the grace period is 1 s, so that frozen,
killed and stopped instances are dealt with in a few seconds. Every handler returns the
id of the instance that ran it and appends ``"<instance_id> <fencing_token>"`` to the file
``out`` when it finishes: the file shows every execution, the store only the committed one.
"""

from __future__ import annotations

import asyncio
import time

from soloist import JobContext, Scheduler

app = Scheduler(lease_ttl="2s", heartbeat="0.5s", grace_period="1s", poll_interval="0.2s")


def _note(ctx: JobContext, out: str) -> None:
    with open(out, "a", encoding="utf-8") as file:
        file.write(f"{ctx.instance_id} {ctx.fencing_token}\n")


def _seconds(ctx: JobContext, first: float, later: float) -> float:
    # The first claim of an occurrence has token 1; any later run (after a take-over or a
    # release) is short, so the test does not wait for a second long run.
    return first if ctx.fencing_token == 1 else later


@app.task(retries=1)
def hold(ctx: JobContext, out: str, first: float, later: float) -> str:
    """A sync handler: a worker thread that cannot be interrupted."""
    time.sleep(_seconds(ctx, first, later))
    _note(ctx, out)
    return ctx.instance_id


@app.task(retries=1)
async def linger(ctx: JobContext, out: str, first: float, later: float) -> str:
    """An async handler: cancellable at any await."""
    await asyncio.sleep(_seconds(ctx, first, later))
    _note(ctx, out)
    return ctx.instance_id
