"""Fixture app for the CLI error tests: a job, and a task whose parameters are named like
``enqueue``'s own options (``key``, ``delay``, ``at``) and ``payload``.

``Scheduler()`` takes its store from ``SOLOIST_STORE_URL`` (``soloist enqueue`` sets it
from ``--store``).
"""

from soloist import Scheduler, every

app = Scheduler()


@app.job(every("1h"))
def hourly(ctx):
    """A job, so that the store has one to list."""


@app.task
def keyed(ctx, key, delay=None, at=None, payload=None):
    """Its payload keys are the names of enqueue's options; it returns what it got."""
    return {"key": key, "delay": delay, "at": at, "payload": payload}
