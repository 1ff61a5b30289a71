"""Lease upkeep: the heartbeater renews this instance's leases, the reaper frees dead ones.

The heartbeater renews every running occurrence of this instance in one store call each
``heartbeat`` (a fraction of the lease TTL). If the store cannot be reached, renewals fail;
once a run's lease has gone unrenewed for a whole TTL this instance stops trusting it
(another instance may have reaped it): the handler is told (``ctx.lease_lost``; async
handlers are cancelled) and its result will be fenced out.

The reaper runs on every instance: it turns ``running`` occurrences whose lease expired
(their runner died, or froze) into retries or ``dead`` with ``lease_expired``. Reaping is
one atomic store statement, so all instances may reap at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from soloist.clock import Clock, monotonic
from soloist.runtime.executor import Executor
from soloist.runtime.service import Service
from soloist.stores.base import Store


class Heartbeater(Service):
    name = "heartbeater"

    def __init__(
        self, clock: Clock, instance_id: str, executor: Executor, interval: timedelta
    ) -> None:
        super().__init__(clock, instance_id)
        self.executor = executor
        self.interval = interval.total_seconds()

    async def tick(self) -> float:
        runs = list(self.executor.active.values())
        if runs:
            try:
                await self.executor.renew([r.occ.id for r in runs])
            finally:
                now = monotonic()
                for run in runs:
                    if now >= run.lease_deadline:
                        self.executor.lose(run)
        return self.interval


class Reaper(Service):
    name = "reaper"

    def __init__(
        self,
        clock: Clock,
        instance_id: str,
        store: Store,
        interval: timedelta,
        on_reaped: Callable[[], None],
    ) -> None:
        super().__init__(clock, instance_id)
        self.store = store
        self.interval = interval.total_seconds()
        self.on_reaped = on_reaped
        self.reaped_total = 0

    async def tick(self) -> float:
        reaped = await self.store.occurrence_reap()
        for occ in reaped:
            self.reaped_total += 1
            if self.metrics is not None:
                self.metrics.lease_stolen(occ.job)
            self.log(
                logging.WARNING,
                "lease of %s (plan %s, attempt %d) held by %s expired: %s",
                occ.job,
                occ.plan_time.isoformat(),
                occ.attempt,
                occ.instance_id,
                "will retry" if occ.state.value == "failed" else "dead",
                action="lease_expired",
                job=occ.job,
                scope=occ.scope,
                plan_time=occ.plan_time.isoformat(),
                execution_id=occ.id,
            )
        if reaped:
            self.on_reaped()
        return self.interval
