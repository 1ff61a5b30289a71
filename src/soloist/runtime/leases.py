"""Lease upkeep: the heartbeater renews this instance's leases, the reaper frees dead ones.

The heartbeater renews every running occurrence of this instance in one store call each
``heartbeat`` (a fraction of the lease TTL). Each renewal has a deadline (no later than the
earliest lease deadline), and a renewal extends a lease from when it was *sent*. A failed
renewal is logged and tried again at the next beat: the heartbeater never backs off longer
than its interval. Once a run's lease has gone unrenewed until ``sent + ttl - margin``
(see :func:`~soloist.runtime.executor.lease_margin`) this instance stops trusting it: the
handler is told (``ctx.lease_lost``; async handlers are cancelled) and nothing is written,
so the occurrence runs again once reaped. The heartbeater wakes at that deadline, not at
its next beat, so this happens before the store can expire the lease. A renewal also reports
the runs whose cancellation was requested (no round trip of its own): the executor stops
them (:meth:`~soloist.runtime.executor.Executor.cancel`).

The reaper runs on every instance: it turns ``running`` occurrences whose lease expired
(their runner died, froze, or lost the store) back into claimable ones: a crash is not a
failure, it spends no retry, but each occurrence survives at most ``max_crashes`` of them
(then it is ``dead`` with ``crash_loop``). Reaping is one atomic store statement, so all
instances may reap at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from soloist.errors import StoreError
from soloist.models import State
from soloist.runtime.executor import Executor
from soloist.runtime.service import Service, ServiceBundle
from soloist.stores.base import Store

#: The shortest sleep of the heartbeater (a deadline just ahead is not worth less).
MIN_WAKE = 0.01
#: The first pause after a failed renewal; it doubles up to the heartbeat interval.
FIRST_RETRY = 0.1


class Heartbeater(Service):
    name = "heartbeater"

    def __init__(self, bundle: ServiceBundle, executor: Executor, interval: timedelta) -> None:
        super().__init__(bundle)
        self.executor = executor
        self.interval = interval.total_seconds()
        self.failures = 0

    async def tick(self) -> float:
        executor = self.executor
        runs = list(executor.active.values())
        wait = self.interval
        if runs:
            try:
                # At a deadline the renewal gets only what is left of it (a short try).
                await executor.renew(runs)
                self.failures = 0
            except Exception as exc:
                # A broken connection is usually replaced at once: try again soon, and
                # never later than the next beat.
                self._failed(exc)
                wait = min(wait, FIRST_RETRY * 2 ** (self.failures - 1))
        earliest = executor.check_leases()
        if earliest is None:
            return wait
        until = earliest - self.clock.monotonic()
        return max(MIN_WAKE, min(wait, until))

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        if isinstance(exc, (StoreError, TimeoutError)):
            self.metrics.store_error("lease_renew")
        self.log(
            logging.WARNING if self.failures <= 3 else logging.DEBUG,
            "renewing %d lease(s) failed (%s: %s); trying again within %.1fs",
            len(self.executor.active),
            type(exc).__name__,
            exc,
            self.interval,
            action="renew_failed",
        )


class Reaper(Service):
    name = "reaper"

    def __init__(
        self,
        bundle: ServiceBundle,
        store: Store,
        interval: timedelta,
        on_reaped: Callable[[], None],
    ) -> None:
        super().__init__(bundle)
        self.store = store
        self.interval = interval.total_seconds()
        self.on_reaped = on_reaped
        self.reaped_total = 0

    async def tick(self) -> float:
        reaped = await self.store.occurrence_reap()
        for occ in reaped:
            self.reaped_total += 1
            self.metrics.lease_stolen(occ.job)
            dead = occ.state is State.DEAD
            self.log(
                logging.ERROR if dead else logging.WARNING,
                "lease of %s (plan %s, attempt %d) held by %s expired: %s",
                occ.job,
                occ.plan_time.isoformat(),
                max(occ.attempt, 1) if dead else occ.attempt + 1,
                occ.instance_id,
                f"crashed {occ.crashes} times (max_crashes={occ.max_crashes}): dead "
                "(crash_loop), its runner keeps dying"
                if dead
                else f"runs again (crash {occ.crashes} of {occ.max_crashes} allowed)",
                action="lease_expired",
                job=occ.job,
                scope=occ.scope,
                plan_time=occ.plan_time.isoformat(),
                execution_id=occ.id,
            )
        if reaped:
            self.on_reaped()
        return self.interval
