"""A named long-running loop with start/stop that is safe to call twice.

Each service does one thing per ``tick`` and says how long to wait before the next one;
``wake()`` cuts the wait short (new work arrived). A tick that raises is logged and
retried with backoff: a store outage must not kill the loop.

Every service is built from the same :class:`ServiceBundle` (after River's
``baseservice.Archetype``): the clock, for both wall and monotonic time (no service reads
the system clock itself, so a ``FakeClock`` drives every deadline), the instance id, the
logger and the metrics (:data:`~soloist.metrics.NO_METRICS` unless given). The
:class:`~soloist.runtime.Runtime` makes one bundle and hands it to each service.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from soloist.clock import Clock
from soloist.errors import StoreDataLostError, StoreError
from soloist.metrics import NO_METRICS, RuntimeMetrics

log = logging.getLogger("soloist")

#: The longest pause after failed ticks. Short: a terminated connection is usually
#: replaced at once, and a planner or executor that backs off for long misses instants.
MAX_ERROR_BACKOFF = 1.0
#: After this many failures in a row, only every LOG_EVERY-th is logged at WARNING.
LOG_FIRST = 3
LOG_EVERY = 30


def cancel_requested() -> bool:
    """Whether the running task has been asked to cancel (as opposed to a CancelledError
    that escaped from something it awaited, such as a driver that cut its connection)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return bool(cancelling()) if cancelling is not None else True


@dataclass(frozen=True)
class LeaseTiming:
    """How a holder of a lease in the store times itself (leadership, planning
    partitions): it renews every quarter of the TTL, trusts the lease for three quarters of
    it after the *start* of its last successful renewal (on its own monotonic clock: the
    store extended the lease at some instant after that start, so the lease outlives the
    trust by a quarter TTL), and one without the lease looks for it every ``poll``."""

    renew: float
    trust: float
    poll: float

    #: Who waits for a lease looks at least this often.
    MAX_POLL = 0.5

    @classmethod
    def of(cls, ttl: timedelta) -> LeaseTiming:
        seconds = ttl.total_seconds()
        return cls(seconds / 4, seconds * 3 / 4, min(cls.MAX_POLL, seconds / 4))


@dataclass(frozen=True)
class ServiceBundle:
    """What every service of one instance is built with."""

    #: Wall time (``now``), monotonic time (deadlines) and sleeping.
    clock: Clock
    instance_id: str
    logger: logging.Logger = field(default=log)
    metrics: RuntimeMetrics = field(default=NO_METRICS)


class Service(abc.ABC):
    """Base of planner, executor, heartbeater, reaper, elector and registrar."""

    name = "service"

    def __init__(self, bundle: ServiceBundle) -> None:
        self.bundle = bundle
        self.clock = bundle.clock
        self.instance_id = bundle.instance_id
        self.logger = bundle.logger
        self.metrics = bundle.metrics
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self.stopping = False
        self._errors = 0
        #: Set by the Runtime: reports a store that lost its data and sets it up again
        #: (:mod:`soloist.runtime.recovery`); then the tick runs again at once.
        self.on_data_lost: Callable[[StoreDataLostError], Awaitable[None]] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        if self._task is not None:
            return
        self.stopping = False
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._main(), name=f"soloist-{self.name}")
        self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """A loop must only end when asked to: say so loudly if it ends otherwise."""
        if self.stopping:
            return
        reason = "cancelled" if task.cancelled() else repr(task.exception())
        self.logger.error(
            "%s stopped unexpectedly (%s): this instance no longer %s",
            self.name,
            reason,
            self.name,
            extra={"action": "service_died", "service": self.name, "instance_id": self.instance_id},
        )

    async def stop(self) -> None:
        """Ask the loop to finish its tick and exit, then wait for it. Safe twice."""
        task = self._task
        if task is None:
            return
        self.stopping = True
        self.wake()
        try:
            await task
        except asyncio.CancelledError:
            if not task.cancelled():
                raise
        self._task = None
        self.log(logging.DEBUG, "stopped", action="stop")

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    @abc.abstractmethod
    async def tick(self) -> float:
        """Do one round of work; return the seconds to wait before the next round."""

    async def _main(self) -> None:
        self.log(logging.DEBUG, "started", action="start")
        while not self.stopping:
            try:
                delay = await self.tick()
                self._errors = 0
            except asyncio.CancelledError as exc:
                if self.stopping or cancel_requested():
                    raise
                # Nobody cancelled this loop: a CancelledError escaped from a call it made
                # (a driver cutting a connection, a cancelled inner task). It is an error
                # of that call; the loop must go on, or the instance silently stops working.
                delay = self._tick_failed(exc)
            except StoreDataLostError as exc:
                delay = await self._data_lost(exc)
            except Exception as exc:
                delay = self._tick_failed(exc)
            if not self.stopping:
                try:
                    await self.wait(delay)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # a wait that needs the store (wake-ups) failed
                    await self.clock.sleep(self._tick_failed(exc))

    def _tick_failed(self, exc: BaseException) -> float:
        """Count and log a failed tick; the delay before the next one."""
        self._errors += 1
        if isinstance(exc, StoreError):
            self.metrics.store_error(self.name)
        delay: float = min(MAX_ERROR_BACKOFF, 0.1 * 2**self._errors)
        loud = self._errors <= LOG_FIRST or self._errors % LOG_EVERY == 0
        self.log(
            logging.WARNING if loud else logging.DEBUG,
            "%s failed (%s: %s); retrying in %.1fs",
            self.name,
            type(exc).__name__,
            exc,
            delay,
            action="error",
        )
        return delay

    async def _data_lost(self, exc: StoreDataLostError) -> float:
        """Hand ``exc`` to :attr:`on_data_lost`; the delay before the next tick."""
        try:
            if self.on_data_lost is None:
                raise exc
            await self.on_data_lost(exc)
        except Exception as failed:
            self._errors += 1
            self.metrics.store_error(self.name)
            delay: float = min(MAX_ERROR_BACKOFF, 0.1 * 2**self._errors)
            self.log(
                logging.WARNING,
                "%s failed (%s: %s); retrying in %.1fs",
                self.name,
                type(failed).__name__,
                failed,
                delay,
                action="error",
            )
            return delay
        self._errors = 0
        return 0.0

    async def wait(self, seconds: float) -> None:
        """Sleep on the service clock for ``seconds``, or until woken or stopped."""
        wake = self._wake
        assert wake is not None
        if not wake.is_set() and seconds > 0:
            sleeper = asyncio.ensure_future(self.clock.sleep(seconds))
            waiter = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                waiter.cancel()
        wake.clear()

    def log(
        self,
        level: int,
        msg: str,
        *args: Any,
        action: str,
        exc_info: bool = False,
        **fields: Any,
    ) -> None:
        if not self.logger.isEnabledFor(level):
            return
        self.logger.log(
            level,
            msg,
            *args,
            exc_info=exc_info,
            extra={"action": action, "service": self.name, "instance_id": self.instance_id}
            | fields,
        )
