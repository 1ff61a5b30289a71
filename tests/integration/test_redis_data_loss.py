"""A Redis server that loses soloist's data under a running scheduler, restarted without
persistence or flushed, is noticed: an ERROR names the cause, the metric counts it,
/readyz and /status report it, and the schema and the jobs defined in code are back.

Each test starts its own ``redis-server`` (no persistence), so restarting or flushing it
disturbs nothing else."""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from ci import missing
from soloist import Scheduler, every
from soloist.context import JobContext
from soloist.http import create_app
from soloist.stores.redis import SCHEMA_VERSION

PROMPTLY = 20.0


class PrivateRedis:
    """A ``redis-server`` of this test's own without persistence, restartable on its port."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.dir = workdir
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "no", "--dir", str(self.dir)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "the private redis-server did not answer"
                time.sleep(0.05)
        client.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[PrivateRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        reason = "REDIS SERVER TESTS NOT RUN: these start their own redis-server; none in PATH"
        missing(reason)
    private = PrivateRedis(binary, tmp_path)
    private.start()
    try:
        yield private
    finally:
        private.stop()


class Running:
    def __init__(self, app: Scheduler, client: httpx.AsyncClient, raw: redis.Redis, base: str):
        self.app = app
        self.client = client
        self.raw = raw
        self.base = base

    def key(self, name: str) -> str:
        return f"{self.base}:{name}"

    async def until(self, probe: Callable[[], Any], what: str) -> Any:
        deadline = asyncio.get_running_loop().time() + PROMPTLY
        while not (value := await probe()):
            assert asyncio.get_running_loop().time() < deadline, f"timed out: {what}"
            await asyncio.sleep(0.05)
        return value

    async def lost_count(self) -> float:
        text = (await self.client.get("/metrics")).text
        for line in text.splitlines():
            if line.startswith("soloist_store_data_lost_total "):
                return float(line.split()[1])
        raise AssertionError("soloist_store_data_lost_total is not exposed")

    async def set_up_again(self, count: int) -> dict[str, Any]:
        """Wait until the loss number ``count`` was reported and the store set up again."""

        async def done() -> dict[str, Any] | None:
            answer = await self.client.get("/status")
            if answer.status_code != 200:
                return None  # the store does not answer yet (restarting)
            lost = answer.json()["store_data_lost"]
            ok = lost is not None and lost["count"] == count and lost["set_up_again"]
            return dict(lost) if ok else None

        return dict(await self.until(done, f"data loss {count} reported and set up again"))


@pytest.fixture
async def running(server: PrivateRedis) -> AsyncIterator[Running]:
    prefix = f"loss-{uuid.uuid4().hex[:8]}"
    app = Scheduler(
        f"{server.url}?prefix={prefix}", instance_id="r1", lease_ttl="2s", heartbeat="0.3s"
    )

    @app.job(every("1h"))
    def hourly(ctx: JobContext) -> None:
        pass

    transport = httpx.ASGITransport(app=create_app(app))
    client = httpx.AsyncClient(transport=transport, base_url="http://test")
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    await app.start()
    try:
        running = Running(app, client, raw, "{" + prefix + "}")

        async def leading() -> bool:
            return app.is_leader

        await running.until(leading, "leadership")
        yield running
    finally:
        await client.aclose()
        await app.stop()
        raw.close()


async def check_recovered(
    r: Running, caplog: pytest.LogCaptureFixture, old_identity: str, count: int
) -> None:
    lost = await r.set_up_again(count)
    assert "identity key missing: restarted without persistence or flushed" in lost["error"]
    errors = [rec for rec in caplog.records if getattr(rec, "action", "") == "store_data_lost"]
    assert len(errors) == 1 and errors[0].levelno == logging.ERROR
    message = errors[0].getMessage()
    assert (
        f"the Redis store at redis://127.0.0.1:{r.raw.connection_pool.connection_kwargs['port']}/0"
        in message
    )
    assert "jobs, schedules, cursors and history written before are gone" in message
    assert await r.lost_count() == count
    ready = await r.client.get("/readyz")
    assert ready.status_code == 200 and "lost its data" in ready.json()["warnings"][0]
    # The schema is back with a new identity, and so is the job defined in code.
    assert r.raw.get(r.key("schema")) == str(SCHEMA_VERSION)
    new_identity = r.raw.get(r.key("identity"))
    assert new_identity is not None and new_identity != old_identity
    assert r.raw.hget(r.key("j:hourly"), "task") == "hourly"
    # The leader lost its lease with the data, says why, and is elected again.
    demoted = [rec for rec in caplog.records if getattr(rec, "action", "") == "lost_leadership"]
    assert len(demoted) == 1 and "the store lost its data" in demoted[0].getMessage()

    async def leading() -> bool:
        return r.app.is_leader and r.raw.hget(r.key("lead:soloist"), "holder") == "r1"

    await r.until(leading, "leadership on the emptied store")


async def test_a_restart_without_persistence_is_detected(
    server: PrivateRedis, running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    """The server restarts empty: one ERROR names the store and the cause, the metric
    and /status count it, /readyz warns, and schema, identity and jobs are back."""
    r = running
    identity = str(r.raw.get(r.key("identity")) or "")
    assert identity and await r.lost_count() == 0
    with caplog.at_level(logging.INFO, logger="soloist"):
        server.stop()
        server.start()
        await check_recovered(r, caplog, identity, 1)


async def test_a_flush_is_detected(
    server: PrivateRedis, running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    """FLUSHALL under a running scheduler: reported and set up again, as a restart."""
    r = running
    identity = str(r.raw.get(r.key("identity")) or "")
    assert identity
    with caplog.at_level(logging.INFO, logger="soloist"):
        r.raw.flushall()
        await check_recovered(r, caplog, identity, 1)
