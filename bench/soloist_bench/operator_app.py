"""The instance of the operator-views benchmark (:mod:`soloist_bench.operator`), started
as an operator would start one: ``soloist run soloist_bench.operator_app:app --store URL
--http 127.0.0.1:PORT``.

It defines the task that the benchmark's dynamic schedules name (an ``async def`` no-op)
and one job in code (every 10 s), whose runs keep their own ``job`` label in the metrics
beside ``job="(dynamic)"``. Everything else is the library's defaults."""

from __future__ import annotations

from soloist import JobContext, Scheduler, every

#: The task of the benchmark's dynamic schedules.
OPERATOR_TASK = "operator_noop"
#: The job defined in code.
OPERATOR_JOB = "operator_tick"

app = Scheduler()  # the store from --store (SOLOIST_STORE_URL)


@app.task(name=OPERATOR_TASK)
async def operator_noop(ctx: JobContext) -> None:
    return None


@app.job(every("10s"), name=OPERATOR_JOB)
async def operator_tick(ctx: JobContext) -> None:
    return None
