"""Acceptance app: one job each second that takes 0.4 s (``soloist run tick.py:app``).

Short leases so that a killed instance's run is picked up within about 2.5 s. The result
names the run that committed it (instance and fencing token), so the history shows that
the recorded result is the committing run's own.

With ``TICK_RUNS`` set to a directory, every execution of the handler leaves a file there,
``<plan time, epoch seconds>-<instance>-<fencing token>``, that says ``started`` when the
handler begins and gets ``done`` appended when it ends: the files show every execution
(one cut short by kill -9 has no ``done``), the store only the committed one.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from soloist import JobContext, Scheduler, every

RUNS = os.environ.get("TICK_RUNS")

app = Scheduler(lease_ttl="2s", heartbeat="0.5s", grace_period="5s", poll_interval="0.5s")


# overlap="allow": a killed instance's occurrence stays "running" until its lease expires,
# and must not make the next seconds' occurrences be skipped meanwhile.
@app.job(every("1s"), name="tick", overlap="allow", retries=2, backoff="fixed", backoff_base="0.2s")
def tick(ctx: JobContext) -> str:
    record = None
    if RUNS:
        name = f"{int(ctx.plan_time.timestamp())}-{ctx.instance_id}-{ctx.fencing_token}"
        record = Path(RUNS) / name
        with open(record, "x", encoding="utf-8") as file:  # "x": one file per execution
            file.write("started\n")
    time.sleep(0.4)
    if record is not None:
        with open(record, "a", encoding="utf-8") as file:
            file.write("done\n")
    return f"{ctx.instance_id} {ctx.fencing_token}"
