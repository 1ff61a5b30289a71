"""Waiting on a condition with a deadline: how tests of real processes wait, never by
sleeping a fixed time and hoping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T], what: str, timeout: float = 30.0, interval: float = 0.1
) -> T:
    """Call ``probe`` every ``interval`` seconds until it returns something truthy, and
    return that; raise AssertionError naming ``what`` (and the last value) on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.1f}s waiting for {what}; last: {value!r}"
            )
        time.sleep(interval)
