"""Acceptance app: one job each second that takes 0.4 s (``soloist run tick.py:app``).

Short leases so that a killed instance's run is picked up within about 2.5 s. The result
names the run that committed it (instance and fencing token), so the history shows that
the recorded result is the committing run's own.
"""

from __future__ import annotations

import time

from soloist import JobContext, Scheduler, every

app = Scheduler(lease_ttl="2s", heartbeat="0.5s", grace_period="5s", poll_interval="0.5s")


# overlap="allow": a killed instance's occurrence stays "running" until its lease expires,
# and must not make the next seconds' occurrences be skipped meanwhile.
@app.job(every("1s"), name="tick", overlap="allow", retries=2, backoff="fixed", backoff_base="0.2s")
def tick(ctx: JobContext) -> str:
    time.sleep(0.4)
    return f"{ctx.instance_id} {ctx.fencing_token}"
