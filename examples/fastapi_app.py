"""A FastAPI app that runs soloist with it: the scheduler starts and stops with the app,
and a request handler queues a task.

Run it from the repository root (``pip install fastapi uvicorn`` first):

    uvicorn fastapi_app:api --app-dir examples

then queue a task and look at the history:

    curl -X POST localhost:8000/signup -H 'content-type: application/json' \\
         -d '{"email": "ada@example.com"}'
    soloist history --job send_welcome

SIGTERM or Ctrl-C stops uvicorn, which stops the scheduler gracefully. To run the workers
in other processes instead (``soloist run examples/fastapi_app.py:app``), pass
``workers=False`` to ``lifespan``: the web process then only enqueues.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI
from pydantic import BaseModel

from soloist import ConfigError, JobContext, Scheduler, every
from soloist.contrib.asgi import lifespan

# uvicorn configures its own loggers only: show soloist's INFO lines too.
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(message)s")

app = Scheduler()  # SOLOIST_STORE_URL, or ./soloist.db


@app.task(retries=3, backoff="exponential", timeout="1m")
async def send_welcome(ctx: JobContext, to: str) -> dict[str, str]:
    ctx.logger.info("welcome mail to %s", to)
    return {"to": to}


@app.job(every("1m"))
def purge_sessions(ctx: JobContext) -> None:
    ctx.logger.info("purging sessions planned for %s", ctx.plan_time)


api = FastAPI(lifespan=lifespan(app))


class Signup(BaseModel):
    email: str


@api.post("/signup")
async def signup(body: Signup) -> dict[str, str]:
    occurrence = await app.aenqueue(send_welcome, {"to": body.email})
    return {"occurrence": occurrence}


# soloist's HTTP app under /soloist: the dashboard, /soloist/healthz, /readyz, /status and
# /metrics, reporting on this process's scheduler. It needs the ``http`` extra
# (``pip install soloist[http]``); without it the app runs with no dashboard.
try:
    from soloist.http import create_app
except (ImportError, ConfigError):
    pass
else:
    # Actions (trigger, pause, retry) need ``Authorization: Bearer $SOLOIST_TOKEN``; with no
    # SOLOIST_TOKEN set the dashboard is read-only.
    api.mount("/soloist", create_app(app))
