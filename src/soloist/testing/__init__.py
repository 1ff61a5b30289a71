"""Test helpers for soloist users and for soloist's own tests."""

from __future__ import annotations

from soloist.testing.clock import FakeClock
from soloist.testing.isolated import IsolatedStores
from soloist.testing.skew import SkewedClock
from soloist.testing.waiting import wait_until

__all__ = ["FakeClock", "IsolatedStores", "SkewedClock", "wait_until"]
