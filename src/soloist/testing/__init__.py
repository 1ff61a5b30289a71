"""Test helpers for soloist users and for soloist's own tests."""

from __future__ import annotations

from soloist.testing.clock import FakeClock

__all__ = ["FakeClock"]
