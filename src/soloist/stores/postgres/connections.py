"""Connections of one PostgreSQL store: a small pool per event loop, one LISTEN connection,
and the translation of driver errors into soloist's.

psycopg's async pool runs worker tasks on the loop that opened it, so a pool cannot serve
another loop, nor be closed from one. The sync API of soloist runs short calls through
``asyncio.run`` (a new loop each time), possibly from several threads at once; so pools are
kept per loop. A pool whose loop has ended cannot run ``close()``: its idle connections are
closed directly when the next call notices (or at ``close_all``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from soloist.errors import StoreError, StoreUnavailableError
from soloist.stores.postgres.url import PostgresTarget

__all__ = ["Connections"]

Pool = AsyncConnectionPool[psycopg.AsyncConnection[Any]]

#: Seconds to wait for the server when opening a connection (unless the URL says).
CONNECT_TIMEOUT = 10
#: Seconds a call waits for a free pooled connection before giving up.
POOL_TIMEOUT = 30.0


class Connections:
    """Pools (per event loop) and the listener of one store. Thread-safe."""

    def __init__(self, target: PostgresTarget, *, min_size: int = 1, max_size: int = 4) -> None:
        self.target = target
        self._min_size = min_size
        self._max_size = max_size
        self._lock = threading.Lock()
        self._opening: dict[asyncio.AbstractEventLoop, asyncio.Task[Pool]] = {}
        self._listener: tuple[asyncio.AbstractEventLoop, psycopg.AsyncConnection[Any]] | None = None
        self.closed = False

    # -- errors ---------------------------------------------------------------------------
    @contextmanager
    def translated(self) -> Iterator[None]:
        """Driver errors as StoreError: StoreUnavailableError when the server cannot be
        reached. Messages name the host and database, never the password."""
        try:
            yield
        except PoolTimeout as exc:
            raise StoreUnavailableError(
                f"PostgreSQL store {self.target.display}: no connection available within "
                f"{POOL_TIMEOUT:g}s ({self.target.scrub(str(exc))})"
            ) from None
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(self._message(exc)) from None
        except psycopg.Error as exc:
            raise StoreError(self._message(exc)) from None

    def _message(self, exc: psycopg.Error) -> str:
        return f"PostgreSQL store {self.target.display}: {self.target.scrub(str(exc)).strip()}"

    def _kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in self.target.given:
            kwargs["connect_timeout"] = CONNECT_TIMEOUT
        if "application_name" not in self.target.given:
            kwargs["application_name"] = "soloist"
        return kwargs

    async def connect(self) -> psycopg.AsyncConnection[Any]:
        """A new autocommit connection in UTC, outside the pools (driver errors raised)."""
        conn = await psycopg.AsyncConnection.connect(self.target.conninfo, **self._kwargs())
        await _configure(conn)
        return conn

    # -- pools ------------------------------------------------------------------------------
    async def pool(self) -> Pool:
        """The open pool of the running event loop, opened on first use (driver errors
        raised: call inside :meth:`translated`)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.closed:
                raise StoreError(f"PostgreSQL store {self.target.display} is closed")
            opening = self._opening.get(loop)
            if opening is None:
                opening = loop.create_task(self._open())
                self._opening[loop] = opening
            ended = [(old, task) for old, task in self._opening.items() if old.is_closed()]
            for old, _ in ended:
                del self._opening[old]
        for _, task in ended:
            _abandon(task)
        if opening.done() and not opening.cancelled() and opening.exception() is None:
            return opening.result()
        try:
            return await asyncio.shield(opening)
        except Exception:
            with self._lock:
                if self._opening.get(loop) is opening:
                    del self._opening[loop]  # the next call tries again
            raise

    async def _open(self) -> Pool:
        # A direct connection first: if the server cannot be reached this fails at once with
        # libpq's reason, where the pool would retry quietly until its timeout.
        probe = await self.connect()
        await probe.close()
        pool: Pool = AsyncConnectionPool(
            self.target.conninfo,
            min_size=self._min_size,
            max_size=self._max_size,
            kwargs=self._kwargs(),
            configure=_configure,
            timeout=POOL_TIMEOUT,
            name=f"soloist-{self.target.schema}",
            open=False,
        )
        await pool.open(wait=True, timeout=POOL_TIMEOUT)
        return pool

    # -- listening --------------------------------------------------------------------------
    async def listener(self) -> tuple[psycopg.AsyncConnection[Any], bool]:
        """The LISTEN connection of the running loop, and whether it is new (opened by this
        call: notifications sent before it existed were not received)."""
        loop = asyncio.get_running_loop()
        current = self._listener
        if current is not None and current[0] is loop and not current[1].closed:
            return current[1], False
        self.drop_listener()
        conn = await self.connect()
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.target.channel)))
        self._listener = (loop, conn)
        return conn, True

    def drop_listener(self) -> None:
        """Close the LISTEN connection (it is reopened on the next wait)."""
        current, self._listener = self._listener, None
        if current is not None:
            current[1].pgconn.finish()

    # -- closing ----------------------------------------------------------------------------
    async def close_all(self) -> None:
        """Close every pool and the listener; later calls raise StoreError. Idempotent."""
        with self._lock:
            self.closed = True
            opening, self._opening = self._opening, {}
        self.drop_listener()
        running = asyncio.get_running_loop()
        for loop, task in opening.items():
            if loop is running:
                if task.done() and not task.cancelled() and task.exception() is None:
                    await task.result().close()
                else:
                    task.cancel()
            elif loop.is_running():  # a loop in another thread: close it there
                future = asyncio.run_coroutine_threadsafe(_close_task(task), loop)
                await asyncio.wait([asyncio.wrap_future(future)], timeout=5)
            else:
                _abandon(task)


#: Set around the statements that must walk the claim index in order (claims, next_due):
#: a claim stops after LIMIT rows, but when the planner's statistics are stale (autovacuum
#: off, or a queue that grew since the last ANALYZE) it estimates a handful of due rows and
#: picks a bitmap scan instead, which fetches and sorts every due row (10,000 rows: 5 ms
#: instead of 0.3 ms per claim). Only around those statements: history queries by state
#: are better served by bitmap scans of their partial indexes. The store sends the setting,
#: the statement and :data:`ORDERED_WALK_END` in one pipeline, so in one round trip and one
#: transaction (a failed statement rolls the setting back with it).
ORDERED_WALK = "SET enable_bitmapscan = off"
ORDERED_WALK_END = "RESET enable_bitmapscan"


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute("SET TIME ZONE 'UTC'")


async def _close_task(task: asyncio.Task[Pool]) -> None:
    pool = await task
    await pool.close()


def _abandon(task: asyncio.Task[Pool]) -> None:
    """Close the idle connections of a pool whose event loop has ended: ``pool.close()``
    would need that loop. (psycopg_pool keeps idle connections in ``_pool``; connections
    that were checked out when the loop ended are freed by the garbage collector.)"""
    if not task.done() or task.cancelled() or task.exception() is not None:
        return
    for conn in list(getattr(task.result(), "_pool", ())):
        conn.pgconn.finish()
