"""The etcd store's connection: one gRPC channel per event loop to the first member that
answers, the calls (each with a deadline, errors translated), leases, the watch that
wakes idle instances, and the server's clock.

The client library is ``aetcd`` (asyncio, gRPC): the store calls the generated etcd v3
stubs and messages of its ``aetcd.rpc`` module on a channel it opens itself, because
``aetcd.Client`` opens only plain-text channels (no ``etcds://``) and its ranges take no
``limit``.

The clock. etcd keeps no wall clock that a client can read; its leases count time on the
members. Times the store writes and compares (due times, lease expiries, elections) must
come from one clock for every instance, or an instance whose clock is 30 s fast would
reap the leases of healthy runners and run their work again. The store's clock is the
member's: every HTTP answer of an etcd member carries a ``Date`` header (whole seconds);
:class:`ServerClock` finds the instant the member's second turns over, by asking
``/version`` a few milliseconds apart, and keeps the offset from the local monotonic
clock (which no wall-clock step moves), measured again every minute. Its error is a few
milliseconds, and a skewed local clock does not change it.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar

import grpc
from aetcd import rpc

from soloist.clock import UTC
from soloist.errors import StoreError, StoreUnavailableError
from soloist.stores.deadlines import Deadlines
from soloist.stores.etcd.url import EtcdTarget

__all__ = ["Connections", "ServerClock", "prefix_end"]

#: gRPC codes that mean "the member could not be reached or did not answer in time".
_UNAVAILABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
}
#: How often the offset of the member's clock is measured again, in seconds.
CLOCK_REFRESH = 60.0
#: Seconds between two questions while waiting for the member's second to turn over.
_POLL = 0.005


def prefix_end(prefix: bytes) -> bytes:
    """The end of the key range of ``prefix`` (etcd's ``range_end``): the prefix with its
    last byte increased."""
    trimmed = prefix.rstrip(b"\xff")
    return trimmed[:-1] + bytes([trimmed[-1] + 1]) if trimmed else b"\0"


class Connections:
    """The channel and stubs of one store, per event loop (the CLI and tests run stores on
    several loops), with the calls the store makes."""

    def __init__(self, target: EtcdTarget, deadlines: Deadlines) -> None:
        self.target = target
        self.deadlines = deadlines
        #: A call waits at most this long (a store opened without a lease TTL: a minute).
        self.timeout = deadlines.call if deadlines.call is not None else 60.0
        self._loops: dict[int, _Channel] = {}
        self._endpoint = 0
        #: Set by :meth:`close_all`: the store was closed, and opens no channel again.
        self.closed = False

    # -- channel ---------------------------------------------------------------------------
    async def _channel(self) -> _Channel:
        if self.closed:
            raise StoreError(f"etcd store {self.target.display} is closed")
        key = id(asyncio.get_running_loop())
        found = self._loops.get(key)
        if found is not None:
            return found
        endpoint = self.target.endpoints[self._endpoint % len(self.target.endpoints)]
        channel = _Channel(self.target, endpoint)
        try:
            await channel.authenticate(self.timeout)
        except BaseException:
            # A member that does not answer, or refuses: the next call tries the next one.
            self._endpoint += 1
            with contextlib.suppress(Exception):
                await channel.close()
            raise
        self._loops[key] = channel
        return channel

    async def _drop(self) -> None:
        """Forget this loop's channel after a failure: the next call opens one to the next
        member of the URL."""
        channel = self._loops.pop(id(asyncio.get_running_loop()), None)
        self._endpoint += 1
        if channel is not None:
            with contextlib.suppress(Exception):
                await channel.close()

    async def close_all(self) -> None:
        """Close every channel; the store is closed: later calls raise StoreError."""
        self.closed = True
        channels, self._loops = list(self._loops.values()), {}
        for channel in channels:
            with contextlib.suppress(Exception):
                await channel.close()

    @contextlib.contextmanager
    def translated(self) -> Iterator[None]:
        """Driver errors become StoreError (StoreUnavailableError when the member could not
        be reached or did not answer in time), the password masked."""
        try:
            yield
        except grpc.aio.AioRpcError as exc:
            raise self.error(exc) from None
        except (OSError, asyncio.TimeoutError) as exc:
            raise StoreUnavailableError(
                f"etcd store {self.target.display} unavailable: {self.target.scrub(str(exc))}"
            ) from None

    def error(self, exc: grpc.aio.AioRpcError) -> StoreError:
        detail = self.target.scrub(exc.details() or str(exc.code()))
        if exc.code() in _UNAVAILABLE:
            return StoreUnavailableError(f"etcd store {self.target.display} unavailable: {detail}")
        return StoreError(f"etcd store {self.target.display}: {detail}")

    async def _call(self, name: str, method: str, request: Any) -> Any:
        """Call ``method``; a member that could not be reached at all (its channel never
        answered, so the request was not delivered) is left for the next one at once."""
        for left in range(len(self.target.endpoints) - 1, -1, -1):
            try:
                channel = await self._channel()
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNAVAILABLE and left:
                    continue
                raise
            stub = getattr(channel, name)
            try:
                reply = await getattr(stub, method)(
                    request, timeout=self.timeout, metadata=channel.metadata
                )
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                if code == grpc.StatusCode.UNAUTHENTICATED or code in _UNAVAILABLE:
                    await self._drop()  # an expired auth token or a member gone
                if code == grpc.StatusCode.UNAVAILABLE and not channel.answered and left:
                    continue
                raise
            channel.answered = True
            return reply
        raise AssertionError("unreachable: the last member's error is raised")

    # -- key-value -------------------------------------------------------------------------
    async def range(
        self,
        key: bytes,
        end: bytes | None = None,
        *,
        limit: int = 0,
        descending: bool = False,
        keys_only: bool = False,
        count_only: bool = False,
        revision: int = 0,
    ) -> Any:
        request = range_request(key, end, limit, descending, keys_only, count_only, revision)
        return await self._call("kv", "Range", request)

    async def txn(
        self, compare: Sequence[Any], success: Sequence[Any], failure: Sequence[Any] = ()
    ) -> Any:
        request = rpc.TxnRequest(compare=compare, success=success, failure=failure)
        return await self._call("kv", "Txn", request)

    # -- leases ----------------------------------------------------------------------------
    async def lease_grant(self, ttl: int) -> int:
        reply = await self._call("lease", "LeaseGrant", rpc.LeaseGrantRequest(TTL=ttl))
        return int(reply.ID)

    async def lease_keepalive(self, lease: int) -> int:
        """Refresh ``lease``; its TTL in seconds (0 or less: the lease is gone)."""
        channel = await self._channel()

        async def one() -> AsyncIterator[Any]:
            yield rpc.LeaseKeepAliveRequest(ID=lease)

        call = channel.lease.LeaseKeepAlive(one(), timeout=self.timeout, metadata=channel.metadata)
        try:
            async for reply in call:
                return int(reply.TTL)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in _UNAVAILABLE:
                await self._drop()
            raise
        finally:
            call.cancel()
        return 0

    async def lease_revoke(self, lease: int) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError):
            await self._call("lease", "LeaseRevoke", rpc.LeaseRevokeRequest(ID=lease))

    # -- watch -----------------------------------------------------------------------------
    async def watch(self, key: bytes, end: bytes, on_put: Callable[[bytes], None]) -> None:
        """Call ``on_put`` with the key of every PUT in ``[key, end)`` until cancelled or
        the stream breaks (then raises). Returns once the watch is created... never: it
        runs until cancelled; the created message is reported as ``on_put(b'')``."""
        channel = await self._channel()
        stop = asyncio.Event()

        async def requests() -> AsyncIterator[Any]:
            create = rpc.WatchCreateRequest(
                key=key, range_end=end, filters=[rpc.WatchCreateRequest.NODELETE]
            )
            yield rpc.WatchRequest(create_request=create)
            await stop.wait()

        call = channel.watch.Watch(requests(), metadata=channel.metadata)
        try:
            async for reply in call:
                if reply.created:
                    on_put(b"")
                if reply.canceled:
                    raise StoreUnavailableError(
                        f"etcd store {self.target.display}: watch cancelled "
                        f"({reply.cancel_reason or 'compacted'})"
                    )
                for event in reply.events:
                    on_put(bytes(event.kv.key))
            raise StoreUnavailableError(f"etcd store {self.target.display}: watch ended")
        finally:
            stop.set()
            call.cancel()


class _Channel:
    """One gRPC channel to one member, its stubs and its auth token."""

    def __init__(self, target: EtcdTarget, endpoint: str) -> None:
        self.target = target
        options = [
            ("grpc.keepalive_time_ms", 10_000),
            ("grpc.keepalive_timeout_ms", 5_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ]
        if target.tls:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=target.ca.read_bytes() if target.ca else None,
                private_key=target.key.read_bytes() if target.key else None,
                certificate_chain=target.cert.read_bytes() if target.cert else None,
            )
            self.channel = grpc.aio.secure_channel(endpoint, credentials, options=options)
        else:
            self.channel = grpc.aio.insecure_channel(endpoint, options=options)
        self.kv = rpc.KVStub(self.channel)
        self.lease = rpc.LeaseStub(self.channel)
        self.watch = rpc.WatchStub(self.channel)
        self.metadata: tuple[tuple[str, str], ...] | None = None
        #: Whether the member answered a call on this channel.
        self.answered = False

    async def authenticate(self, timeout: float) -> None:
        if self.target.user is None:
            return
        request = rpc.AuthenticateRequest(name=self.target.user, password=self.target.password)
        reply = await rpc.AuthStub(self.channel).Authenticate(request, timeout=timeout)
        self.metadata = (("token", reply.token),)

    async def close(self) -> None:
        await self.channel.close()


def range_request(
    key: bytes,
    end: bytes | None = None,
    limit: int = 0,
    descending: bool = False,
    keys_only: bool = False,
    count_only: bool = False,
    revision: int = 0,
) -> Any:
    """A Range request; ``revision`` 0 reads the newest revision, else that one."""
    return rpc.RangeRequest(
        key=key,
        range_end=end or b"",
        limit=limit,
        sort_order=rpc.RangeRequest.DESCEND if descending else rpc.RangeRequest.NONE,
        sort_target=rpc.RangeRequest.KEY,
        keys_only=keys_only,
        count_only=count_only,
        revision=revision,
    )


# -- the member's clock ------------------------------------------------------------------------
class ServerClock:
    """The clock of an etcd member, read from the ``Date`` header of its HTTP answers (see
    the module docstring): :meth:`now` is the local *monotonic* clock plus the measured
    offset, so that a step of the local wall clock (an NTP step, a resumed VM, a skew)
    changes nothing. The offset is measured again every :data:`CLOCK_REFRESH` seconds in
    the background; a measurement that fails keeps the last offset."""

    #: Offsets from the monotonic clock, and when measured, by cluster: the stores of one
    #: process share them.
    _known: ClassVar[dict[tuple[tuple[str, ...], bool], tuple[float, float]]] = {}

    def __init__(self, target: EtcdTarget) -> None:
        self.target = target
        self._lock = asyncio.Lock()
        self._refresh: asyncio.Task[None] | None = None

    @property
    def _key(self) -> tuple[tuple[str, ...], bool]:
        return (self.target.endpoints, self.target.tls)

    async def now(self) -> datetime:
        known = self._known.get(self._key)
        if known is None:
            async with self._lock:
                if self._key not in self._known:
                    await self.measure()
            known = self._known[self._key]
        elif time.monotonic() - known[1] > CLOCK_REFRESH and (
            self._refresh is None or self._refresh.done()
        ):
            self._refresh = asyncio.create_task(self._measure_quietly())
        return datetime.fromtimestamp(time.monotonic() + known[0], UTC)

    async def _measure_quietly(self) -> None:
        with contextlib.suppress(StoreUnavailableError):
            await self.measure()

    async def close(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
            with contextlib.suppress(BaseException):
                await self._refresh
            self._refresh = None

    async def measure(self) -> None:
        """Measure the offset now (a second or two at most)."""
        try:
            offset = await asyncio.to_thread(self._measure)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise StoreUnavailableError(
                f"etcd store {self.target.display}: cannot read the member's clock: {exc}"
            ) from None
        self._known[self._key] = (offset, time.monotonic())

    def _measure(self) -> float:
        """The offset from the first member that answers."""
        failure: Exception | None = None
        for endpoint in self.target.endpoints:
            try:
                return self._measure_member(endpoint)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                failure = exc
        assert failure is not None
        raise failure

    def _measure_member(self, endpoint: str) -> float:
        host, _, port = endpoint.rpartition(":")
        host = host.strip("[]")
        conn: http.client.HTTPConnection
        if self.target.tls:
            context = ssl.create_default_context(
                cafile=str(self.target.ca) if self.target.ca else None
            )
            if self.target.cert and self.target.key:
                context.load_cert_chain(str(self.target.cert), str(self.target.key))
            conn = http.client.HTTPSConnection(host, int(port), timeout=2, context=context)
        else:
            conn = http.client.HTTPConnection(host, int(port), timeout=2)
        try:
            first: float | None = None
            previous = (0.0, 0.0)
            deadline = time.monotonic() + 2.5
            while time.monotonic() < deadline:
                sent = time.monotonic()
                conn.request("GET", "/version")
                reply = conn.getresponse()
                reply.read()
                received = time.monotonic()
                date = reply.getheader("Date")
                if date is None:
                    raise ValueError("the member's answer has no Date header")
                second = parsedate_to_datetime(date).timestamp()
                if first is None:
                    first = second
                elif second > first:
                    # The member's second turned over after it answered the previous
                    # question and before it answered this one.
                    turned = (previous[0] + received) / 2
                    return second - turned
                previous = (sent, received)
                time.sleep(_POLL)
            raise ValueError("the member's Date header did not change for 2.5 s")
        finally:
            conn.close()
