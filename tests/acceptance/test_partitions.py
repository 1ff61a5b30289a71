"""Partitioned planning on the server stores (PostgreSQL, Redis, etcd) with real processes.

In distributed mode the live instances share planning by partitions (64 by default), each
with a lease and an epoch in the store. The app (apps/scoped_tick.py) plans 200 streams
every second, so most partitions have streams to plan. The tests read the leases from the
store (``partition_list``), each instance's ``/status`` over HTTP, and the history:

* a third instance joining, and then one stopping (SIGTERM), rebalance the partitions to
  the bounded assignment of :func:`soloist.runtime.partitions.assign`, quickly, and every
  (scope, second) still succeeds exactly once;
* the partitions of a holder killed with kill -9 get new holders, with higher epochs,
  within the lease TTL + 2 s, and no instant is lost or doubled;
* so do those of a holder frozen with SIGSTOP past its leases; woken, it takes a share
  back under newer epochs, and nothing it did meanwhile plans or runs anything twice;
* two instances that disagree on the partition count both refuse to plan and say why,
  nothing is planned meanwhile, and planning resumes once the odd one stops;
* instances of two apps defining different jobs on one store plan shared, not by
  partitions, and each app's every (scope, second) is still planned and run once.
"""

from __future__ import annotations

import functools
import json
import math
import signal
import socket
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from soloist.config import DEFAULT_LEASE_TTL
from soloist.models import Occurrence, PartitionLease, State
from soloist.runtime.partitions import assign

from .cluster import Cluster, Instance, wait_for
from .history import now

pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(150)]

APP = "scoped_tick.py"
JOB = "fan"
SCOPES = [f"s{n:03d}" for n in range(200)]  # as apps/scoped_tick.py
COUNT = 64
TTL = DEFAULT_LEASE_TTL.total_seconds()
#: The lease TTL of the SIGSTOP test, so that a freeze past it lasts seconds, not ten.
FROZEN_TTL = 4.0
#: How soon a SIGTERM'd instance's partitions have new holders: it releases them at once
#: and the others take them at their next poll (0.5 s); the rest is room for a loaded
#: machine (partitions left to expire would take the TTL, 10 s).
AFTER_TERM_S = 3.0
#: How far back a skipped second's scope is searched for the run that overlapped it.
OVERLAP_LOOKBACK = timedelta(seconds=30)
#: Enough for every occurrence a test makes (200 a second).
LIMIT = 100_000


# -- helpers ------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start(cluster: Cluster, *iids: str, **env: str) -> dict[str, tuple[Instance, int]]:
    """Start instances of the app, each serving ``/status`` on a port of its own; wait
    until each has started. Returns each instance and its port, by id."""
    started = {}
    for iid in iids:
        port = free_port()
        instance = cluster.start(APP, iid, SOLOIST_HTTP=f"127.0.0.1:{port}", **env)
        started[iid] = (instance, port)
    for instance, _ in started.values():
        wait_for(functools.partial(_started, instance), 20, f"{instance.iid} to start")
    return started


def _started(instance: Instance) -> bool:
    assert instance.alive, f"{instance.iid} exited early; its log:\n{instance.log()}"
    return f"instance {instance.iid} started" in instance.log()


def status(port: int) -> dict[str, Any]:
    """An instance's ``GET /status``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as answer:
        report: dict[str, Any] = json.loads(answer.read())
        return report


def reports_held(port: int, partitions: list[int]) -> dict[str, Any] | None:
    """The ``partitions`` part of an instance's ``/status`` once it holds ``partitions``."""
    report: dict[str, Any] = status(port)["partitions"]
    return report if report["held"] == partitions else None


def holders(cluster: Cluster) -> dict[int, PartitionLease]:
    return {lease.partition: lease for lease in cluster.partitions()}


def balanced(cluster: Cluster, live: set[str]) -> dict[int, PartitionLease] | None:
    """The leases once every partition is held, only by ``live`` instances, none holding
    more than ``ceil(count / live)``; else None."""
    leases = holders(cluster)
    held = Counter(lease.holder for lease in leases.values())
    cap = math.ceil(COUNT / len(live))
    if sorted(leases) != list(range(COUNT)) or set(held) != live or max(held.values()) > cap:
        return None
    return leases


