"""A sync handler that outlives its ``timeout`` keeps its thread (Python cannot stop it):
through a real Scheduler and its HTTP app, later sync runs still run, the leaked threads
show in /status, /metrics and the log, and /readyz fails when they reach the bound."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from soloist import Scheduler
from soloist.context import JobContext
from soloist.http import create_app
from soloist.models import ErrorCode, State

PROMPTLY = 10.0


class Harness:
    def __init__(self, app: Scheduler, client: httpx.AsyncClient) -> None:
        self.app = app
        self.client = client
        self.release = threading.Event()
        self.ran: list[int] = []

    async def status(self) -> dict[str, Any]:
        response = await self.client.get("/status")
        assert response.status_code == 200, response.text
        return dict(response.json())

    async def workers(self) -> dict[str, Any]:
        return dict((await self.status())["workers"])

    async def metric(self, name: str) -> float | None:
        text = (await self.client.get("/metrics")).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name:
                    return float(sample.value)
        return None

    async def until(self, probe: Callable[[], Any], what: str) -> Any:
        deadline = asyncio.get_running_loop().time() + PROMPTLY
        while True:
            value = await probe()
            if value:
                return value
            assert asyncio.get_running_loop().time() < deadline, f"timed out: {what}: {value!r}"
            await asyncio.sleep(0.02)

    async def leaked(self, count: int) -> None:
        async def probe() -> bool:
            return bool((await self.workers())["leaked_threads"] == count)

        await self.until(probe, f"{count} leaked thread(s)")

    async def run_quick(self, n: int) -> None:
        """Enqueue ``quick(n)`` and wait until it ran (it needs a free worker thread)."""
        await self.app.aenqueue("quick", {"n": n})

        async def probe() -> bool:
            return n in self.ran

        await self.until(probe, f"quick({n}) to run")


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    app = Scheduler("memory://", instance_id="leaky", concurrency=1, max_leaked_threads=2)
    transport = httpx.ASGITransport(app=create_app(app))
    client = httpx.AsyncClient(transport=transport, base_url="http://test")
    h = Harness(app, client)

    @app.task(timeout="0.2s")
    def stuck(ctx: JobContext) -> None:
        h.release.wait(30)  # ignores its timeout, as a hung sync call does

    @app.task
    def quick(ctx: JobContext, n: int) -> None:
        h.ran.append(n)

    await app.start()
    try:
        yield h
    finally:
        h.release.set()
        await client.aclose()
        await app.stop()
        await app.aclose()


async def test_timed_out_sync_handlers_do_not_swallow_later_runs(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """concurrency=1, max_leaked_threads=2: each timed-out sync run leaks its thread, yet
    the next sync run starts at once; /status and /metrics count the leaks, a WARNING
    names the handler, /readyz warns below the bound, fails at it, and recovers when the
    hung calls return."""
    h = harness
    assert (await h.client.get("/readyz")).json() == {"status": "ready"}
    with caplog.at_level(logging.WARNING, logger="soloist"):
        first = await h.app.aenqueue("stuck")
        await h.leaked(1)

    async def recorded() -> Any:
        found = [o for o in await h.app.ahistory(job="stuck") if o.id == first]
        return found[0] if found and found[0].state is State.DEAD else None

    timed_out = await h.until(recorded, "the timed-out run to be recorded")
    assert timed_out.error_code == ErrorCode.TIMEOUT.value
    leaks = [r for r in caplog.records if getattr(r, "action", "") == "leaked_thread"]
    assert len(leaks) == 1 and "stuck" in leaks[0].getMessage()

    await h.run_quick(1)  # concurrency 1, its thread leaked: a replacement runs it
    ready = await h.client.get("/readyz")
    assert ready.status_code == 200 and "max_leaked_threads=2" in ready.json()["warnings"][0]
    workers = await h.workers()
    assert workers["leaked_threads"] == 1 and workers["saturated"] is False
    assert await h.metric("soloist_leaked_threads") == 1

    await h.app.aenqueue("stuck")
    await h.leaked(2)
    await h.run_quick(2)  # the second leak is replaced too: the bound is 2
    workers = await h.workers()
    assert (workers["thread_leaks_total"], workers["saturated"]) == (2, True)
    assert await h.metric("soloist_leaked_threads") == 2
    assert await h.metric("soloist_thread_leaks_total") == 2
    unready = await h.client.get("/readyz")
    assert unready.status_code == 503
    assert "2 worker thread(s) still run sync handlers" in unready.json()["error"]

    h.release.set()  # the hung calls return: their threads are no longer leaked
    await h.leaked(0)
    assert (await h.client.get("/readyz")).json() == {"status": "ready"}
    await h.run_quick(3)
    assert await h.metric("soloist_thread_leaks_total") == 2
