"""Browser-test app of the job list's paging and search: one task, ``report``, and the
dynamic schedules :func:`fill` adds to the store (``tenant-000`` to ``tenant-119`` by
default), every hour. Run it with ``soloist run tests/browser/apps/many_jobs_app.py:app``.
"""

from __future__ import annotations

from soloist import JobContext, Scheduler, every

app = Scheduler(poll_interval="0.2s", lease_ttl="4s", heartbeat="1s", grace_period="1s")


@app.task()
def report(ctx: JobContext) -> str:
    return "sent"


def fill(store_url: str, count: int = 120) -> list[str]:
    """Add ``count`` dynamic schedules of ``report`` to the store at ``store_url`` (a
    Scheduler of its own with the same task); returns their names, in order."""
    names = [f"tenant-{n:03d}" for n in range(count)]
    filler = Scheduler(store_url)
    filler.task(name="report")(report)
    try:
        for name in names:
            filler.schedules.add(name, task="report", schedule=every("1h"))
    finally:
        filler.close()
    return names
