"""Connections of one PostgreSQL store: a small pool per event loop, one LISTEN connection,
and the translation of driver errors into soloist's.

psycopg's async pool runs worker tasks on the loop that opened it, so a pool cannot serve
another loop, nor be closed from one. The sync API of soloist runs short calls through
``asyncio.run`` (a new loop each time), possibly from several threads at once; so pools are
kept per loop. A pool whose loop has ended cannot run ``close()``: its idle connections are
closed directly when the next call notices (or at ``close_all``).

Every connection is pinned to READ COMMITTED (whatever the server's or the role's default
isolation, so that a REPEATABLE READ default cannot turn lock races into serialization
errors) and has TCP keepalives and ``tcp_user_timeout``, both ways (libpq for the client's
socket, the session's settings for the server's). Pooled connections also get the call
deadline of :mod:`soloist.stores.deadlines`: ``statement_timeout`` on the server, and a
connection that has not answered a little later is cut by the client (its socket shut
down, so the call fails at once whatever the network does, and the pool discards it).
Migrations and the LISTEN connection use connections of their own without a call deadline:
a long ``CREATE INDEX`` or an idle listener must not be cut. Settings given in the URL
(libpq parameters, or ``-c name=value`` in its ``options``) win over these.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import select
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from soloist.errors import StoreError, StoreUnavailableError
from soloist.stores.deadlines import Deadlines
from soloist.stores.postgres.url import PostgresTarget

__all__ = ["Connections"]

T = TypeVar("T")
Conn = psycopg.AsyncConnection[Any]
Pool = AsyncConnectionPool[Conn]

#: Seconds a call waits for a free pooled connection before giving up (at most the call
#: deadline, when the store has one).
POOL_TIMEOUT = 30.0
#: Server settings named in ``-c name=value`` or ``--name=value`` of libpq's ``options``.
_OPTION_NAME = re.compile(r"(?:-c\s*|--)([A-Za-z_][A-Za-z0-9_.]*)\s*=")


class Connections:
    """Pools (per event loop) and the listener of one store. Thread-safe."""

    def __init__(
        self,
        target: PostgresTarget,
        *,
        deadlines: Deadlines | None = None,
        min_size: int = 1,
        max_size: int = 4,
    ) -> None:
        self.target = target
        self.deadlines = deadlines or Deadlines.from_ttl(None)
        call = self.deadlines.call
        self._pool_timeout = POOL_TIMEOUT if call is None else min(POOL_TIMEOUT, call)
        self._session, self._bounded_session = _session_settings(target, self.deadlines)
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
                f"{self._pool_timeout:g}s ({self.target.scrub(str(exc))})"
            ) from None
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(self._message(exc)) from None
        except psycopg.Error as exc:
            raise StoreError(self._message(exc)) from None

    def _message(self, exc: psycopg.Error) -> str:
        return f"PostgreSQL store {self.target.display}: {self.target.scrub(str(exc)).strip()}"

    def _kwargs(self) -> dict[str, Any]:
        """libpq parameters (those the URL gives win): connect timeout, keepalives and
        TCP_USER_TIMEOUT of the client's socket."""
        limits = self.deadlines
        kwargs: dict[str, Any] = {"autocommit": True}
        defaults = {
            # libpq counts whole seconds and treats anything below 2 as 2.
            "connect_timeout": max(2, math.ceil(limits.connect)),
            "application_name": "soloist",
            "keepalives": 1,
            "keepalives_idle": limits.keepalive_idle,
            "keepalives_interval": limits.keepalive_interval,
            "keepalives_count": limits.keepalive_count,
            "tcp_user_timeout": limits.user_timeout_ms,
        }
        for name, value in defaults.items():
            if name not in self.target.given:
                kwargs[name] = value
        return kwargs

    async def connect(self, *, bounded: bool = False) -> Conn:
        """A new autocommit connection in UTC, outside the pools (driver errors raised);
        ``bounded``: with the call deadline's ``statement_timeout`` (pooled connections),
        else without (migrations, the listener)."""
        conn = await psycopg.AsyncConnection.connect(self.target.conninfo, **self._kwargs())
        try:
            await self._configure(conn, bounded)
        except BaseException:
            conn.pgconn.finish()
            raise
        return conn

    async def _configure(self, conn: Conn, bounded: bool) -> None:
        settings = self._bounded_session if bounded else self._session
        if conn.info.server_version < 120000:  # tcp_user_timeout is PostgreSQL 12+
            settings = [s for s in settings if not s.startswith("SET tcp_user_timeout")]
        await conn.execute("; ".join(settings))

    async def _configure_pooled(self, conn: Conn) -> None:
        await self._configure(conn, True)

    async def using(self, work: Callable[[Conn], Awaitable[T]]) -> T:
        """``work(conn)`` on a pooled connection of the running loop (driver errors raised:
        call inside :meth:`translated`).

        With a call deadline, a connection that has not answered within
        :attr:`Deadlines.cut` is cut: its socket is shut down, so the call fails at once
        with StoreUnavailableError, and the pool discards the connection. A cancelled call
        (e.g. by the runtime's own deadline) cuts its connection too, with or without a
        deadline, instead of psycopg's cancel request, which through a network that drops
        packets waits 5 s to connect and 5 s more for an answer before it gives up."""
        pool = await self.pool()
        cut = self.deadlines.cut
        # Where the call is: waiting for a pooled connection, working on it (the
        # connection), or giving it back to the pool.
        phase: list[Conn | str] = ["waiting"]
        expired: list[bool] = []

        async def call() -> T:
            spare = self._max_size  # connections found closed that may be passed over
            loop = asyncio.get_running_loop()
            until = loop.time() + self._pool_timeout  # one wait for all of them
            while True:
                wait = max(0.0, until - loop.time())
                async with pool.connection(timeout=wait) as conn:
                    if spare and _closed_by_server(conn):
                        # Closed by the server while idle in the pool (terminated, a
                        # restart, an idle timeout): the call would fail on it untried.
                        spare -= 1
                        await conn.close()  # the pool replaces it
                        continue
                    timer = None if cut is None else loop.call_later(cut, _expire, conn, expired)
                    phase[0] = conn
                    try:
                        return await work(conn)
                    except psycopg.OperationalError:
                        if expired:
                            raise StoreUnavailableError(
                                f"PostgreSQL store {self.target.display}: no answer within "
                                f"{cut:g}s (connection closed)"
                            ) from None
                        raise
                    finally:
                        phase[0] = "returning"
                        if timer is not None:
                            timer.cancel()

        task = asyncio.ensure_future(call())
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                where = phase[0]
                if isinstance(where, str):
                    if where == "waiting":
                        task.cancel()
                else:
                    _cut(where)  # the statement ends with an error at once
                task.add_done_callback(_retrieve)
            raise

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
            configure=self._configure_pooled,
            timeout=self._pool_timeout,
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
#: The same for ``plan_due``, which must read the planning index in order and stop after
#: its batch: with the slot filter and no statistics, the planner estimates a handful of
#: matching rows and would scan (or bitmap-scan) and sort the whole cursor table instead.
INDEX_WALK = ("SET enable_seqscan = off", ORDERED_WALK)
INDEX_WALK_END = ("RESET enable_seqscan", ORDERED_WALK_END)