def assert_assignment(leases: dict[int, PartitionLease], live: set[str]) -> None:
    """Each instance holds exactly the partitions :func:`assign` gives it."""
    expected = assign(sorted(live), COUNT)
    got: dict[str, list[int]] = {iid: [] for iid in live}
    for partition, lease in sorted(leases.items()):
        got[lease.holder].append(partition)
    assert got == expected
    # At most ceil(count / live) each, so the others have at least what is left.
    cap = math.ceil(COUNT / len(live))
    least = COUNT - (len(live) - 1) * cap
    assert all(least <= len(parts) <= cap for parts in got.values()), got


def whole_second_after(moment: datetime) -> datetime:
    return moment.replace(microsecond=0) + timedelta(seconds=1)


def wait_until_moment(moment: datetime) -> None:
    wait_for(lambda: now() > moment, (moment - now()).total_seconds() + 5, f"time {moment}")


def history(cluster: Cluster) -> list[Occurrence]:
    return cluster.history(JOB, limit=LIMIT)


def window_done(cluster: Cluster, start: datetime, until: datetime) -> Callable[[], bool]:
    """Whether every occurrence planned in [start, until] has an outcome, and there are at
    least as many as (scope, second) pairs in it."""
    seconds = int((until - start).total_seconds()) + 1

    def done() -> bool:
        window = [o for o in history(cluster) if start <= o.plan_time <= until]
        return len(window) >= len(SCOPES) * seconds and all(o.state.is_terminal for o in window)

    return done


def assert_each_scope_second_once(
    cluster: Cluster, start: datetime, until: datetime, *, overlapped: bool = False
) -> list[Occurrence]:
    """Every (scope, whole second) in [start, until] was planned exactly once, none missing,
    and succeeded (or, for a scope whose run a kill -9 cut, was skipped by the default
    overlap policy while that run awaited its rerun); no (scope, second) was planned twice
    anywhere in the history, and every cut run ran again to success.

    ``overlapped``: also accept a second skipped while an earlier second of its scope was
    really running at its due time (an attempt in the audit log spans it): the default
    overlap policy at work when a run is frozen, or a backlog of due seconds runs into the
    next."""
    # Wait for the runs to finish; if they never do, the checks below say what is wrong.
    done, deadline = window_done(cluster, start, until), time.monotonic() + 20
    while not done() and time.monotonic() < deadline:
        time.sleep(0.5)
    occurrences = history(cluster)
    doubled = [k for k, n in Counter((o.scope, o.plan_time) for o in occurrences).items() if n > 1]
    assert doubled == [], f"planned twice: {doubled[:10]}"
    seconds = int((until - start).total_seconds()) + 1
    instants = [start + timedelta(seconds=k) for k in range(seconds)]
    expected = {(scope, t) for scope in SCOPES for t in instants}
    window = [o for o in occurrences if start <= o.plan_time <= until]
    got = {(o.scope, o.plan_time) for o in window}
    missing, extra = sorted(expected - got), sorted(got - expected)
    assert (missing, extra) == ([], []), (
        f"{len(missing)} missing {missing[:10]}, {len(extra)} extra {extra[:10]}"
    )
    # At the default overlap (skip), a run cut by kill -9 stays "running" until it is reaped
    # (and run again: a crash spends no attempt), and the seconds of that scope due
    # meanwhile are recorded as skipped. Nothing else may be anything but succeeded.
    crashed = {o.scope for o in occurrences if o.crashes > 0}

    def was_running_at_due(skipped: Occurrence) -> bool:
        earlier = [
            o
            for o in occurrences
            if o.scope == skipped.scope
            and skipped.plan_time - OVERLAP_LOOKBACK <= o.plan_time < skipped.plan_time
        ]
        return any(
            run.started_at is not None and run.started_at <= skipped.due_at <= run.finished_at
            for o in earlier
            for run in cluster.attempts(o.id)
        )

    not_ok = [
        (o.scope, o.plan_time, o.state.value, o.error_message)
        for o in window
        if o.state is not State.SUCCEEDED
        and not (
            o.state is State.SKIPPED
            and (o.scope in crashed or (overlapped and was_running_at_due(o)))
        )
    ]
    assert not_ok == [], not_ok[:10]
    unfinished = [o for o in occurrences if o.crashes > 0 and o.state is not State.SUCCEEDED]
    assert unfinished == [], f"a run cut by kill -9 was not run again: {unfinished[:5]}"
    return window


