"""A clock that tests move by hand: no sleeping for time to pass."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone


class FakeClock:
    """A :class:`soloist.clock.Clock` whose time only moves when the test calls
    :meth:`advance` (or :meth:`set`). ``sleep`` returns once the clock has been moved past
    the sleeper's deadline."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=timezone.utc)
        if self._now.tzinfo is None:
            raise ValueError(f"FakeClock start {start!r} must be an aware datetime")
        self._now = self._now.astimezone(timezone.utc)
        self._start = self._now
        self._sleepers: list[tuple[datetime, asyncio.Future[None]]] = []

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        """Seconds since this clock was made; moves only with :meth:`advance`."""
        return (self._now - self._start).total_seconds()

    async def sleep(self, seconds: float) -> None:
        deadline = self._now + timedelta(seconds=max(0.0, seconds))
        if deadline <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((deadline, future))
        try:
            await future
        finally:
            self._sleepers = [(d, f) for d, f in self._sleepers if f is not future]

    def advance(self, seconds: float | timedelta) -> datetime:
        """Move time forward and wake every sleeper whose deadline has passed."""
        delta = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        return self.set(self._now + delta)

    def set(self, moment: datetime) -> datetime:
        if moment < self._now:
            raise ValueError(f"FakeClock cannot go back from {self._now} to {moment}")
        self._now = moment
        for deadline, future in list(self._sleepers):
            if deadline <= moment and not future.done():
                future.set_result(None)
        return moment

    @property
    def sleepers(self) -> int:
        """How many coroutines are waiting on this clock (tests wait for this to settle)."""
        return sum(1 for _, f in self._sleepers if not f.done())
