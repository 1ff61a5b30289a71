"""Operability (SPEC 5): the log lines of a run carry their structured fields."""

from __future__ import annotations

import json
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


@pytest.mark.timeout(60)
def test_json_logs_are_one_object_per_line_with_the_fields(cluster: Cluster) -> None:
    """`SOLOIST_LOG_FORMAT=json` (as `--log-format json`): every line the instance writes is
    one JSON object, and a run's claim and success carry job, attempt, execution_id,
    instance_id, plan_time and action as fields."""
    (only,) = cluster.start_all("work.py", "inst-j", SOLOIST_LOG_FORMAT="json")
    out = cluster.workdir / "executions.txt"
    occ_id = cluster.enqueue("work.py", "hold", out=str(out), first=0.1, later=0.1)
    wait_for(lambda: cluster.get(occ_id).state is State.SUCCEEDED, 15, "the task to succeed")
    only.send(signal.SIGTERM)
    assert only.wait(10) == 0

    records = [json.loads(line) for line in only.log().splitlines() if line.strip()]
    assert records, "no log lines"
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    mine = [r for r in records if r.get("execution_id") == occ_id]
    actions = {r["action"]: r for r in mine}
    assert {"claimed", "succeeded"} <= actions.keys(), mine
    claimed = actions["claimed"]
    assert claimed["job"] == "hold" and claimed["attempt"] == 1, claimed
    assert claimed["instance_id"] == "inst-j" and claimed["level"] == "INFO", claimed
    assert claimed["plan_time"], claimed
    assert actions["succeeded"]["duration_s"] >= 0.1, actions["succeeded"]
