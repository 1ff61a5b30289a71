"""The runtime on a real PostgreSQL server: wake-ups travel through LISTEN/NOTIFY."""

from __future__ import annotations

import asyncio
import time

from soloist import Scheduler, every
from soloist.models import State


async def test_a_schedule_added_elsewhere_runs_without_waiting_for_a_refresh(
    postgres_url: str,
) -> None:
    """A dynamic schedule added by another process's Scheduler wakes an idle instance's
    planner at once: its first occurrence runs within about a second, not after the
    planner's refresh (10 s here: five poll intervals); 6 s allows for a loaded machine."""
    ran = asyncio.Event()
    runner = Scheduler(postgres_url, instance_id="runner", poll_interval="2s")

    @runner.task
    async def report(ctx) -> None:  # type: ignore[no-untyped-def]
        ran.set()

    admin = Scheduler(postgres_url, instance_id="admin")
    admin.task(name="report")(report)
    await runner.start()
    try:
        await asyncio.sleep(1.5)  # idle: the planner sleeps until its refresh
        added = time.monotonic()
        await admin.schedules.aadd("every-second", task="report", schedule=every("1s"))
        await asyncio.wait_for(ran.wait(), 20)
        assert time.monotonic() - added < 6  # without the wake-up: 10 s or more
        for _ in range(50):  # the handler ran; its outcome is written right after
            rows = await runner.ahistory(job="every-second", state=State.SUCCEEDED)
            if rows:
                break
            await asyncio.sleep(0.1)
        assert rows and {r.instance_id for r in rows} == {"runner"}
    finally:
        await runner.stop()
        await admin.aclose()