# -- the tests ----------------------------------------------------------------------------------
def test_joining_and_stopping_rebalance_and_plan_each_instant_once(
    server_cluster: Cluster,
) -> None:
    """2 instances, then a 3rd joins: within a few seconds every partition has one holder
    and each instance holds what the bounded assignment gives it (at most 22 of 64); a
    SIGTERM'd instance's partitions move within 3 s; every (scope, second) of the whole
    window succeeded exactly once."""
    cluster = server_cluster
    instances = start(cluster, "a", "b")
    leases = wait_for(lambda: balanced(cluster, {"a", "b"}), 10, "a and b to share 64")
    assert_assignment(leases, {"a", "b"})
    first = whole_second_after(now())

    joined_at = time.monotonic()
    instances |= start(cluster, "c")
    leases = wait_for(lambda: balanced(cluster, {"a", "b", "c"}), 10, "a, b, c to share")
    joined_in = time.monotonic() - joined_at
    assert_assignment(leases, {"a", "b", "c"})
    # Each instance's own view agrees with the store: it holds what the store says.
    for iid, (_, port) in instances.items():
        mine = sorted(p for p, lease in holders(cluster).items() if lease.holder == iid)
        report = wait_for(
            functools.partial(reports_held, port, mine), 3, f"{iid}'s /status to show {mine}"
        )
        assert report["count"] == COUNT and report["refusal"] is None, report
    assert joined_in < 8, f"rebalance after the join took {joined_in:.1f}s"
    wait_until_moment(now() + timedelta(seconds=2))

    leaving, _ = instances["b"]
    leaving.send(signal.SIGTERM)
    termed_at = time.monotonic()
    leases = wait_for(lambda: balanced(cluster, {"a", "c"}), 10, "a and c to take b's share")
    moved_in = time.monotonic() - termed_at
    assert_assignment(leases, {"a", "c"})
    assert moved_in <= AFTER_TERM_S, f"b's partitions moved {moved_in:.1f}s after SIGTERM"
    assert leaving.wait(15) == 0

    until = whole_second_after(now()) + timedelta(seconds=2)
    wait_until_moment(until + timedelta(seconds=1))
    window = assert_each_scope_second_once(cluster, first, until)
    runners = {o.instance_id for o in window}
    assert {"a", "b", "c"} <= runners, runners


def test_kill9_of_a_holder_moves_its_partitions_within_ttl_and_loses_no_instant(
    server_cluster: Cluster,
) -> None:
    """3 instances; kill -9 of one: every partition it held has a new holder, with a higher
    epoch, within the lease TTL + 2 s; each (scope, second) across the kill succeeded
    exactly once (late is fine, lost or doubled is not)."""
    cluster = server_cluster
    instances = start(cluster, "a", "b", "c")
    wait_for(lambda: balanced(cluster, {"a", "b", "c"}), 10, "a, b, c to share")
    first = whole_second_after(now())
    wait_until_moment(first + timedelta(seconds=2))

    before = wait_for(lambda: balanced(cluster, {"a", "b", "c"}), 5, "the share to hold")
    assert_assignment(before, {"a", "b", "c"})
    victim, _ = instances["b"]
    lost = {p: lease for p, lease in before.items() if lease.holder == "b"}
    assert lost, "b holds no partition"
    victim.send(signal.SIGKILL)
    killed_at = time.monotonic()
    victim.wait(15)

    def taken_over() -> dict[int, PartitionLease] | None:
        leases = holders(cluster)
        mine = {p: leases.get(p) for p in lost}
        if any(lease is None or lease.holder == "b" for lease in mine.values()):
            return None
        return leases

    after = wait_for(taken_over, TTL + 10, "b's partitions to get new holders")
    took = time.monotonic() - killed_at
    assert took <= TTL + 2, f"b's partitions got new holders {took:.1f}s after kill -9"
    lower = {p: (lost[p].epoch, after[p].epoch) for p in lost if after[p].epoch <= lost[p].epoch}
    assert lower == {}, f"epochs did not rise (old, new): {lower}"
    assert {after[p].holder for p in lost} <= {"a", "c"}
    leases = wait_for(lambda: balanced(cluster, {"a", "c"}), 10, "a and c to share all 64")
    assert_assignment(leases, {"a", "c"})

    until = whole_second_after(now()) + timedelta(seconds=1)
    wait_until_moment(until + timedelta(seconds=1))
    # The takeover plans b's missed seconds at once: on a loaded box that backlog can run
    # into the next second of a scope, which the default overlap policy then skips (the
    # audit log must show the earlier run spanning its due time).
    window = assert_each_scope_second_once(cluster, first, until, overlapped=True)
    assert {o.instance_id for o in window} >= {"a", "c"}
    for iid in ("a", "c"):
        instances[iid][0].send(signal.SIGTERM)
    assert all(instances[iid][0].wait(15) == 0 for iid in ("a", "c"))


