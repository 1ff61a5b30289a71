"""A Redis server that dies mid-run (kill -9) and comes back: instances log, back off,
reconnect and carry on, and nothing acknowledged before the outage is lost.

The test starts its own throwaway ``redis-server`` (append-only file, fsync on every write,
so an acknowledged write survives the crash), runs two instances against it, kills the
server, restarts it on the same port and data directory a few seconds later, and checks
the history: every second ran exactly once, including the seconds planned while the
server was down, and every task queued before the outage succeeded once.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from soloist.models import State

from .cluster import Cluster, wait_for
from .history import assert_each_second_once, now, settled

pytestmark = pytest.mark.acceptance

APP = "outage.py"
OUTAGE_S = 3.0


class RedisServer:
    """A ``redis-server`` process of this test's own, restartable on the same port and
    data directory."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.dir = workdir / "redis"
        self.dir.mkdir()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.dir)]
        log = open(self.dir / "server.log", "ab")  # noqa: SIM115 - the process keeps it
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        wait_for(self.answers, 10, "redis-server to answer PING")

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed: this test starts and kills its own server")
    server = RedisServer(binary, tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_instances_ride_out_a_redis_crash_and_lose_nothing_acknowledged(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """kill -9 of the Redis server for 3 s, then a restart from its append-only file: both
    instances log the failure, reconnect without a restart of their own, every second
    (also those planned while the server was down) succeeded exactly once, and each task
    queued before the outage succeeded once; `soloist history` lists that record."""
    url = f"redis://127.0.0.1:{redis_server.port}/0?prefix=outage-{uuid.uuid4().hex[:8]}"
    cluster = Cluster(tmp_path, url)
    try:
        a, b = cluster.start_all(APP, "a", "b")
        wait_for(lambda: len(cluster.history("tick")) >= 3, 20, "a few ticks")
        # Acknowledged before the outage: due before, during and after it.
        queued = [cluster.enqueue(APP, "record", n=n) for n in range(6)]
        wait_for(lambda: settled(cluster.history("tick"), minimum=3), 20, "ticks to settle")

        redis_server.kill()
        down_at = now()
        wait_for(lambda: now() - down_at >= timedelta(seconds=OUTAGE_S), 10, "the outage")
        redis_server.start()
        back_at = now()

        # Carrying on: ticks planned after the restart succeed, and the gap is filled.
        wait_for(
            lambda: (
                settled(h := cluster.history("tick"), minimum=3)
                and max(o.plan_time for o in h) > back_at + timedelta(seconds=3)
            ),
            40,
            "ticks after the restart to succeed",
        )
        for occ_id in queued:
            wait_for(lambda i=occ_id: cluster.get(i).state is State.SUCCEEDED, 20, "tasks")
        assert a.alive and b.alive, "an instance died with the store"

        stop = now()
        for instance in (a, b):
            instance.send(signal.SIGTERM)
        assert a.wait(15) == 0 and b.wait(15) == 0
        history = cluster.history("tick")
        assert_each_second_once(history, stop - timedelta(seconds=2))
        assert any(o.plan_time > down_at and o.plan_time < back_at for o in history)
        results = sorted(cluster.get(i).result for i in queued)
        assert results == list(range(6))
        # `soloist history` reads the same record from Redis.
        out = cluster.soloist("history", "--job", "tick", "--limit", "10000", "--json")
        listed = {json.loads(line)["id"] for line in out.splitlines() if line.strip()}
        assert listed == {o.id for o in history}
        for instance in (a, b):
            assert "retrying in" in instance.log(), f"{instance.iid} did not log the failure"
    finally:
        cluster.close()
