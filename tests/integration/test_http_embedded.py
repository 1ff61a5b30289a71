"""The HTTP endpoint inside a program: served by ``Scheduler(http=...)`` in the scheduler's
own loop, and mounted under a prefix of another ASGI app."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from soloist import Scheduler, every
from soloist.http import api, create_app, server
from soloist.models import OccurrenceCounts
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
        # A failed start leaves no half-started endpoint: trying again tries to bind again.
        assert second.http_address is None
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


async def test_bound_beyond_loopback_any_host_is_answered() -> None:
    """Bound to 0.0.0.0 (a pod) the server answers a probe sent to its IP under any Host."""
    app = Scheduler("memory://", http="0.0.0.0:0")
    await app.start()
    try:
        assert app.http_address is not None
        url = f"http://127.0.0.1:{app.http_address[1]}/healthz"
        async with httpx.AsyncClient(timeout=10) as client:
            for host in ("10.1.2.3:8080", "soloist.default.svc", "evil.example"):
                answer = await client.get(url, headers={"Host": host})
                assert answer.status_code == 200, host
    finally:
        await app.stop()


def test_allowed_hosts_follow_the_bound_address() -> None:
    """Loopback addresses get the local names; any other address any Host."""
    local = {"localhost", "127.0.0.1", "[::1]"}
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert server.allowed_hosts(host) == local, host
    for host in ("0.0.0.0", "::", "10.0.0.5", "soloist.internal"):
        assert server.allowed_hosts(host) is None, host


async def test_create_app_checks_the_hosts_it_is_given() -> None:
    """create_app(allowed_hosts=...) refuses other Host names with 421, any port allowed."""
    app = Scheduler("memory://")
    web = create_app(app, allowed_hosts=["Soloist.Internal", "[::1]"])
    transport = httpx.ASGITransport(app=web)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for host, status in (("soloist.internal:80", 200), ("[::1]:9", 200), ("x.io", 421)):
            answer = await client.get("/healthz", headers={"Host": host})
            assert answer.status_code == status, host
    await app.aclose()


async def test_a_non_ascii_token_matches_and_odd_headers_are_401() -> None:
    """A UTF-8 token sent as UTF-8 bytes is accepted; undecodable or odd headers are 401s."""
    app = Scheduler("memory://")

    @app.job(every("1h"))
    def tick() -> None:
        return None

    transport = httpx.ASGITransport(app=create_app(app, token="tökén-✓"))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        good = {"Authorization": "Bearer tökén-✓".encode()}
        assert (await client.post("/api/jobs/tick/pause", headers=good)).status_code == 200
        for value in (b"Bearer \xff\xfe", b"Bearer", b"Bearer ", "Bearer tökén".encode("latin-1")):
            answer = await client.post("/api/jobs/tick/pause", headers={"Authorization": value})
            assert answer.status_code == 401, value
    await app.aclose()


class HangingReads(MemoryStore):
    """A store whose reads never answer."""

    async def now(self) -> datetime:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def occurrence_counts(self) -> OccurrenceCounts:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


async def test_reads_of_a_hanging_store_answer_503_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GET /status gives up with a JSON 503 after READ_TIMEOUT; /metrics serves what it
    has and counts the store error instead of hanging."""
    monkeypatch.setattr(api, "READ_TIMEOUT", 0.3)
    monkeypatch.setattr(api, "READY_TIMEOUT", 0.2)
    app = Scheduler(HangingReads())
    transport = httpx.ASGITransport(app=create_app(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        started = time.monotonic()
        status = await asyncio.wait_for(client.get("/status"), 5)
        assert status.status_code == 503
        assert status.json() == {"error": "the store did not answer within 0.3s"}
        metrics = await asyncio.wait_for(client.get("/metrics"), 5)
        assert metrics.status_code == 200
        assert 'soloist_store_errors_total{operation="occurrence_counts"} 1.0' in metrics.text
        assert time.monotonic() - started < 3


async def test_nul_bytes_are_400_on_postgresql(postgres_url: str) -> None:
    """PostgreSQL cannot hold a NUL: the API refuses one as bad input, not as a store error."""
    app = Scheduler(postgres_url)
    transport = httpx.ASGITransport(app=create_app(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for path in ("/api/occurrences?job=a%00", "/api/occurrences/a%00"):
            answer = await client.get(path)
            assert answer.status_code == 400, answer.text
            assert "must not contain a NUL byte" in answer.json()["error"]
    await app.aclose()
