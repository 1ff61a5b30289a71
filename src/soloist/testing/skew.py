"""A system clock that is wrong by a fixed offset, to prove that instance clock skew does
not matter (the stores plan and lease on their own clock)."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from soloist.clock import SystemClock


class SkewedClock(SystemClock):
    """The system clock shifted by ``offset`` (``now()`` only; sleeping and monotonic
    time are real, as they would be on a machine whose wall clock is wrong)."""

    def __init__(self, offset: timedelta) -> None:
        self.offset = offset

    def now(self) -> datetime:
        return super().now() + self.offset

    @classmethod
    def from_env(cls, name: str = "SOLOIST_TEST_CLOCK_OFFSET") -> SkewedClock | None:
        """The clock skewed by the seconds in env ``name``, or None if it is not set."""
        value = os.environ.get(name)
        return cls(timedelta(seconds=float(value))) if value else None
