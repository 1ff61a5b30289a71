"""Fencing (SPEC 4.2, 4.3): a runner that lost its lease cannot commit its result (on
SQLite and on etcd, whose fence is a transaction compare)."""

from __future__ import annotations

import signal
import time

import pytest

from soloist.models import State

from .cluster import Cluster, wait_for

pytestmark = pytest.mark.acceptance


@pytest.mark.timeout(60)
@pytest.mark.parametrize("store_cluster", ["sqlite", "etcd"], indirect=True)
def test_frozen_runner_is_fenced_out_after_takeover(store_cluster: Cluster) -> None:
    """A runner frozen past its lease finishes its handler, but only the take-over commits."""
    cluster = store_cluster
    out = cluster.workdir / "executions.txt"
    first, second = cluster.start_all("work.py", "inst-a", "inst-b")
    by_id = {first.iid: first, second.iid: second}
    occ_id = cluster.enqueue("work.py", "hold", out=str(out), first=3.0, later=3.0)

    running = wait_for(
        lambda: (o := cluster.get(occ_id)).state is State.RUNNING and o,
        15,
        "the task to be claimed",
    )
    assert running.attempt == 1 and running.fencing_token == 1
    victim = by_id[running.instance_id or ""]
    rescuer = second if victim is first else first

    # Frozen: no heartbeats, so the lease expires and the other instance reaps and re-runs it.
    cluster.freeze(victim)
    try:
        done = wait_for(
            lambda: (o := cluster.get(occ_id)).state is State.SUCCEEDED and o,
            20,
            f"{rescuer.iid} to take the task over and finish it",
        )
    finally:
        victim.send(signal.SIGCONT)
    resumed_at = time.monotonic()

    # The frozen handler resumes, finishes, and tries to commit: the store must refuse it.
    wait_for(lambda: "fenced out" in victim.log(), 15, f"{victim.iid} to log its fenced write")
    final = cluster.get(occ_id)
    assert final == done
    assert final.state is State.SUCCEEDED
    assert final.instance_id == rescuer.iid
    assert final.result == rescuer.iid
    assert final.attempt == 1  # a crash spends no attempt
    assert final.crashes == 1
    assert final.fencing_token == 2
    assert "fenced out" not in rescuer.log()

    # Both handlers ran to the end (at-least-once execution); only one result was committed.
    executions = sorted(out.read_text().split("\n")[:-1])
    assert executions == sorted([f"{victim.iid} 1", f"{rescuer.iid} 2"])

    # And the committed row stays as it is while the fenced instance carries on.
    while time.monotonic() - resumed_at < 2.0:
        assert cluster.get(occ_id) == final
        time.sleep(0.2)
    assert victim.alive and rescuer.alive

    for instance in (victim, rescuer):
        instance.send(signal.SIGTERM)
    assert victim.wait(15) == 0
    assert rescuer.wait(15) == 0
    assert cluster.get(occ_id) == final
