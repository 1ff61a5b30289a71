"""A store restart mid-drain, default options: nothing is lost, nothing runs twice.

The test starts a server of its own: a PostgreSQL cluster (initdb, restarted with
``pg_ctl restart -m fast``, which closes every connection), a ``redis-server`` with the
append-only file fsynced on every write, or a one-member etcd (which fsyncs its log before
it acknowledges a write); Redis and etcd are restarted by SIGTERM and a new process on the
same port and data directory (in the long form also by SIGKILL). Two instances drain tasks
fed at a steady rate, and run the every-second job; the server restarts in the middle.
The outage is shorter than the lease TTL (6 s here), so no lease may expire: every outcome
is written once the server is back, every figure is 0, doubled completions included.
"""

from __future__ import annotations

import time
import uuid

import pytest

from .harness import ChaosCluster, scaled
from .servers import EtcdProcess, PostgresServer, RedisServer

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(scaled(150, 300))]

TASKS = scaled(200, 600)
RATE = 40
#: Longer than a restart takes, so that the restart alone never expires a lease.
TTL = "6s"


def _restart_mid_drain(cluster: ChaosCluster, restart, times: int) -> None:  # type: ignore[no-untyped-def]
    cluster.start_all("a", "b")
    cluster.enqueue_tasks(TASKS, (0.05, 0.25), rate=RATE)
    for k in range(times):
        # Mid-drain: a share of the tasks has succeeded, and tasks are running.
        share = (k + 1) / (times + 2)
        cluster.wait_until_done(share)
        began = time.monotonic()
        restart(k)
        print(f"restart {k + 1} took {time.monotonic() - began:.1f}s")
        assert cluster.unsettled_tasks(), "the drain ended before the restart: make it longer"
    cluster.finish()


@pytest.mark.parametrize("times", [pytest.param(scaled(1, 2), id="restart")])
def test_postgres_restart_mid_drain(
    own_postgres: PostgresServer, cluster_factory, times: int
) -> None:  # type: ignore[no-untyped-def]
    """pg_ctl restart of the store's server while two instances drain tasks: every figure
    is 0."""
    url = f"{own_postgres.url}?schema=chaos_{uuid.uuid4().hex[:8]}"
    cluster: ChaosCluster = cluster_factory(url, "restart[postgres]", ttl=TTL)
    _restart_mid_drain(cluster, lambda _k: own_postgres.restart(), times)


@pytest.mark.quick
@pytest.mark.parametrize("times", [pytest.param(scaled(1, 2), id="restart")])
def test_redis_restart_mid_drain(own_redis: RedisServer, cluster_factory, times: int) -> None:  # type: ignore[no-untyped-def]
    """redis-server (append-only, fsync always) restarted while two instances drain tasks
    (the long form: once by SIGTERM, once by SIGKILL): every figure is 0."""
    url = f"{own_redis.url}?prefix=chaos-{uuid.uuid4().hex[:8]}"
    cluster: ChaosCluster = cluster_factory(url, "restart[redis]", ttl=TTL)
    _restart_mid_drain(cluster, lambda k: own_redis.restart(hard=k % 2 == 1), times)


@pytest.mark.quick
@pytest.mark.parametrize("times", [pytest.param(scaled(1, 2), id="restart")])
def test_etcd_restart_mid_drain(own_etcd: EtcdProcess, cluster_factory, times: int) -> None:  # type: ignore[no-untyped-def]
    """The etcd member restarted on its data directory while two instances drain tasks
    (the long form: once by SIGTERM, once by SIGKILL): every figure is 0."""
    url = f"{own_etcd.url}?prefix=chaos-{uuid.uuid4().hex[:8]}"
    cluster: ChaosCluster = cluster_factory(url, "restart[etcd]", ttl=TTL)
    _restart_mid_drain(cluster, lambda k: own_etcd.restart(hard=k % 2 == 1), times)
