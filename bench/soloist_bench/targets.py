"""The stores under measurement (fresh, isolated storage per measurement) and raw
connections to their servers for the baselines."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from soloist.testing.isolated import IsolatedStores

__all__ = ["RawEtcd", "RawSQL", "Target", "etcd_version", "raw_etcd", "raw_redis", "raw_sql"]


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


class RawEtcd:
    """Plain etcd v3 calls for the baselines: single-key reads and writes and batches of
    puts, as messages of ``aetcd.rpc`` (the client library of the etcd store) on a gRPC
    channel of their own. Keys are given whole; :attr:`base` starts the keys the
    baselines may write (under the URL's fresh prefix, which the bench removes)."""

    def __init__(self, conns: Any, base: bytes) -> None:
        from aetcd import rpc

        self._rpc = rpc
        self._conns = conns
        self.base = base

    def _put(self, key: bytes, value: bytes) -> Any:
        return self._rpc.RequestOp(request_put=self._rpc.PutRequest(key=key, value=value))

    async def get(self, key: bytes) -> None:
        """One linearizable single-key ``Range`` (a read: no Raft entry, no fsync)."""
        await self._conns.range(key)

    async def put(self, key: bytes, value: bytes) -> int:
        """Write ``key`` (a transaction of one put, as the store writes: one Raft entry,
        fsynced by the members); the revision it was written at."""
        reply = await self._conns.txn([], [self._put(key, value)])
        return int(reply.header.revision)

    async def put_if_unchanged(self, key: bytes, revision: int, value: bytes) -> bool:
        """Write ``key`` only while it was last written at ``revision`` (a fenced change:
        one compare and one put); whether it applied."""
        rpc = self._rpc
        unchanged = rpc.Compare(
            key=key, target=rpc.Compare.MOD, result=rpc.Compare.EQUAL, mod_revision=revision
        )
        reply = await self._conns.txn([unchanged], [self._put(key, value)])
        return bool(reply.succeeded)

    async def put_many(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        """Write ``items`` in one transaction (at most etcd's ``--max-txn-ops``, 128)."""
        await self._conns.txn([], [self._put(key, value) for key, value in items])


@contextlib.asynccontextmanager
async def raw_etcd(url: str) -> AsyncIterator[RawEtcd]:
    """A :class:`RawEtcd` on a channel of its own to the members of ``url`` (TLS and
    credentials as the URL gives them; soloist's options aside), for the baselines:
    nothing of the store under measurement is borrowed. aetcd is imported here, so that
    the other stores can be measured where it is not installed."""
    from soloist.stores.deadlines import Deadlines
    from soloist.stores.etcd.connections import Connections
    from soloist.stores.etcd.url import parse_url

    target = parse_url(url)
    conns = Connections(target, Deadlines.from_ttl(None))
    try:
        yield RawEtcd(conns, target.base + b"bench_raw/")
    finally:
        await conns.close_all()


async def etcd_version(url: str) -> str | None:
    """The etcd server version of the first member of ``url`` (its ``/version``), None if
    it does not say."""
    from soloist.stores.etcd.url import parse_url

    target = parse_url(url)
    host, _, port = target.endpoints[0].rpartition(":")
    host = host.strip("[]")

    def ask() -> str | None:
        conn: http.client.HTTPConnection
        if target.tls:
            context = ssl.create_default_context(cafile=str(target.ca) if target.ca else None)
            if target.cert and target.key:
                context.load_cert_chain(str(target.cert), str(target.key))
            conn = http.client.HTTPSConnection(host, int(port), timeout=5, context=context)
        else:
            conn = http.client.HTTPConnection(host, int(port), timeout=5)
        try:
            conn.request("GET", "/version")
            version = json.loads(conn.getresponse().read()).get("etcdserver")
        finally:
            conn.close()
        return str(version) if version else None

    return await asyncio.to_thread(ask)