def _session_settings(target: PostgresTarget, limits: Deadlines) -> tuple[list[str], list[str]]:
    """The ``SET`` statements of a new connection: (without, with) the call deadline.

    The isolation level is always pinned; the timeouts give way to a setting the URL's
    ``options`` (or ``PGOPTIONS``) names. Server-side keepalives and ``tcp_user_timeout``
    let the server notice a client that vanished and end its session (its locks with it)."""
    info = conninfo_to_dict(target.conninfo)
    options = str(info.get("options") or os.environ.get("PGOPTIONS", ""))
    given = {name.lower().replace("-", "_") for name in _OPTION_NAME.findall(options)}
    session = [
        "SET TIME ZONE 'UTC'",
        "SET default_transaction_isolation = 'read committed'",
    ]
    tunable = {
        "tcp_keepalives_idle": limits.keepalive_idle,
        "tcp_keepalives_interval": limits.keepalive_interval,
        "tcp_keepalives_count": limits.keepalive_count,
        "tcp_user_timeout": limits.user_timeout_ms,
    }
    session += [f"SET {name} = {value}" for name, value in tunable.items() if name not in given]
    bounded = list(session)
    if limits.call is not None and "statement_timeout" not in given:
        bounded.append(f"SET statement_timeout = {max(1, int(limits.call * 1000))}")
    return session, bounded


def _closed_by_server(conn: Conn) -> bool:
    """Whether an idle pooled connection has something to read: an idle session gets
    nothing from the server but the error and the end of file that close it. One poll of
    its socket with no wait, no round trip. Where that cannot be told, False: the call
    goes ahead on it, as it would without this look."""
    try:
        fd = conn.pgconn.socket
    except psycopg.OperationalError:
        return True  # closed already
    try:
        if _poll is None:  # Windows: select takes any socket there
            readable, _, _ = select.select([fd], [], [], 0)
            return bool(readable)
        # poll, not select: select refuses descriptors from 1024 on (a busy process).
        poller = _poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return False


_poll = getattr(select, "poll", None)


def _expire(conn: Conn, expired: list[bool]) -> None:
    expired.append(True)
    _cut(conn)


def _cut(conn: Conn) -> None:
    """Shut the connection's socket down: a pending read ends at once (libpq: "server
    closed the connection unexpectedly"), locally, whatever the network does; the
    connection is then broken and the pool discards it. Nothing waits for the peer."""
    try:
        fd = conn.pgconn.socket
    except psycopg.OperationalError:
        return  # closed already
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=os.dup(fd))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Read the outcome of a call whose caller has gone (no "never retrieved" warning)."""
    if not task.cancelled():
        task.exception()


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
