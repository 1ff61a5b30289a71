"""Driver deadlines derived from the lease TTL, against real servers.

A store reached through a local TCP proxy that silently stops forwarding (a black hole: no
RST, no FIN, the sockets stay open; ``tests/chaos/proxy.py``) must fail its calls with
StoreUnavailableError within about the TTL instead of hanging, and must not hand the stuck
connection out again once the network heals. Settings given in the URL win; migrations and
the PostgreSQL LISTEN connection are not cut by the call deadline.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from chaos.proxy import BlackholeProxy
from soloist import Scheduler
from soloist.errors import StoreError, StoreUnavailableError
from soloist.stores import open_store
from soloist.stores.postgres import PostgresStore
from soloist.stores.postgres.connections import Conn
from soloist.stores.redis import RedisStore
from soloist.stores.sqlite import SQLiteStore

TTL = 1.0
#: Slack for a loaded machine on top of a bound that is being checked.
SLACK = 1.5


def through(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


@pytest.fixture
def proxy_to() -> Iterator[Callable[[str], tuple[str, BlackholeProxy]]]:
    """Makes a black-hole proxy in front of a store URL's server; returns the URL through it."""
    made: list[BlackholeProxy] = []

    def make(url: str) -> tuple[str, BlackholeProxy]:
        parts = urlsplit(url)
        proxy = BlackholeProxy.start(parts.hostname or "127.0.0.1", parts.port or 0)
        made.append(proxy)
        return through(url, proxy.port), proxy

    yield make
    for proxy in made:
        proxy.close()


async def timed(call: Any) -> tuple[float, BaseException | None]:
    """Seconds ``call`` took, and what it raised."""
    started = time.monotonic()
    try:
        await call
    except BaseException as exc:
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


# -- PostgreSQL -------------------------------------------------------------------------------


@pytest.fixture
async def pg_proxied(
    postgres_url: str, proxy_to: Callable[[str], tuple[str, BlackholeProxy]]
) -> AsyncIterator[tuple[PostgresStore, BlackholeProxy]]:
    url, proxy = proxy_to(postgres_url)
    store = PostgresStore(url, lease_ttl=TTL)
    await store.migrate()
    await store.now()  # the pool is open, a connection idle in it
    yield store, proxy
    proxy.heal()
    await store.close()


async def test_postgres_call_on_a_black_hole_fails_within_the_deadline_and_recovers(
    pg_proxied: tuple[PostgresStore, BlackholeProxy],
) -> None:
    """A PostgreSQL call that gets no answer fails with StoreUnavailableError within about
    the lease TTL; after the network heals the next call works (the stuck connection was
    closed, not handed out again)."""
    store, proxy = pg_proxied
    proxy.blackhole()
    took, error = await timed(store.now())
    assert isinstance(error, StoreUnavailableError), error
    assert "no answer within" in str(error)
    assert TTL <= took < TTL + SLACK, took
    proxy.heal()
    took, error = await timed(store.now())
    assert error is None and took < 5, (took, error)


async def test_cancelled_postgres_call_on_a_black_hole_ends_at_once(
    postgres_url: str, proxy_to: Callable[[str], tuple[str, BlackholeProxy]]
) -> None:
    """A call cancelled by the caller's own deadline (asyncio.wait_for) ends at once, not
    after psycopg's cancel request waited for a server that cannot be reached."""
    url, proxy = proxy_to(postgres_url)
    store = PostgresStore(url, lease_ttl=30)
    try:
        await store.migrate()
        await store.now()
        proxy.blackhole()
        took, error = await timed(asyncio.wait_for(store.now(), 0.3))
        assert isinstance(error, asyncio.TimeoutError), error
        assert took < 0.3 + SLACK, took
        proxy.heal()
        assert (await timed(store.now()))[1] is None
    finally:
        proxy.heal()
        await store.close()


