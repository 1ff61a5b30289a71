"""SIGSTOP of a runner past its lease, then SIGCONT, default options: nothing is lost.

Three instances drain sync and async tasks fed at a steady rate, and run the every-second
job. One of them, while it holds several running tasks, is frozen with SIGSTOP (on SQLite
at a moment when it holds no write lock, which would stall every process on the file) and
left frozen until every one of its runs has been reaped and taken by another instance.
Then it is woken with SIGCONT: whatever it still reports is fenced out, and it carries on
as a healthy instance. A sync handler that had finished its side effect when the freeze
landed, or that finishes it after waking, has then run twice: those doubled completions
are counted and bounded by the instance's slots; no other figure may be above 0.

In leader mode the leader is frozen right after a run of the every-second job, until
another instance leads and has taken over the runs it held; woken, it must neither plan
nor record anything under the leadership it lost: every second is planned and run once
(the seconds due while no one led by the next leader).
"""

from __future__ import annotations

import signal

import pytest

from acceptance.cluster import wait_for

from .harness import CONCURRENCY, ChaosCluster, scaled

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(scaled(150, 300))]

RATE = 10
STORES = [
    pytest.param("sqlite", marks=pytest.mark.quick),
    pytest.param("postgres"),
    pytest.param("redis"),
    pytest.param("etcd"),
]


@pytest.mark.parametrize("store", STORES)
def test_sigstop_past_the_lease_loses_nothing(store: str, store_url, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    """SIGSTOP of an instance holding running tasks until another has taken them over,
    then SIGCONT: no task, outcome or instant is lost, and only the frozen runs complete
    twice."""
    cluster: ChaosCluster = cluster_factory(store_url(store), f"sigstop[{store}]")
    alive = cluster.start_all("a", "b", "c")
    cluster.enqueue_tasks(scaled(40, 160), (0.5, 2.0), rate=RATE)
    for _ in range(scaled(1, 2)):
        victim, held = cluster.busiest(alive, minimum=3)
        if store == "sqlite":
            cluster.freeze(victim)
        else:
            victim.send(signal.SIGSTOP)
        cluster.faults += 1
        wait_for(lambda h=held: cluster.taken_over(h), 30, "the frozen runs to be taken over")
        print(f"froze {victim.iid} holding {len(held)} running tasks, until taken over")
        victim.send(signal.SIGCONT)
        assert victim.alive
    cluster.finish(allowed_doubles=cluster.faults * CONCURRENCY)


@pytest.mark.parametrize("store", ["sqlite", "postgres", "redis", "etcd"])
def test_sigstop_of_the_leader_past_its_lease_misses_no_instant(  # type: ignore[no-untyped-def]
    store: str, store_url, cluster_factory
) -> None:
    """Leader mode: SIGSTOP of the leader right after a run of the every-second job, until
    another instance leads and the frozen one's runs are taken over, then SIGCONT: no
    second is missing or doubled, no task or outcome is lost, and only the frozen runs
    complete twice."""
    cluster: ChaosCluster = cluster_factory(
        store_url(store), f"sigstop-leader[{store}]", mode="leader"
    )
    cluster.start_all("a", "b", "c")
    cluster.enqueue_tasks(scaled(20, 60), (0.2, 1.0), rate=5)
    for _ in range(scaled(1, 2)):
        leader = cluster.leader_after_a_run()
        victim = cluster.by_id(leader)
        if store == "sqlite":
            cluster.freeze(victim)
        else:
            victim.send(signal.SIGSTOP)
        cluster.faults += 1
        successor = wait_for(
            lambda old=leader: (iid := cluster.status()["leader_id"]) not in (None, old) and iid,
            20,
            "another leader",
        )
        held = cluster.running_on(leader)
        wait_for(lambda h=held: cluster.taken_over(h), 30, "the frozen runs to be taken over")
        victim.send(signal.SIGCONT)
        print(f"froze the leader {leader} holding {len(held)} running tasks; {successor} leads")
        assert victim.alive
    cluster.finish(allowed_doubles=cluster.faults * CONCURRENCY, min_run=scaled(12, 20))
