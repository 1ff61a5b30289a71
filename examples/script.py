"""A plain script: define jobs and tasks, then ``app.run()`` until SIGTERM or Ctrl-C.

Run it (as many copies as you like, against one store):

    python examples/script.py

Each copy is an instance: every 2 seconds one of them runs ``tick``, and a task queued
from anywhere (``soloist enqueue greet --app examples/script.py:app --payload
'{"name": "Ada"}'``) runs once. ``soloist history --limit 5`` shows what ran where.
"""

from __future__ import annotations

from soloist import JobContext, Scheduler, every

app = Scheduler()  # SOLOIST_STORE_URL, or ./soloist.db


@app.job(every("2s"))
def tick(ctx: JobContext) -> str:
    ctx.logger.info("tick planned for %s", ctx.plan_time.isoformat())
    return f"tick {ctx.plan_time:%H:%M:%S}"


@app.task(retries=2)
def greet(ctx: JobContext, name: str) -> str:
    return f"hello {name} (attempt {ctx.attempt})"


if __name__ == "__main__":
    app.run()  # logs to stderr unless logging is configured; SIGTERM stops it gracefully
