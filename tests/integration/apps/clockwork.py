"""Fixture app for the CLI tests: two recurring jobs and one task.

``Scheduler()`` takes its store from ``SOLOIST_STORE_URL``, which ``soloist run`` and
``soloist enqueue`` set from ``--store``.
"""

from soloist import Scheduler, cron, every

app = Scheduler(poll_interval="0.2s", grace_period="5s")


@app.job(every("1s"))
def tick(ctx):
    """Runs every second: proves a running instance plans and executes jobs."""
    return {"plan_time": ctx.plan_time.isoformat()}


@app.job(cron("0 3 1 1 *"))
def yearly(ctx):
    """Runs once a year: only a trigger makes it run during a test."""
    return "yearly ran"


@app.task(retries=1)
def greet(ctx, name: str, times: int = 1):
    """A task with a payload: proves enqueue's JSON reaches the handler."""
    return {"greeting": f"hello {name}", "times": times}
