"""The project's scheduler and its tasks (named by ``settings.SOLOIST_APP``)."""

from __future__ import annotations

from soloist import JobContext, Scheduler, cron
from soloist.contrib.django import store_url

# settings.SOLOIST_STORE_URL, else the SOLOIST_STORE_URL variable, else settings.DATABASES.
app = Scheduler(store_url())


@app.task(retries=3, backoff="exponential", timeout="1m")
def send_welcome(ctx: JobContext, to: str) -> dict[str, str]:
    # A sync handler runs in a worker thread: the Django ORM may be used here
    # (`manage.py soloist run` closes stale connections around each run).
    ctx.logger.info("welcome mail to %s", to)
    return {"to": to}


@app.job(cron("0 3 * * *"), catch_up="skip")
def clear_expired_sessions(ctx: JobContext) -> None:
    ctx.logger.info("clearing sessions planned for %s", ctx.plan_time)
