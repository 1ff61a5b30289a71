"""The stores under measurement (fresh, isolated storage per measurement) and raw
connections to their servers for the baselines."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from soloist.testing.isolated import IsolatedStores

__all__ = ["RawSQL", "Target", "raw_redis", "raw_sql"]


class Target:
    """Fresh, isolated stores of one kind (a new schema, key prefix, file or memory store
    for each measurement), all removed again by :meth:`cleanup`. (A SQLite URL only
    selects the kind of store: each measurement uses a new file in a temporary
    directory.)"""

    def __init__(self, url: str) -> None:
        self.url = url
        self._isolated = IsolatedStores(url, label="soloist_bench")
        self.kind = self._isolated.kind

    @property
    def multiprocess(self) -> bool:
        return self.kind != "memory"

    def fresh_url(self) -> str:
        """A URL to new, empty storage."""
        return self._isolated.url()

    async def cleanup(self) -> None:
        await self._isolated.aremove()


RawSQL = Callable[..., Awaitable[list[tuple[Any, ...]]]]


@contextlib.asynccontextmanager
async def raw_sql(url: str) -> AsyncIterator[RawSQL]:
    """``sql(query, params=None)`` running raw SQL on a connection of its own to the
    PostgreSQL server of ``url`` (its ``schema`` parameter aside), for the baselines:
    nothing of the store under measurement is borrowed. Only for PostgreSQL
    URLs; psycopg is imported here, so that the other stores can be measured where it is
    not installed."""
    import psycopg

    from soloist.stores.postgres import parse_url

    conn = await psycopg.AsyncConnection.connect(parse_url(url).conninfo, autocommit=True)

    async def sql(query: str, params: Any = None) -> list[tuple[Any, ...]]:
        cursor = await conn.execute(query, params)
        rows = await cursor.fetchall() if cursor.description is not None else []
        return [tuple(row) for row in rows]

    try:
        yield sql
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def raw_redis(url: str) -> AsyncIterator[Any]:
    """A redis-py client of its own to the server of ``url`` (soloist's options dropped),
    for the baseline. redis is imported here, so that the stores without it can be
    measured where it is not installed."""
    import redis.asyncio

    parts = urlsplit(url)
    client = redis.asyncio.Redis.from_url(urlunsplit(parts._replace(query="")))
    try:
        yield client
    finally:
        await client.aclose()
