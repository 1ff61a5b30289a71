"""Fixture app whose job has a bad cron expression: loading it must fail cleanly."""

from soloist import Scheduler, cron

app = Scheduler()


@app.job(cron("61 25 * * *"))
def never(ctx):
    """Never defined: the cron expression is rejected at import."""
