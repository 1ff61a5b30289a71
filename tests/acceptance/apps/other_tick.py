"""Acceptance app: another app on the same store as scoped_tick.py, defining a job of its
own (``other``, every second) and not ``fan``: instances of the two apps define different
jobs, so they plan shared, not by partitions. Default options."""

from __future__ import annotations

from soloist import JobContext, Scheduler, every

app = Scheduler()


@app.job(every("1s"), name="other")
async def other(ctx: JobContext) -> str:
    return ctx.instance_id