# On etcd, whose partition leases are also etcd leases; on the other stores a frozen
# partition holder is the chaos suite's sigstop scenario (distributed mode, long form).
@pytest.mark.parametrize("store_cluster", ["etcd"], indirect=True)
def test_sigstop_of_a_holder_past_its_leases_moves_its_partitions_and_fences_it_out(
    store_cluster: Cluster,
) -> None:
    """3 instances (lease TTL 4 s); SIGSTOP of one until every partition it held has a new
    holder, with a higher epoch, within the TTL + 2 s, and the runs it held were taken
    over; then SIGCONT: its late outcomes are fenced out, it takes a share back under newer
    epochs, and each (scope, second) across the freeze and its return was planned exactly
    once and succeeded, or was skipped while an earlier second of its scope really ran."""
    cluster = store_cluster
    instances = start(cluster, "a", "b", "c", SOLOIST_LEASE_TTL=f"{FROZEN_TTL:g}s")
    wait_for(lambda: balanced(cluster, {"a", "b", "c"}), 10, "a, b, c to share")
    first = whole_second_after(now())
    wait_until_moment(first + timedelta(seconds=2))

    before = wait_for(lambda: balanced(cluster, {"a", "b", "c"}), 5, "the share to hold")
    victim, _ = instances["b"]
    lost = {p: lease for p, lease in before.items() if lease.holder == "b"}
    assert lost, "b holds no partition"
    victim.send(signal.SIGSTOP)
    frozen_at = time.monotonic()

    def taken_over() -> dict[int, PartitionLease] | None:
        leases = holders(cluster)
        if any(p not in leases or leases[p].holder == "b" for p in lost):
            return None
        return leases

    def runs_taken_over() -> bool:
        current = {o.id: cluster.get(o.id) for o in held}
        return all(
            current[o.id].state is not State.RUNNING
            or current[o.id].fencing_token > o.fencing_token
            for o in held
        )

    try:
        after = wait_for(taken_over, FROZEN_TTL + 10, "b's partitions to get new holders")
        took = time.monotonic() - frozen_at
        # Read once b's last writes have landed: what it still holds it holds frozen.
        held = [o for o in history(cluster) if o.state is State.RUNNING and o.instance_id == "b"]
        wait_for(runs_taken_over, FROZEN_TTL + 10, "b's runs to be taken over")
    finally:
        victim.send(signal.SIGCONT)
    print(f"froze b for {time.monotonic() - frozen_at:.1f}s; it held {len(held)} runs frozen")
    assert took <= FROZEN_TTL + 2, f"b's partitions got new holders {took:.1f}s after SIGSTOP"
    lower = {p: (lost[p].epoch, after[p].epoch) for p in lost if after[p].epoch <= lost[p].epoch}
    assert lower == {}, f"epochs did not rise (old, new): {lower}"
    assert {after[p].holder for p in lost} <= {"a", "c"}

    # Awake and live again, b is given a share by the bounded assignment and takes it from
    # the others, each partition under a newer epoch than the one it was taken over with.
    leases = wait_for(lambda: balanced(cluster, {"a", "b", "c"}), 15, "b to take a share back")
    assert_assignment(leases, {"a", "b", "c"})
    back = {p: (after[p].epoch, leases[p].epoch) for p in after if leases[p].holder == "b"}
    assert back and all(new > old for old, new in back.values()), back

    until = whole_second_after(now()) + timedelta(seconds=2)
    wait_until_moment(until + timedelta(seconds=1))
    window = assert_each_scope_second_once(cluster, first, until, overlapped=True)
    assert {o.instance_id for o in window} >= {"a", "b", "c"}
    # What b still held frozen was run again under a new claim, whose outcome stands: b's
    # own late outcome (under its old token) was fenced out.
    rerun = {o.id: cluster.get(o.id) for o in held}
    stale = [
        (o.scope, o.plan_time, rerun[o.id].state.value, rerun[o.id].fencing_token)
        for o in held
        if rerun[o.id].state is not State.SUCCEEDED or rerun[o.id].fencing_token <= o.fencing_token
    ]
    assert stale == [], f"b's frozen runs not run again under a new claim: {stale}"
    assert victim.alive
    for instance, _ in instances.values():
        instance.send(signal.SIGTERM)
    assert all(instance.wait(15) == 0 for instance, _ in instances.values())