async def test_postgres_session_settings_follow_the_lease_ttl(postgres_url: str) -> None:
    """Pooled connections get statement_timeout = the TTL, server-side keepalives and
    tcp_user_timeout, and READ COMMITTED; libpq gets keepalives and tcp_user_timeout; a
    statement running past the TTL is cancelled by the server with a StoreError."""
    store = PostgresStore(postgres_url, lease_ttl=4)
    try:
        await store.migrate()
        rows = await store._rows(
            "SELECT current_setting('statement_timeout'), "
            "current_setting('transaction_isolation'), current_setting('tcp_user_timeout'), "
            "current_setting('tcp_keepalives_idle')",
            {},
        )
        assert rows == [("4s", "read committed", "4000", "2")]

        async def parameters(conn: Conn) -> dict[str, str]:
            return conn.info.get_parameters()

        client = await store._conns.using(parameters)
        assert (client["keepalives"], client["keepalives_idle"]) == ("1", "2")
        assert client["tcp_user_timeout"] == "4000"
        store_short = PostgresStore(postgres_url, lease_ttl=0.5)
        try:
            took, error = await timed(store_short._rows("SELECT pg_sleep(5)", {}))
            assert isinstance(error, StoreError) and "statement timeout" in str(error), error
            assert took < 0.5 + SLACK, took
        finally:
            await store_short.close()
    finally:
        await store.close()


async def test_postgres_url_settings_win_over_the_derived_ones(postgres_url: str) -> None:
    """A URL that sets keepalives, tcp_user_timeout or (in ``options``) statement_timeout
    keeps its values."""
    url = (
        f"{postgres_url}&keepalives_idle=42&tcp_user_timeout=7000"
        "&options=-c%20statement_timeout%3D123000%20-c%20tcp_keepalives_idle%3D17"
    )
    store = PostgresStore(url, lease_ttl=2)
    try:
        await store.migrate()
        rows = await store._rows(
            "SELECT current_setting('statement_timeout'), current_setting('tcp_keepalives_idle')",
            {},
        )
        assert rows == [("123s", "17")]

        async def parameters(conn: Conn) -> dict[str, str]:
            return conn.info.get_parameters()

        client = await store._conns.using(parameters)
        assert (client["keepalives_idle"], client["tcp_user_timeout"]) == ("42", "7000")
    finally:
        await store.close()


async def test_postgres_listener_and_migrations_have_no_statement_timeout(
    make_postgres_url: Callable[[], str],
) -> None:
    """The LISTEN connection has no statement_timeout, and a migration waiting longer than
    the TTL for another instance's migration lock is not cut: it completes."""
    url = make_postgres_url()
    store = PostgresStore(url, lease_ttl=TTL)
    blocker = await psycopg.AsyncConnection.connect(url.partition("?")[0], autocommit=True)
    try:
        async with blocker.transaction():
            await blocker.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"soloist:migrate:{store.schema}",),
            )
            migrating = asyncio.ensure_future(store.migrate())
            await asyncio.sleep(TTL + 1)
            assert not migrating.done()
        _, error = await timed(migrating)
        assert error is None, error
        await store.listen()
        conn, _ = await store._conns.listener()
        cursor = await conn.execute("SHOW statement_timeout")
        assert await cursor.fetchone() == ("0",)
    finally:
        await blocker.close()
        await store.close()


async def test_scheduler_opens_its_store_with_its_lease_ttl(postgres_url: str) -> None:
    """Scheduler(lease_ttl=...) passes the TTL to the store: its calls have that deadline."""
    app = Scheduler(postgres_url, lease_ttl="3s")
    try:
        store = (await app.astore()).driver
        assert isinstance(store, PostgresStore)
        assert await store._rows("SHOW statement_timeout", {}) == [("3s",)]
    finally:
        await app.aclose()


# -- Redis ------------------------------------------------------------------------------------


@pytest.fixture
async def redis_proxied(
    redis_url: str, proxy_to: Callable[[str], tuple[str, BlackholeProxy]]
) -> AsyncIterator[tuple[RedisStore, BlackholeProxy]]:
    url, proxy = proxy_to(redis_url)
    store = RedisStore(url, lease_ttl=TTL)
    await store.migrate()
    yield store, proxy
    proxy.heal()
    await store.close()


