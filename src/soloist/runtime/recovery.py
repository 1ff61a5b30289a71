"""Setting the store up again after it lost its data.

A Redis server restarted without persistence, or flushed, forgets everything soloist
wrote: jobs, dynamic schedules, plan cursors, occurrences, history, leases. Without a
check, the instances would only see symptoms (a lost lease, a lost leadership) and the
planner would quietly start again at ``now``. The store notices instead: its identity,
written when it was set up, is missing or different on the next instance heartbeat or
leader election, and it raises :class:`~soloist.errors.StoreDataLostError`.

A service whose tick raises that error hands it to :meth:`StoreRecovery.recover` (its
``on_data_lost`` hook), which, once per loss and instance:

* logs one ERROR naming the store and the cause, and counts it
  (``soloist_store_data_lost_total``);
* sets the store up again: ``migrate`` (a new identity, or the one another instance that
  noticed first already wrote) and records the jobs defined in code again;
* until that succeeds, readiness fails (a store without the schema); afterwards the loss
  is a readiness *warning* for :data:`NOTICE_S` and stays in ``/status``.

Dynamic schedules, queued tasks and history written before the loss are not restored:
nothing holds them any more. The ERROR says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from soloist.errors import StoreDataLostError
from soloist.runtime.service import ServiceBundle

__all__ = ["NOTICE_S", "StoreRecovery"]

#: How long after a loss ``/readyz`` still mentions it (as a warning, status 200).
NOTICE_S = 3600.0


class StoreRecovery:
    """Reacts to :class:`StoreDataLostError` for one instance; ``set_up`` migrates the
    store and records the code-defined jobs again."""

    def __init__(self, bundle: ServiceBundle, set_up: Callable[[], Awaitable[None]]) -> None:
        self.clock = bundle.clock
        self.instance_id = bundle.instance_id
        self.logger = bundle.logger
        self.metrics = bundle.metrics
        self._set_up = set_up
        #: Losses noticed by this instance.
        self.count = 0
        self.last_error: StoreDataLostError | None = None
        self.last_at: datetime | None = None
        self._last_seen = float("-inf")
        #: True from a loss until the store is set up again.
        self.pending = False
        #: The identities whose loss was reported (one ERROR per loss, whoever notices).
        self._reported: set[str] = set()
        self._lock = asyncio.Lock()

    async def recover(self, exc: StoreDataLostError) -> None:
        """Report the loss ``exc`` (once) and set the store up again (unless done since).
        Raises what setting up raises (the store may be unreachable): the caller retries."""
        async with self._lock:
            if exc.expected in self._reported:
                if not self.pending:
                    return  # set up again already, after this same loss
            else:
                self._report(exc)
            await self._set_up()
            self.pending = False
        self.logger.info(
            "set the store up again after it lost its data: the schema and the jobs "
            "defined in code are back; planning starts again from now",
            extra={"action": "store_set_up_again", "instance_id": self.instance_id},
        )

    def _report(self, exc: StoreDataLostError) -> None:
        self._reported.add(exc.expected)
        self.count += 1
        self.pending = True
        self.last_error = exc
        self.last_at = self.clock.now()
        self._last_seen = self.clock.monotonic()
        self.metrics.store_data_lost()
        self.logger.error(
            "%s; setting it up again (schema, jobs defined in code); dynamic schedules, "
            "queued tasks and history are not restored, and planning starts again from now",
            exc,
            extra={"action": "store_data_lost", "instance_id": self.instance_id},
        )

    # -- what readiness and /status show ----------------------------------------------------
    def problem(self) -> str | None:
        """Why this instance is not ready, while the store has not been set up again."""
        if self.pending and self.last_error is not None:
            return f"{self.last_error} (not set up again yet)"
        return None

    def warning(self) -> str | None:
        """The last loss, for :data:`NOTICE_S` after it was noticed."""
        if self.last_error is None or self.pending:
            return None
        if self.clock.monotonic() - self._last_seen > NOTICE_S:
            return None
        return str(self.last_error)

    def report(self) -> dict[str, Any] | None:
        """The ``store_data_lost`` field of ``/status``: None if never."""
        if self.last_error is None or self.last_at is None:
            return None
        return {
            "count": self.count,
            "last_at": self.last_at.isoformat(),
            "error": str(self.last_error),
            "set_up_again": not self.pending,
        }
