"""A store that reports it lost its data (StoreDataLostError): the runtime logs one ERROR
naming the cause, counts it, fails /readyz until the store is set up again (schema and
the jobs defined in code), then shows it as a warning and in /status."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from soloist import Scheduler, every
from soloist.context import JobContext
from soloist.errors import StoreDataLostError, StoreUnavailableError
from soloist.http import create_app
from soloist.models import InstanceInfo, JobRecord, LeaderLease
from soloist.stores.memory import MemoryStore

PROMPTLY = 10.0
CAUSE = "identity key missing: restarted without persistence or flushed"


class ForgetfulStore(MemoryStore):
    """A memory store that can play a store which lost its data: heartbeats and elections
    raise StoreDataLostError until ``migrate`` succeeds, and ``migrate`` fails while
    ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = False
        self.down = False
        self.migrations = 0
        self.upserts: list[list[str]] = []

    def _check(self) -> None:
        if self.lost:
            raise StoreDataLostError(
                f"the store lost its data ({CAUSE})", expected="id-1", found=None
            )

    async def migrate(self) -> list[int]:
        if self.down:
            raise StoreUnavailableError("connection refused")
        self.migrations += 1
        self.lost = False
        return await super().migrate()

    async def instance_heartbeat(
        self, info: InstanceInfo, ttl: timedelta, now: datetime | None = None
    ) -> None:
        self._check()
        await super().instance_heartbeat(info, ttl, now)

    async def leader_attempt_elect(
        self, name: str, instance_id: str, ttl: timedelta, now: datetime | None = None
    ) -> LeaderLease | None:
        self._check()
        return await super().leader_attempt_elect(name, instance_id, ttl, now)

    async def leader_renew(
        self,
        name: str,
        instance_id: str,
        epoch: int,
        ttl: timedelta,
        now: datetime | None = None,
    ) -> LeaderLease | None:
        self._check()
        return await super().leader_renew(name, instance_id, epoch, ttl, now)

    async def job_upsert(self, records: Any) -> None:
        self.upserts.append([r.name for r in records])
        await super().job_upsert(records)


async def until(probe: Callable[[], Any], what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + PROMPTLY
    while not (value := await probe()):
        assert asyncio.get_running_loop().time() < deadline, f"timed out: {what}"
        await asyncio.sleep(0.02)
    return value


async def test_a_lost_store_is_reported_once_and_set_up_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Registrar and elector both see the loss: one ERROR, one count; /readyz is 503 while
    the store cannot be set up, then 200 with a warning; the code's jobs are recorded
    again and the leader, which lost its lease with the data, is elected again."""
    store = ForgetfulStore()
    app = Scheduler(store, instance_id="i1", lease_ttl="2s", heartbeat="0.2s")

    @app.job(every("1h"))
    def hourly(ctx: JobContext) -> None:
        pass

    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(app)), base_url="http://t"
    )
    await app.start()
    try:
        await until(lambda: _true(app.is_leader), "leadership")
        assert (await client.get("/readyz")).json() == {"status": "ready"}
        upserts = len(store.upserts)
        with caplog.at_level(logging.INFO, logger="soloist"):
            store.down = True
            store.lost = True

            async def unready() -> bool:
                return (await client.get("/readyz")).status_code == 503

            await until(unready, "/readyz to fail")
            body = (await client.get("/readyz")).json()
            assert CAUSE in body["error"] and "not set up again yet" in body["error"]
            status = (await client.get("/status")).json()
            assert status["store_data_lost"]["set_up_again"] is False
            await until(lambda: _true(not app.is_leader), "demotion")  # the lease is gone
            store.down = False

            async def ready() -> dict[str, Any] | None:
                answer = await client.get("/readyz")
                return answer.json() if answer.status_code == 200 else None

            body = await until(ready, "/readyz to recover")
        assert body["status"] == "ready" and CAUSE in body["warnings"][0]
        errors = [r for r in caplog.records if getattr(r, "action", "") == "store_data_lost"]
        assert len(errors) == 1 and errors[0].levelno == logging.ERROR
        assert CAUSE in errors[0].getMessage() and "planning starts again" in errors[0].getMessage()
        assert len(store.upserts) > upserts and store.upserts[-1] == ["hourly"]
        status = (await client.get("/status")).json()
        lost = status["store_data_lost"]
        assert (lost["count"], lost["set_up_again"]) == (1, True) and CAUSE in lost["error"]
        metrics = (await client.get("/metrics")).text
        assert "soloist_store_data_lost_total 1.0" in metrics
        await until(lambda: _true(app.is_leader), "leadership again")
    finally:
        await client.aclose()
        await app.stop()


async def _true(value: bool) -> bool:
    return value


async def test_jobs_are_back_after_the_loss() -> None:
    """The job records written again after a loss keep their definitions."""
    store = ForgetfulStore()
    app = Scheduler(store, instance_id="i2", lease_ttl="2s", heartbeat="0.2s")

    @app.job(every("1h"))
    def hourly(ctx: JobContext) -> None:
        pass

    await app.start()
    try:
        before = store.migrations
        store.lost = True
        await until(lambda: _true(store.migrations > before), "migrate again")
        record: JobRecord | None = await store.job_get("hourly")
        assert record is not None and record.task == "hourly"
    finally:
        await app.stop()