async def test_redis_call_on_a_black_hole_fails_within_the_deadline_and_recovers(
    redis_proxied: tuple[RedisStore, BlackholeProxy],
) -> None:
    """A Redis call that gets no answer fails with StoreUnavailableError within about the
    lease TTL (the socket timeout); after the network heals the next call works."""
    store, proxy = redis_proxied
    assert store.target.socket_timeout == TTL
    proxy.blackhole()
    took, error = await timed(store.now())
    assert isinstance(error, StoreUnavailableError), error
    assert TTL * 0.9 <= took < TTL + SLACK, took
    proxy.heal()
    took, error = await timed(store.now())
    assert error is None and took < 5, (took, error)


async def test_redis_wait_on_a_black_holed_subscription_does_not_listen_for_ever(
    redis_proxied: tuple[RedisStore, BlackholeProxy],
) -> None:
    """Waits on a subscription whose connection went silent end with StoreUnavailableError
    within 1.5 socket timeouts (a PING after half of one, unanswered for one), then a wait
    after healing subscribes again."""
    store, proxy = redis_proxied
    assert await store.work_wait(0.1) is True  # subscribed (fresh)
    assert await store.work_wait(0.1) is False
    proxy.blackhole()
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError, match="PING"):
        while time.monotonic() - started < 10:
            await store.work_wait(0.2)
    assert time.monotonic() - started < 1.5 * TTL + SLACK
    proxy.heal()
    assert await store.work_wait(0.5) is True  # subscribed again


async def test_redis_wait_on_a_live_subscription_keeps_it(redis_url: str) -> None:
    """A quiet but healthy subscription answers the PINGs and is kept across many waits."""
    store = RedisStore(redis_url, lease_ttl=0.5)
    try:
        await store.migrate()
        assert await store.work_wait(0.1) is True
        for _ in range(8):  # 1.6 s: several PINGs
            assert await store.work_wait(0.2) is False
    finally:
        await store.close()


async def test_redis_url_timeouts_win_and_sockets_keep_alive(redis_url: str) -> None:
    """socket_timeout / socket_connect_timeout in the URL win over the TTL's; without a TTL
    replies are waited for 60 s as before; connections have TCP keepalives."""
    sep = "&" if "?" in redis_url else "?"
    given = RedisStore(f"{redis_url}{sep}socket_timeout=30&socket_connect_timeout=20", lease_ttl=2)
    assert (given.target.socket_timeout, given.target.socket_connect_timeout) == (30, 20)
    derived = RedisStore(redis_url, lease_ttl=2)
    assert (derived.target.socket_timeout, derived.target.socket_connect_timeout) == (2, 2)
    assert RedisStore(redis_url).target.socket_timeout == 60
    try:
        await derived.now()
        kwargs = derived._client().connection_pool.connection_kwargs
        assert kwargs["socket_keepalive"] is True
        assert kwargs["socket_keepalive_options"]
    finally:
        await derived.close()
        await given.close()


# -- SQLite -----------------------------------------------------------------------------------


async def test_sqlite_busy_timeout_is_below_the_lease_ttl(tmp_path: Path) -> None:
    """A SQLite store waits for another process's write lock half the TTL (at most 10 s, the
    wait without a TTL), then fails with StoreError instead of waiting past the lease."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert SQLiteStore(url).busy_timeout == 10.0
    assert SQLiteStore(url, lease_ttl=60).busy_timeout == 10.0
    store = open_store(url, lease_ttl=2)
    assert isinstance(store.driver, SQLiteStore) and store.driver.busy_timeout == 1.0
    await store.migrate()
    other = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        took, error = await timed(store.job_set_paused("nothing", True))
        assert isinstance(error, StoreError) and "locked" in str(error), error
        assert 0.9 <= took < 1.0 + SLACK, took
    finally:
        other.execute("ROLLBACK")
        other.close()
        await store.close()


def test_a_bad_lease_ttl_is_refused_naming_it() -> None:
    """open_store(lease_ttl=...) refuses a TTL that is not a positive number of seconds."""
    with pytest.raises(ValueError, match="-1"):
        open_store("memory://", lease_ttl=-1)
