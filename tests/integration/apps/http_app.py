"""The app that tests/integration/test_http.py serves over HTTP: a job that ticks every
second, a job that always fails (to retry dead occurrences), a job whose name is markup,
and a nested job name with a slash."""

from __future__ import annotations

from soloist import JobContext, Scheduler, every

app = Scheduler(lease_ttl="3s", poll_interval="200ms")

SCRIPT_NAME = "<script>alert('x')</script>"


@app.job(every("1s"))
def tick(ctx: JobContext) -> str:
    return "tock"


@app.job(every("1h"), catch_up="skip")
def flaky(ctx: JobContext) -> None:
    raise RuntimeError("flaky <b>always</b> fails")


@app.job(every("1h"), name=SCRIPT_NAME, catch_up="skip")
def markup(ctx: JobContext) -> None:
    return None


@app.job(every("1h"), name="reports/daily", catch_up="skip")
def nested(ctx: JobContext) -> None:
    return None
