"""A private event loop in a daemon thread, for sync calls made while no scheduler loop runs.

A Django view or a script calls ``app.enqueue(...)``: there is no running soloist loop to
hand the call to. Running each call on a fresh ``asyncio.run`` loop would open, migrate and
close the store every time (a new connection pool per request on PostgreSQL). The portal
keeps one loop alive instead, so the store it opens stays open and warm, and calls from
many threads at once run concurrently on it. After ``os.fork`` (a pre-forking server) the
child gets a portal of its own: the parent's thread does not exist there.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Portal:
    """One event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="soloist-portal", daemon=True
        )
        self._thread.start()

    @property
    def usable(self) -> bool:
        """False in a forked child or after :meth:`close`."""
        return self.pid == os.getpid() and self._thread.is_alive()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the portal's loop and wait for its result (from any thread but
        the portal's own)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        """Stop the loop and its thread. Safe twice."""
        if self.usable:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()
