"""Acceptance app: one job each second over 200 scopes, so 200 streams to plan that hash
into most of the planning partitions (``soloist run scoped_tick.py:app``).

Default options throughout (mode ``distributed``, lease TTL 10 s, misfire grace 12 s,
catch-up ``latest``, overlap ``skip``, no retries, 64 partitions unless
``SOLOIST_PARTITIONS`` says otherwise): the guarantees checked hold at the defaults.
``SOLOIST_HTTP`` serves ``/status``.
"""

from __future__ import annotations

from datetime import datetime

from soloist import JobContext, Scheduler, every

SCOPES = [f"s{n:03d}" for n in range(200)]

app = Scheduler()


def scopes(now: datetime) -> list[str]:
    return SCOPES


@app.job(every("1s"), name="fan", scopes=scopes)
async def fan(ctx: JobContext) -> str:
    return ctx.instance_id
