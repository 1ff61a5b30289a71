"""Failover on the server stores (PostgreSQL, Redis, etcd) with real processes: kill -9 the
leader, then SIGTERM the next.

Three instances run a job every second. Whatever the mode, the history must show each
second succeeded exactly once, none missing. In leader mode every run was started by the
leader of its moment, and the leadership passes on with a higher epoch each time, within
the bounds the product promises, with room for a loaded 2-core machine: after kill -9 the
lease expires within the TTL and a follower takes it at its next poll (0.5 s), so the next
run starts within TTL + 2 s; after SIGTERM the leader resigns and a follower takes over at
its next poll, so the next run starts within 3 s (a leader that did not resign would hold
the lease for the whole TTL, 10 s). In distributed mode the kill lands on a running
occurrence, which another instance runs again.
"""

from __future__ import annotations

import signal
from datetime import datetime, timedelta

import pytest

from soloist.config import DEFAULT_LEASE_TTL
from soloist.models import Occurrence, State

from .cluster import Cluster, Instance, wait_for
from .history import assert_each_second_once, now, settled

pytestmark = pytest.mark.acceptance

APP = "leader_tick.py"
TTL = DEFAULT_LEASE_TTL.total_seconds()
#: How late the next run may start after kill -9 of the leader, and after its SIGTERM.
AFTER_KILL_S = TTL + 2
AFTER_TERM_S = 3.0
#: Runs this close to a change of leader may be the old or the new leader's (a claim sent
#: just before the signal, answered after it).
EDGE_S = 1.0


def first_run_by(history: list[Occurrence], runner: str, signal_at: datetime) -> Occurrence | None:
    """``runner``'s first run started after ``signal_at``, or None yet."""
    runs = [
        o
        for o in history
        if o.instance_id == runner and o.started_at is not None and o.started_at > signal_at
    ]
    return min(runs, key=lambda o: o.started_at or signal_at, default=None)


def failover_delay(run: Occurrence, signal_at: datetime) -> float:
    """How late ``run`` started: seconds from the later of its due time and the signal
    (the wait that the change of leader caused)."""
    assert run.started_at is not None
    return (run.started_at - max(run.due_at, signal_at)).total_seconds()


def assert_each_run_by_its_leader(
    history: list[Occurrence], reigns: list[tuple[str, datetime | None, datetime | None]]
) -> None:
    """``reigns``: each leader and when it led (None: open-ended), in order. Every run
    started during a reign was started by its leader; one within EDGE_S of a change of
    leader may be either's."""
    wrong = []
    for run in history:
        if run.started_at is None:
            continue
        allowed = {
            leader
            for leader, start, end in reigns
            if (start is None or run.started_at >= start - timedelta(seconds=EDGE_S))
            and (end is None or run.started_at <= end + timedelta(seconds=EDGE_S))
        }
        if run.instance_id not in allowed:
            wrong.append((run.plan_time.isoformat(), run.started_at.isoformat(), run.instance_id))
    assert wrong == [], f"runs started by an instance that did not lead then: {wrong}"


