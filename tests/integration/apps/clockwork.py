"""Fixture app for the CLI tests: three recurring jobs and two tasks.

``Scheduler()`` takes its store from ``SOLOIST_STORE_URL``, which ``soloist run`` and
``soloist enqueue`` set from ``--store``.
"""

from soloist import Scheduler, cron, every

app = Scheduler(poll_interval="0.2s", grace_period="5s")


@app.job(every("1s"))
def tick(ctx):
    """Every second: the job that the tests pause and resume."""
    return {"plan_time": ctx.plan_time.isoformat()}


@app.job(every("1s"))
def tock(ctx):
    """Every second, never paused: proves the planner kept working meanwhile."""
    return None


@app.job(cron("0 3 1 1 *"))
def yearly(ctx):
    """Once a year: during a test only a trigger makes it run."""
    return "yearly ran"


@app.task(retries=1)
def greet(ctx, name: str, times: int = 1):
    """A task with a payload: proves the --payload object reaches the handler."""
    return {"greeting": f"hello {name}", "times": times}


@app.task
def boom(ctx):
    """Always fails, no retries: gives the history a `dead` occurrence."""
    raise RuntimeError("boom")
