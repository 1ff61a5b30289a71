"""Operability (SPEC 5): the log lines of a run carry their structured fields."""

from __future__ import annotations

import signal

import pytest

from soloist.models import State

from .cluster import Cluster, wait_for

pytestmark = pytest.mark.acceptance


@pytest.mark.timeout(60)
def test_run_log_lines_carry_action_and_duration(cluster: Cluster) -> None:
    """`soloist run` logs a run's claim and success with action=, duration_s= and the
    run's own fields (job, attempt, execution_id), as the executor passes them."""
    out = cluster.workdir / "executions.txt"
    (only,) = cluster.start_all("work.py", "inst-a")
    occ_id = cluster.enqueue("work.py", "hold", out=str(out), first=0.1, later=0.1)
    wait_for(lambda: cluster.get(occ_id).state is State.SUCCEEDED, 15, "the task to succeed")
    only.send(signal.SIGTERM)
    assert only.wait(10) == 0

    lines = [line for line in only.log().splitlines() if f"execution_id={occ_id}" in line]
    claimed = [line for line in lines if "claimed hold" in line]
    succeeded = [line for line in lines if "succeeded hold" in line]
    assert len(claimed) == 1 and len(succeeded) == 1, only.log()
    assert "job=hold" in claimed[0] and "attempt=1" in claimed[0]
    assert "action=claimed" in claimed[0], claimed[0]
    assert "action=succeeded" in succeeded[0], succeeded[0]
    assert "duration_s=" in succeeded[0], succeeded[0]
