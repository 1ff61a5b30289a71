"""soloist's PostgreSQL transactions run at READ COMMITTED whatever the server's default.

The test makes a database of its own whose default isolation is REPEATABLE READ (dropped
afterwards). At that level PostgreSQL fails a ``FOR UPDATE SKIP LOCKED`` claim that meets a
row changed by a concurrent claim with "could not serialize access due to concurrent
update"; pinned to READ COMMITTED, concurrent claimers simply skip each other's rows.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from soloist.models import Kind, NewOccurrence, Overlap
from soloist.stores.postgres import PostgresStore
from soloist.stores.postgres.connections import Conn

TASKS = 300
CLAIMERS = 6


@pytest.fixture
def repeatable_read_db(postgres_dsn: str) -> Iterator[str]:
    """The URL of a fresh database whose default isolation is REPEATABLE READ."""
    name = f"soloist_rr_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL(
                "ALTER DATABASE {} SET default_transaction_isolation = 'repeatable read'"
            ).format(sql.Identifier(name))
        )
    parts = urlsplit(postgres_dsn)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def task(number: int, due: object) -> NewOccurrence:
    return NewOccurrence(
        dedupe_key=f"t:{number}",
        job="work",
        task="work",
        scope="",
        plan_time=due,  # type: ignore[arg-type]
        due_at=due,  # type: ignore[arg-type]
        kind=Kind.TASK,
        max_attempts=1,
        overlap=Overlap.ALLOW,
        payload={},
    )


async def test_connections_are_read_committed_on_a_repeatable_read_database(
    repeatable_read_db: str,
) -> None:
    """The database defaults to REPEATABLE READ, yet every connection soloist opens (pooled,
    migration/listener) runs at READ COMMITTED."""
    with psycopg.connect(repeatable_read_db, autocommit=True) as plain:
        shown = plain.execute("SHOW transaction_isolation").fetchone()
        assert shown == ("repeatable read",)  # what the server would give soloist
    store = PostgresStore(repeatable_read_db, lease_ttl=10)
    try:
        await store.migrate()
        assert await store._rows("SHOW transaction_isolation", {}) == [("read committed",)]

        async def in_transaction(conn: Conn) -> object:
            async with conn.transaction():
                cursor = await conn.execute("SHOW transaction_isolation")
                return await cursor.fetchone()

        assert await store._conns.using(in_transaction) == ("read committed",)
        own = await store._conns.connect()
        try:
            cursor = await own.execute("SHOW transaction_isolation")
            assert await cursor.fetchone() == ("read committed",)
        finally:
            await own.close()
        await store.listen()
        listener, _ = await store._conns.listener()
        cursor = await listener.execute("SHOW transaction_isolation")
        assert await cursor.fetchone() == ("read committed",)
    finally:
        await store.close()


async def test_concurrent_claims_on_a_repeatable_read_database_raise_no_errors(
    repeatable_read_db: str,
) -> None:
    """Several instances claiming the same queue at once on a REPEATABLE READ database
    claim every task exactly once, without a serialization error."""
    stores = [PostgresStore(repeatable_read_db, lease_ttl=10) for _ in range(CLAIMERS)]
    try:
        await stores[0].migrate()
        now = await stores[0].now()
        assert await stores[0].occurrence_insert_many([task(i, now) for i in range(TASKS)]) == TASKS
        claimed: dict[str, list[str]] = {}

        async def claim(number: int) -> None:
            store, me = stores[number], f"instance-{number}"
            while True:
                got = await store.occurrence_claim(me, ["work"], 3, timedelta(minutes=1))
                if not got:
                    return
                for occ in got:
                    claimed.setdefault(occ.id, []).append(me)

        await asyncio.gather(*(claim(n) for n in range(CLAIMERS)))
        assert len(claimed) == TASKS
        assert all(len(who) == 1 for who in claimed.values())
        assert len({who[0] for who in claimed.values()}) > 1  # they did run concurrently
    finally:
        for store in stores:
            await store.close()