class NewRun:
    """A probe for :func:`wait_for`: the run that this poll finds running and no earlier
    poll did, on any instance (it began at most one poll interval ago, by the test's own
    clock: instances with skewed clocks write skewed start times)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.seen: set[str] | None = None  # None until the first poll

    def __call__(self) -> Occurrence | None:
        running = [o for o in self.cluster.history("tick") if o.state is State.RUNNING]
        if self.seen is None:  # those were running before we looked: not known to be fresh
            self.seen = {o.id for o in running}
            return None
        fresh = [o for o in running if o.id not in self.seen]
        self.seen |= {o.id for o in running}
        return fresh[0] if fresh else None


def leader(cluster: Cluster, exclude: set[str] = frozenset()) -> tuple[str, int]:  # type: ignore[assignment]
    report = wait_for(
        lambda: (s := cluster.status())["leader_id"] not in (None, *exclude) and s,
        TTL + 10,
        "a leader to be elected",
    )
    return report["leader_id"], report["epoch"]


def by_id(instances: list[Instance], iid: str) -> Instance:
    return next(i for i in instances if i.iid == iid)


def test_leader_mode_fails_over_fast_and_runs_each_second_once(server_cluster: Cluster) -> None:
    """Leader mode: after kill -9 of the leader a follower leads (higher epoch) and its
    first run starts at most TTL + 2 s after the later of its due time and the kill; after
    SIGTERM of that leader, at most 3 s; every second ran exactly once, each run started by
    the leader of its moment."""
    instances = server_cluster.start_all(APP, "a", "b", "c", SOLOIST_MODE="leader")
    first, epoch1 = leader(server_cluster)
    wait_for(lambda: len(server_cluster.history("tick")) >= 3, 20, "a few ticks")

    killed_at = now()
    by_id(instances, first).send(signal.SIGKILL)
    second, epoch2 = leader(server_cluster, exclude={first})
    took_over = wait_for(
        lambda: first_run_by(server_cluster.history("tick"), second, killed_at),
        TTL + 10,
        "the new leader to run the job",
    )
    assert failover_delay(took_over, killed_at) <= AFTER_KILL_S
    wait_for(lambda: len(server_cluster.history("tick")) >= 3, 20, "ticks under the new leader")

    by_id(instances, second).send(signal.SIGTERM)
    termed_at = now()
    third, epoch3 = leader(server_cluster, exclude={first, second})
    handed_over = wait_for(
        lambda: first_run_by(server_cluster.history("tick"), third, termed_at),
        TTL + 10,
        "the third leader to run the job",
    )
    assert failover_delay(handed_over, termed_at) <= AFTER_TERM_S
    assert epoch1 < epoch2 < epoch3
    assert by_id(instances, second).wait(15) == 0

    more = now() + timedelta(seconds=3)
    wait_for(lambda: now() > more, 10, "a few more ticks")
    stop = now()
    by_id(instances, third).send(signal.SIGTERM)
    assert by_id(instances, third).wait(15) == 0
    until = stop - timedelta(seconds=2)
    history = server_cluster.history("tick")
    assert_each_second_once(history, until)
    runners = {o.instance_id for o in history if o.plan_time <= until}
    assert {first, second, third} <= runners
    reigns = [(first, None, killed_at), (second, killed_at, termed_at), (third, termed_at, None)]
    assert_each_run_by_its_leader(history, reigns)


@pytest.mark.parametrize(
    "offsets",
    [
        pytest.param(("0", "0", "0"), id="same-clocks"),
        pytest.param(("30", "-30", "0"), id="skewed"),
    ],
)
def test_distributed_mode_survives_kill_and_term(
    server_cluster: Cluster, offsets: tuple[str, str, str]
) -> None:
    """Distributed mode, clocks in step or skewed by +30 s and -30 s: after kill -9 of one
    instance while it runs an occurrence, and SIGTERM of another, every second still ran
    exactly once, none missed; the killed run was run again by another instance (a crash,
    no retry spent)."""
    instances = [
        server_cluster.start(
            APP, iid, SOLOIST_MODE="distributed", SOLOIST_TEST_CLOCK_OFFSET=off, TICK_S="0.4"
        )
        for iid, off in zip(("a", "b", "c"), offsets, strict=True)
    ]
    for instance in instances:
        wait_for(lambda i=instance: f"instance {i.iid} started" in i.log(), 20, "start")
    wait_for(lambda: len(server_cluster.history("tick")) >= 4, 20, "a few ticks")
    # Whichever instance wins the claims of a light job (one may win them all): the one
    # that has just begun a run is killed while it runs it.
    caught = wait_for(NewRun(server_cluster), 30, "a run that has just begun", interval=0.02)
    victim = next(i for i in instances if i.iid == caught.instance_id)
    stopped, survivor = (i for i in instances if i is not victim)
    victim.send(signal.SIGKILL)
    assert victim.wait(10) == -signal.SIGKILL
    orphan = server_cluster.get(caught.id)
    assert (orphan.state, orphan.instance_id) == (State.RUNNING, victim.iid), (
        f"{victim.iid} was killed between runs; nothing was left running: {orphan}"
    )
    ticks = len(server_cluster.history("tick"))
    wait_for(lambda: len(server_cluster.history("tick")) >= ticks + 4, 20, "ticks after the kill")
    stopped.send(signal.SIGTERM)
    assert stopped.wait(15) == 0
    # The killed run is picked up once its lease (the default TTL) expires.
    picked_up = wait_for(
        lambda: (o := server_cluster.get(caught.id)).state is State.SUCCEEDED and o,
        TTL + 20,
        "the killed run to run again",
    )
    wait_for(
        lambda: settled(server_cluster.history("tick"), minimum=14),
        20,
        "every past tick to succeed",
    )
    stop = now()
    survivor.send(signal.SIGTERM)
    assert survivor.wait(15) == 0
    until = stop - timedelta(seconds=2)
    history = server_cluster.history("tick")
    assert_each_second_once(history, until)
    # The survivor took over; which instances ran the seconds before is up to the race of
    # their claims (one may win every claim of a light job), not a guarantee.
    ran = {o.instance_id for o in history if o.plan_time <= until}
    assert survivor.iid in ran
    # The killed run ran again elsewhere: attempt 1 again, one crash, a new claim.
    assert caught.plan_time <= until
    assert picked_up.instance_id in (stopped.iid, survivor.iid)
    assert (picked_up.attempt, picked_up.crashes, picked_up.fencing_token) == (1, 1, 2)
