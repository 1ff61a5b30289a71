"""The HTTP endpoint inside a program: served by ``Scheduler(http=...)`` in the scheduler's
own loop, and mounted under a prefix of another ASGI app."""

from __future__ import annotations

from datetime import datetime

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from soloist import Scheduler
from soloist.http import api, create_app
from soloist.stores.memory import MemoryStore

TOKEN = "embedded-token"


async def test_scheduler_serves_http_while_it_runs() -> None:
    """Scheduler(http="127.0.0.1:0") listens on a free port while started, not after stop."""
    app = Scheduler("memory://", instance_id="emb", http="127.0.0.1:0", token=TOKEN)
    await app.start()
    try:
        address = app.http_address
        assert address is not None and address[0] == "127.0.0.1" and address[1] > 0
        base = f"http://127.0.0.1:{address[1]}"
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            assert (await client.get("/healthz")).json() == {"status": "ok"}
            status = (await client.get("/status")).json()
            assert status["instance_id"] == "emb" and status["running"] is True
            assert status["actions_enabled"] is True and status["store"] == "memory://"
    finally:
        await app.stop()
    assert app.http_address is None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{base}/healthz", timeout=2)


async def test_a_taken_port_fails_the_start_naming_the_address() -> None:
    """A second scheduler on the same port fails to start with an error naming it."""
    first = Scheduler("memory://", http="127.0.0.1:0")
    await first.start()
    try:
        assert first.http_address is not None
        port = first.http_address[1]
        second = Scheduler("memory://", http=f"127.0.0.1:{port}")
        with pytest.raises(Exception, match=f"cannot listen on 127.0.0.1:{port}"):
            await second.start()
        await second.stop()
    finally:
        await first.stop()


async def test_mounted_under_a_prefix() -> None:
    """create_app mounts under a prefix: every endpoint, the page and JSON 404s work there."""
    app = Scheduler("memory://", instance_id="mounted")
    host = Starlette(routes=[Mount("/ops/soloist", create_app(app, token=TOKEN))])
    transport = httpx.ASGITransport(app=host)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        assert (await client.get("/ops/soloist/readyz")).json() == {"status": "ready"}
        status = (await client.get("/ops/soloist/status")).json()
        assert status["instance_id"] == "mounted" and status["running"] is False
        assert status["actions_enabled"] is True  # the token given to create_app
        page = await client.get("/ops/soloist/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert 'href="/' not in page.text and 'fetch("/' not in page.text  # relative URLs
        missing = await client.get("/ops/soloist/nothing")
        assert missing.status_code == 404 and "error" in missing.json()
        metrics = await client.get("/ops/soloist/metrics")
        assert "soloist_instance_info" in metrics.text
        refused = await client.post("/ops/soloist/api/jobs/x/trigger")
        assert refused.status_code == 401
    await app.aclose()


class BrokenStore(MemoryStore):
    """A store whose clock read fails, as an unreachable server's would."""

    async def now(self) -> datetime:
        raise OSError("connection refused")


class HangingStore(MemoryStore):
    """A store that never answers."""

    async def now(self) -> datetime:
        import asyncio

        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


@pytest.mark.parametrize(
    ("store", "message"),
    [(BrokenStore(), "connection refused"), (HangingStore(), "did not answer within")],
)
async def test_readyz_is_503_when_the_store_does_not_answer(
    store: MemoryStore, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/readyz answers 503 with the reason when the store fails or stays silent too long;
    /healthz still answers 200 (it calls no store)."""
    monkeypatch.setattr(api, "READY_TIMEOUT", 0.2)
    app = Scheduler(store)
    transport = httpx.ASGITransport(app=create_app(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        body = ready.json()
        assert body["status"] == "unavailable" and message in body["error"]
        assert (await client.get("/healthz")).status_code == 200
