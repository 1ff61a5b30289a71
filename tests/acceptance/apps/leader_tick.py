"""Acceptance app: one job each second, run by the elected leader only.

The mode comes from SOLOIST_MODE (the tests run it as ``leader`` and ``distributed``);
the lease TTL is the default (10 s). ``SOLOIST_TEST_CLOCK_OFFSET`` skews this instance's
wall clock by that many seconds. catch_up="all": every second missed while no leader was
elected must still run, so that the history can be checked second by second. The handler
takes ``TICK_S`` seconds (default 0.05): long enough, at 0.4, for a test to catch an
instance while it runs one and kill it then.
"""

from __future__ import annotations

import os
import time

from soloist import JobContext, Scheduler, every
from soloist.testing import SkewedClock

app = Scheduler(grace_period="5s", poll_interval="0.5s", clock=SkewedClock.from_env())
TICK_S = float(os.environ.get("TICK_S", "0.05"))


@app.job(
    every("1s"),
    name="tick",
    overlap="allow",
    catch_up="all",
    retries=2,
    backoff="fixed",
    backoff_base="0.2s",
)
def tick(ctx: JobContext) -> str:
    time.sleep(TICK_S)
    return ctx.instance_id