def test_instances_disagreeing_on_the_count_refuse_to_plan_until_they_agree(
    server_cluster: Cluster,
) -> None:
    """One instance with 64 partitions and one with 32: both refuse to plan, each naming
    the other and its count in its log and /status; no occurrence is planned while they
    disagree; once the odd one stops, the other plans again within a few seconds."""
    cluster = server_cluster
    instances = start(cluster, "p64", SOLOIST_PARTITIONS="64")
    instances |= start(cluster, "p32", SOLOIST_PARTITIONS="32")
    (p64, port64), (p32, port32) = instances["p64"], instances["p32"]

    def refusing(port: int) -> dict[str, Any] | None:
        part: dict[str, Any] = status(port)["partitions"]
        return part if part["refusal"] is not None else None

    refused64 = wait_for(lambda: refusing(port64), 10, "p64 to refuse")
    refused32 = wait_for(lambda: refusing(port32), 10, "p32 to refuse")
    assert refused64["count"] == 64 and refused64["held"] == [], refused64
    assert refused32["count"] == 32 and refused32["held"] == [], refused32
    assert "p32 has 32" in refused64["refusal"], refused64
    assert "p64 has 64" in refused32["refusal"], refused32
    for instance, other in ((p64, "p32 has 32"), (p32, "p64 has 64")):
        lines = [line for line in instance.log().splitlines() if "partitions_disagree" in line]
        assert lines and all(other in line for line in lines), instance.log()
        assert all("WARNING" in line for line in lines), lines

    # Once no partition is held, no plan write can pass its fence: from then on, nothing new.
    wait_for(lambda: cluster.partitions() == [], TTL + 5, "every partition to be released")
    planned = len(history(cluster))
    quiet_until = now() + timedelta(seconds=4)
    while now() < quiet_until:
        assert len(history(cluster)) == planned, "an occurrence was planned while refusing"
        assert refusing(port64) and refusing(port32)
        assert cluster.partitions() == []
        time.sleep(0.5)

    p32.send(signal.SIGTERM)
    assert p32.wait(15) == 0
    stopped_at = time.monotonic()
    wait_for(lambda: len(history(cluster)) > planned, 5, "p64 to plan again")
    resumed_in = time.monotonic() - stopped_at
    assert resumed_in <= 3, f"p64 planned again {resumed_in:.1f}s after p32 stopped"
    report = wait_for(
        functools.partial(reports_held, port64, list(range(COUNT))), 5, "p64 to hold all 64"
    )
    assert report["refusal"] is None, report
    agreed = [line for line in p64.log().splitlines() if "partitions_agree" in line]
    assert agreed, p64.log()


def test_instances_defining_different_jobs_plan_shared_and_lose_nothing(
    server_cluster: Cluster,
) -> None:
    """An instance of scoped_tick.py (job ``fan``, 200 scopes) and one of other_tick.py
    (job ``other``) share a store: a partition's holder could not plan the other app's
    streams, so they plan shared (and say so), and every (scope, second) of ``fan`` in a
    window is planned once and succeeds, as is every second of ``other``."""
    cluster = server_cluster
    fan = start(cluster, "fan-1")
    port = free_port()
    other = cluster.start("other_tick.py", "other-1", SOLOIST_HTTP=f"127.0.0.1:{port}")
    wait_for(functools.partial(_started, other), 20, "other-1 to start")

    def shared(port: int) -> dict[str, Any] | None:
        report = status(port)["partitions"]
        return report if report["shared"] else None

    wait_for(lambda: shared(fan["fan-1"][1]) and shared(port), 10, "both to plan shared")
    assert "define different jobs or tasks" in shared(port)["shared"]  # type: ignore[index]
    assert any(
        "partitions_shared" in line or "planning shared" in line
        for line in fan["fan-1"][0].log().splitlines()
    )
    first = whole_second_after(now() + timedelta(seconds=1))
    until = first + timedelta(seconds=5)
    wait_until_moment(until + timedelta(seconds=2))
    assert_each_scope_second_once(cluster, first, until)
    others = [o for o in cluster.history("other", limit=1000) if first <= o.plan_time <= until]
    assert sorted(o.plan_time for o in others) == [
        first + timedelta(seconds=k) for k in range(6)
    ], others
    assert all(o.state is State.SUCCEEDED for o in others), others
    for instance in (fan["fan-1"][0], other):
        instance.send(signal.SIGTERM)
        assert instance.wait(15) == 0
