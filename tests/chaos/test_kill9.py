"""kill -9 of an instance while its handlers run, default options: nothing is lost.

Three instances drain sync and async tasks (``retries=0``) fed at a steady rate, and run
the every-second job.
Once one of them holds several running tasks it is killed with SIGKILL (in the long form:
three times, a fresh instance replacing each victim). A killed runner's leases expire, the
occurrences are reaped and run again without spending a retry (a crash is not a failure),
so every task succeeds and every second runs. A handler killed after its side effect but
before its outcome write runs twice: those doubled completions are counted and bounded by
kills x slots; no other figure may be above 0.

In leader mode the leader is killed right after a run of the every-second job: the seconds
due while no instance leads (about a lease TTL) must all be planned by the next leader and
run once each, with the default options and with ``catch_up="all"``.
"""

from __future__ import annotations

import signal

import pytest

from acceptance.cluster import wait_for

from .harness import CONCURRENCY, ChaosCluster, scaled

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(scaled(150, 300))]

#: Tasks fed per second: about 14 of the 30 slots busy (20 after a kill).
RATE = 15
STORES = [
    pytest.param("sqlite", marks=pytest.mark.quick),
    pytest.param("postgres"),
    pytest.param("redis"),
    pytest.param("etcd"),
]


@pytest.mark.parametrize("store", STORES)
def test_kill9_mid_run_loses_nothing(store: str, store_url, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    """kill -9 of an instance holding running tasks: no task, outcome or instant is lost,
    and only the killed runs complete twice."""
    cluster: ChaosCluster = cluster_factory(store_url(store), f"kill9[{store}]")
    alive = cluster.start_all("a", "b", "c")
    cluster.enqueue_tasks(scaled(40, 240), (0.3, 1.5), rate=RATE)
    replacements = iter(("d", "e", "f"))
    for _ in range(scaled(1, 3)):
        victim, held = cluster.busiest(alive, minimum=3)
        victim.send(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        cluster.faults += 1
        alive.remove(victim)
        print(f"killed {victim.iid} holding {len(held)} running tasks")
        if len(cluster.unsettled_tasks()) > 3 * CONCURRENCY:
            alive += cluster.start_all(next(replacements))
    cluster.finish(allowed_doubles=cluster.faults * CONCURRENCY)


LEADER_CASES = [
    pytest.param(store, catch_up, id=f"{store}-{catch_up or 'default'}")
    for store in ("sqlite", "postgres", "redis", "etcd")
    for catch_up in (None, "all")
]


@pytest.mark.parametrize(("store", "catch_up"), LEADER_CASES)
def test_kill9_of_the_leader_misses_no_instant(  # type: ignore[no-untyped-def]
    store: str, catch_up: str | None, store_url, cluster_factory
) -> None:
    """Leader mode: kill -9 of the leader right after a run of the every-second job. The
    seconds due while no one led are planned by the next leader and each runs once, with
    the default options and with catch_up="all" (whose default overlap is queue)."""
    env = {"CHAOS_CATCH_UP": catch_up} if catch_up else {}
    name = f"kill9-leader[{store}-{catch_up or 'default'}]"
    cluster: ChaosCluster = cluster_factory(store_url(store), name, mode="leader")
    alive = cluster.start_all("a", "b", "c", **env)
    cluster.enqueue_tasks(scaled(20, 60), (0.2, 1.0), rate=5)
    for _ in range(scaled(1, 2)):
        leader = cluster.leader_after_a_run()
        victim = cluster.by_id(leader)
        victim.send(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        cluster.faults += 1
        alive.remove(victim)
        wait_for(
            lambda: cluster.status()["leader_id"] in {i.iid for i in alive}, 20, "a new leader"
        )
        print(f"killed the leader {leader}; {cluster.status()['leader_id']} leads")
    cluster.finish(allowed_doubles=cluster.faults * CONCURRENCY, min_run=scaled(12, 20))
