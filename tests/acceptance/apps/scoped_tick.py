"""Acceptance app: one job each second over 200 scopes, so 200 streams to plan that hash
into most of the planning partitions (``soloist run scoped_tick.py:app``).

Default options (mode ``distributed``, lease TTL 10 s, 64 partitions unless
``SOLOIST_PARTITIONS`` says otherwise), except what makes the history checkable second by
second across a kill -9: ``catch_up="all"`` (an instant a killed holder's partition did
not plan is planned late, not dropped), ``overlap="allow"`` (a killed runner's occurrence,
"running" until its lease expires, does not make the next seconds skip) and retries (that
occurrence is run again after the reaper fails it). ``SOLOIST_HTTP`` serves ``/status``.
"""

from __future__ import annotations

from datetime import datetime

from soloist import JobContext, Scheduler, every

SCOPES = [f"s{n:03d}" for n in range(200)]

app = Scheduler(grace_period="5s", poll_interval="0.5s", concurrency=20)


def scopes(now: datetime) -> list[str]:
    return SCOPES


@app.job(
    every("1s"),
    name="fan",
    scopes=scopes,
    overlap="allow",
    catch_up="all",
    retries=2,
    backoff="fixed",
    backoff_base="0.2s",
)
async def fan(ctx: JobContext) -> str:
    return ctx.instance_id
