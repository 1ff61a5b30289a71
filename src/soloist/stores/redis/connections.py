"""Connections of one Redis store: a client (with its connection pool) per event loop, a
pub/sub subscription for wake-ups, the Lua scripts called by SHA, and the translation of
driver errors into soloist's.

redis-py's asyncio connections belong to the loop that opened them. The sync API of
soloist runs short calls on other loops (a private one, or ``asyncio.run`` per call), so
clients are kept per loop; a client whose loop has ended is dropped (its sockets are
closed by the garbage collector: they cannot be closed politely without their loop).

Dead connections (see :mod:`soloist.stores.deadlines`): a reply not read within the socket
timeout (the lease TTL, unless the URL sets one) fails the call and closes its connection;
TCP keepalives and ``TCP_USER_TIMEOUT`` drop a connection to a peer that stopped answering,
also while it is idle. A subscription gets no replies to wait for, so it is checked by
hand: after half a socket timeout without a message, a ``PING`` is sent on it, and a
subscription that has not answered within a socket timeout is dropped
(StoreUnavailableError), so a wait never listens to a dead connection for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.connection import BlockingConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from soloist.errors import StoreError, StoreUnavailableError
from soloist.stores.deadlines import Deadlines
from soloist.stores.redis.url import RedisTarget

__all__ = ["SCRIPTS", "Connections", "script_source"]

#: The scripts, each run as ``lib.lua`` followed by its own body (see lua/).
SCRIPTS = (
    *("insert", "claim", "runner", "reap", "read", "leader", "jobs", "instances"),
    *("plan", "partitions"),
    *("prune", "pages"),
)


@cache
def script_source(name: str) -> str:
    """The full source of script ``name``: the shared head, then its body."""
    folder = resources.files("soloist.stores.redis") / "lua"
    lib = (folder / "lib.lua").read_text(encoding="utf-8")
    return lib + "\n" + (folder / f"{name}.lua").read_text(encoding="utf-8")


@cache
def script_sha(name: str) -> str:
    return hashlib.sha1(script_source(name).encode("utf-8")).hexdigest()  # noqa: S324 (Redis' name)


class Connections:
    """Clients (per event loop) and the wake-up subscription of one store. Thread-safe."""

    def __init__(
        self,
        target: RedisTarget,
        *,
        deadlines: Deadlines | None = None,
        max_connections: int = 16,
    ) -> None:
        self.target = target
        self.deadlines = deadlines or Deadlines.from_ttl(None)
        self._max_connections = max_connections
        # The subscription's liveness: when it last proved alive (loop time), and when a
        # PING was sent on it that has not been answered yet.
        self._heard = 0.0
        self._pinged: float | None = None
        self._lock = threading.Lock()
        self._clients: dict[asyncio.AbstractEventLoop, aioredis.Redis] = {}
        self._pubsub: tuple[asyncio.AbstractEventLoop, PubSub] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self.closed = False

    # -- errors -----------------------------------------------------------------------------
    @contextmanager
    def translated(self) -> Iterator[None]:
        """Driver errors as StoreError: StoreUnavailableError when the server cannot be
        reached or does not answer in time. Messages name the server, never the password."""
        try:
            yield
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailableError(self._message(exc)) from None
        except RedisError as exc:
            raise StoreError(self._message(exc)) from None

    def _message(self, exc: BaseException) -> str:
        text = self.target.scrub(str(exc)).strip() or type(exc).__name__
        return f"Redis store {self.target.display}: {text}"

    # -- clients ----------------------------------------------------------------------------
    def client(self) -> aioredis.Redis:
        """The client of the running event loop, made on first use (it connects lazily)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.closed:
                raise StoreError(f"Redis store {self.target.display} is closed")
            found = self._clients.get(loop)
            if found is None:
                for old in [old for old in self._clients if old.is_closed()]:
                    del self._clients[old]
                found = self._clients[loop] = self._new_client()
            return found

    def _new_client(self) -> aioredis.Redis:
        # A blocking pool: a call made while every connection is busy waits for one (up to
        # the connect timeout) instead of failing at once with "Too many connections".
        pool = BlockingConnectionPool.from_url(
            self.target.driver_url,
            decode_responses=True,
            socket_timeout=self.target.socket_timeout,
            socket_connect_timeout=self.target.socket_connect_timeout,
            max_connections=self._max_connections,
            timeout=self.target.socket_connect_timeout,
            # No silent retries: a script may have run before its reply was lost, and
            # running a claim or a completion twice is not the same as once. The runtime
            # backs off and calls again, knowing what it asks for.
            retry=Retry(NoBackoff(), 0),
            # RESP2, which the scripts' replies are read as (redis-py 8 defaults to RESP3).
            # It also keeps the pool's look at a connection before each call: one that has
            # something to read (the server closed it: CLIENT KILL, a restart, an idle
            # timeout) is replaced before a command is sent on it. With RESP3, redis-py 8
            # turns that look off for its maintenance notifications.
            protocol=2,
            client_name="soloist",
            socket_keepalive=True,
            socket_keepalive_options=_keepalive_options(self.deadlines),
        )
        client: aioredis.Redis = aioredis.Redis.from_pool(pool)  # closes the pool with it
        return client

    async def run(self, name: str, args: Sequence[object]) -> Any:
        """Run script ``name`` with ``args`` (after the common four: base, now, history
        bounds) by SHA, loading it first when the server does not know it (a new or
        restarted server, SCRIPT FLUSH). Driver errors raised: call inside translated()."""
        client: Any = self.client()  # redis-py's types mix its sync and async faces
        try:
            return await client.evalsha(script_sha(name), 0, *args)
        except NoScriptError:
            await client.script_load(script_source(name))
            return await client.evalsha(script_sha(name), 0, *args)

    async def load_scripts(self) -> None:
        """Load every script into the server's script cache (SCRIPT LOAD)."""
        client: Any = self.client()
        for name in SCRIPTS:
            sha = await client.script_load(script_source(name))
            if sha != script_sha(name):
                raise StoreError(f"Redis store {self.target.display}: script {name} got SHA {sha}")

    # -- waking -----------------------------------------------------------------------------
    async def subscription(self, limit: float | None = None) -> tuple[PubSub, bool]:
        """The wake-up subscription of the running loop, and whether it is new (made by
        this call: wake-ups published before it existed were not received). Making one
        takes at most ``limit`` seconds (default: the socket timeout), else
        StoreUnavailableError."""
        loop = asyncio.get_running_loop()
        current = self._pubsub
        if current is not None and current[0] is loop:
            return current[1], False
        self.drop_subscription()
        pubsub = self.client().pubsub()
        budget = min(limit, self.target.socket_timeout) if limit else self.target.socket_timeout
        try:
            # Connecting, SUBSCRIBE and its confirmation (so that later reads only see
            # wake-ups) within the budget: a server that accepts but does not answer must
            # not hold a short wait for the whole socket timeout.
            await asyncio.wait_for(self._subscribe(pubsub), budget)
        except asyncio.TimeoutError:
            self._close_later(pubsub)
            raise StoreUnavailableError(
                f"Redis store {self.target.display}: no answer to SUBSCRIBE within {budget:g}s"
            ) from None
        except BaseException:
            self._close_later(pubsub)
            raise
        self._pubsub = (loop, pubsub)
        self._heard, self._pinged = loop.time(), None
        return pubsub, True

    async def wake_message(self, pubsub: PubSub, timeout: float) -> dict[str, Any] | None:
        """The next message of the subscription within ``timeout`` seconds, else None.
        After half a socket timeout without any message a PING is sent; when it has not
        been answered (or anything else received) within the socket timeout, the
        subscription is dead: StoreUnavailableError (call inside translated(); the caller
        drops the subscription)."""
        loop = asyncio.get_running_loop()
        limit = self.target.socket_timeout
        now = loop.time()
        if self._pinged is None and now - self._heard >= limit / 2:
            await pubsub.ping()  # only sent: the answer comes as a "pong" message
            self._pinged = now
        if self._pinged is not None:
            overdue = self._pinged + limit - now
            if overdue <= 0:
                raise StoreUnavailableError(
                    f"Redis store {self.target.display}: the wake-up subscription did not "
                    f"answer PING within {limit:g}s"
                )
            timeout = min(timeout, overdue)
        # Every reply counts as heard, so none is filtered out here (the caller keeps the
        # "message" ones): redis-py 8 with decode_responses parses a subscribed PING's reply
        # as "PONG" instead of ["pong", ""], and ignore_subscribe_messages would drop it.
        message: dict[str, Any] | None = await pubsub.get_message(
            ignore_subscribe_messages=False, timeout=max(0.0, timeout)
        )
        if message is not None:
            self._heard, self._pinged = loop.time(), None
        return message

    async def _subscribe(self, pubsub: PubSub) -> None:
        await pubsub.subscribe(self.target.channel)
        while True:
            message = await pubsub.get_message(timeout=self.target.socket_timeout)
            if message is not None and message.get("type") == "subscribe":
                return

    def drop_subscription(self) -> None:
        """Forget the subscription (closed in the background if its loop runs); the next
        wait subscribes again."""
        current, self._pubsub = self._pubsub, None
        if current is not None and current[0] is _running_loop():
            self._close_later(current[1])

    def _close_later(self, pubsub: PubSub) -> None:
        task = asyncio.get_running_loop().create_task(_quietly(_closer(pubsub)))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    # -- closing ----------------------------------------------------------------------------
    async def close_all(self) -> None:
        """Close the client of the running loop and forget the others; later calls raise
        StoreError. Idempotent."""
        with self._lock:
            self.closed = True
            clients, self._clients = self._clients, {}
        current, self._pubsub = self._pubsub, None
        running = asyncio.get_running_loop()
        if current is not None and current[0] is running:
            await _quietly(_closer(current[1]))
        for loop, client in clients.items():
            if loop is running:
                await _quietly(client.aclose())
            elif loop.is_running():  # a loop in another thread: close it there
                future = asyncio.run_coroutine_threadsafe(_quietly(client.aclose()), loop)
                await asyncio.wait([asyncio.wrap_future(future)], timeout=5)
        if self._closing:
            await asyncio.wait(set(self._closing), timeout=5)


def _keepalive_options(deadlines: Deadlines) -> dict[int, int]:
    """TCP keepalive and user timeout socket options (those this platform has)."""
    wanted = {
        "TCP_KEEPIDLE": deadlines.keepalive_idle,
        "TCP_KEEPINTVL": deadlines.keepalive_interval,
        "TCP_KEEPCNT": deadlines.keepalive_count,
        "TCP_USER_TIMEOUT": deadlines.user_timeout_ms,
    }
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _closer(closable: Any) -> Any:
    """``closable.aclose()`` (untyped in redis-py)."""
    return closable.aclose()


async def _quietly(closing: Any) -> None:
    # Closing a broken connection: nothing is left to release.
    with contextlib.suppress(RedisError, OSError, RuntimeError):
        await closing
