"""Browser-test app: something of every kind for the dashboard to show.

``tick`` succeeds every second, ``always-fails`` fails every two seconds with no retry (so
its occurrences are ``dead``, with an error message full of markup), ``monthly-report``
only runs when triggered in practice (``sleepy`` too: it sleeps until cancelled), and two
jobs have names made of HTML that the page must show as text. Run it with
``soloist run tests/browser/apps/dashboard_app.py:app``.
"""

from __future__ import annotations

import asyncio

from soloist import JobContext, Scheduler, cron, every

SCRIPT_NAME = "<script>alert(1)</script>"
IMG_NAME = "<img src=x onerror=alert(1)>"
ERROR_MARKUP = "disk <b>full</b> & <img src=x onerror=alert(2)>"

app = Scheduler(poll_interval="0.2s", lease_ttl="4s", heartbeat="1s", grace_period="1s")


@app.job(every("1s"), name="tick")
def tick(ctx: JobContext) -> str:
    return "ok"


@app.job(every("2s"), name="always-fails", retries=0)
def always_fails(ctx: JobContext) -> None:
    raise RuntimeError(ERROR_MARKUP)


# The first day of the month at 06:00: never due while a test runs.
@app.job(cron("0 6 1 * *"), catch_up="skip", name="monthly-report")
def monthly_report(ctx: JobContext) -> str:
    return "report sent"


@app.job(cron("0 6 1 * *"), catch_up="skip", name=SCRIPT_NAME)
def script_named(ctx: JobContext) -> None:
    return None


@app.job(cron("0 6 1 * *"), catch_up="skip", name=IMG_NAME)
def img_named(ctx: JobContext) -> None:
    return None


# Triggered by the cancel test: runs until cancelled from the dashboard.
@app.job(cron("0 6 1 * *"), catch_up="skip", name="sleepy")
async def sleepy(ctx: JobContext) -> None:
    await asyncio.sleep(120)
