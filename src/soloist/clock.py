"""Time is injected: services read a :class:`Clock` instead of the system clock.

``SystemClock`` is the real one. ``FakeClock`` (in :mod:`soloist.testing`) lets tests move
time forward without sleeping.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from typing import Protocol, runtime_checkable

UTC = timezone.utc


@runtime_checkable
class Clock(Protocol):
    """Where soloist reads the time and waits for it to pass."""

    def now(self) -> datetime:
        """The current time, an aware UTC datetime."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time (cancellable)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps (for local deadlines such as trust windows)."""
        ...


class SystemClock:
    """The operating system's wall and monotonic clocks; sleeps with asyncio. (The only
    place the runtime's time comes from the system: services read their bundle's clock.)"""

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def monotonic(self) -> float:
        return time.monotonic()


def to_epoch_us(moment: datetime) -> int:
    """Microseconds since the Unix epoch of an aware datetime (exact, sortable)."""
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_epoch_us(value: int) -> datetime:
    """The aware UTC datetime of :func:`to_epoch_us`."""
    seconds, micros = divmod(value, 1_000_000)
    return datetime.fromtimestamp(seconds, UTC).replace(microsecond=micros)


def cpu_time() -> float:
    """CPU seconds used by the calling thread (not a clock of time passing: a measure of
    work, for reports such as the planner's)."""
    return time.thread_time()
