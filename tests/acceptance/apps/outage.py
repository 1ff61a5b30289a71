"""Acceptance app for a store outage: a job each second and a queued task.

catch_up="all" so that every second planned while the store was down still runs once it
is back: the history can then be checked second by second. Leases are short enough for a
test (TTL 6 s) yet longer than the outage the test causes, so no lease expires during it.
"""

from __future__ import annotations

from soloist import JobContext, Scheduler, every

app = Scheduler(lease_ttl="6s", heartbeat="1s", grace_period="2s", poll_interval="0.2s")


@app.job(every("1s"), name="tick", overlap="allow", catch_up="all", retries=2)
def tick(ctx: JobContext) -> str:
    return ctx.instance_id


@app.task(retries=2)
def record(ctx: JobContext, n: int) -> int:
    return n
