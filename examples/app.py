"""An example app: one job every 5 seconds, a nightly job, and a task queue.

Run it (as many copies as you like, against one store):

    soloist run examples/app.py:app

and, from another shell, queue a task and look at the history:

    soloist enqueue resize_image --app examples/app.py:app --payload '{"path": "cat.png"}'
    soloist history --limit 10
"""

from __future__ import annotations

import asyncio

from soloist import JobContext, Scheduler, cron, every

app = Scheduler()  # SOLOIST_STORE_URL, or ./soloist.db


@app.job(every("5s"), retries=2)
def report(ctx: JobContext) -> str:
    ctx.logger.info("report for %s", ctx.plan_time.isoformat())
    return f"report {ctx.plan_time:%H:%M:%S}"


@app.job(cron("30 2 * * *", tz="Europe/Berlin"), timeout="10m", catch_up="skip")
async def nightly_cleanup(ctx: JobContext) -> None:
    await asyncio.sleep(0.1)


@app.task(retries=3, backoff="exponential", timeout="1m")
def resize_image(ctx: JobContext, path: str, width: int = 640) -> dict[str, object]:
    return {"path": path, "width": width, "token": ctx.fencing_token}


if __name__ == "__main__":
    app.run()
