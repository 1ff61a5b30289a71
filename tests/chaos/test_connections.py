"""Store connections terminated during a drain, default options: nothing is lost, nothing
runs twice.

Two instances drain a few hundred tasks fed at a steady rate (and run the every-second
job) while the test
cuts their store connections several times a second: PostgreSQL's
``pg_terminate_backend`` on every backend of the instances (found by their
``application_name``), Redis' ``CLIENT KILL`` of every normal and pub/sub client (on a
server of the test's own). No process dies and no cut lasts: every outcome must be
written (retried until the lease deadline), no lease may expire, so every figure is 0,
doubled completions included.
"""

from __future__ import annotations

import time
import uuid

import pytest

from .harness import ChaosCluster, scaled

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(scaled(150, 300))]

#: Cuts per second, and for how long.
CUTS_PER_S = 4
CUT_FOR_S = scaled(6.0, 15.0)
TASKS = scaled(400, 1000)
#: Fed at this rate (tasks of 0.05-0.25 s keep about 8 of the 20 slots busy), so that the
#: drain lasts longer than the cuts and the every-second job always finds a free slot.
RATE = 50


def _cut_repeatedly(cut) -> int:  # type: ignore[no-untyped-def]
    """Call ``cut()`` CUTS_PER_S times a second for CUT_FOR_S; return how many connections
    it ended."""
    ended = 0
    stop = time.monotonic() + CUT_FOR_S
    while time.monotonic() < stop:
        ended += cut()
        time.sleep(1 / CUTS_PER_S)  # the fault's rhythm; correctness waits have deadlines
    return ended


@pytest.mark.quick
def test_pg_terminate_backend_during_a_drain(  # type: ignore[no-untyped-def]
    postgres_dsn: str, make_postgres_url, cluster_factory
) -> None:
    """pg_terminate_backend of the instances' connections 4 times a second for 6 s while
    two instances drain 400 tasks fed at 50 a second: every figure is 0."""
    import psycopg

    url = make_postgres_url()
    name = f"chaos_{uuid.uuid4().hex[:12]}"
    cluster: ChaosCluster = cluster_factory(url, "terminate[postgres]")
    cluster.start_all("a", "b", url=f"{url}&application_name={name}")
    cluster.enqueue_tasks(TASKS, (0.05, 0.25), rate=RATE)

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:

        def cut() -> int:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = %s AND pid <> pg_backend_pid()",
                (name,),
            ).fetchone()
            return int(row[0]) if row else 0

        ended = _cut_repeatedly(cut)
    print(f"terminated {ended} backends")
    assert ended > 0, "no backend of the instances was terminated: the fault did not apply"
    assert cluster.unsettled_tasks(), "the drain ended before the cuts did: make it longer"
    cluster.finish()


def test_redis_client_kill_during_a_drain(own_redis, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    """CLIENT KILL of every client 4 times a second for 6 s while two instances drain 400
    tasks fed at 50 a second: every figure is 0."""
    import redis

    url = f"{own_redis.url}?prefix=chaos-{uuid.uuid4().hex[:8]}"
    cluster: ChaosCluster = cluster_factory(url, "client-kill[redis]")
    cluster.start_all("a", "b")
    cluster.enqueue_tasks(TASKS, (0.05, 0.25), rate=RATE)

    with redis.Redis(port=own_redis.port) as client:

        def cut() -> int:
            normal = client.execute_command("CLIENT KILL TYPE normal SKIPME yes")
            pubsub = client.execute_command("CLIENT KILL TYPE pubsub")
            return int(normal) + int(pubsub)

        ended = _cut_repeatedly(cut)
    print(f"killed {ended} client connections")
    assert ended > 0, "no client was killed: the fault did not apply"
    assert cluster.unsettled_tasks(), "the drain ended before the cuts did: make it longer"
    cluster.finish()
