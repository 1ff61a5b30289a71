"""The services one instance runs: planner, executor, heartbeater and reaper.

:class:`Runtime` wires them to one store and one registry and starts and stops them in
the right order: on stop, planning and claiming end first, running handlers get the grace
period while their leases are still renewed, the leftovers are released to other
instances, and only then do the lease services stop.
"""

from __future__ import annotations

import asyncio
import logging

from soloist.clock import Clock
from soloist.config import Config
from soloist.registry import Registry
from soloist.runtime.executor import Executor
from soloist.runtime.leases import Heartbeater, Reaper
from soloist.runtime.planner import Planner
from soloist.runtime.service import log
from soloist.stores.base import Store

__all__ = ["Runtime"]


class Runtime:
    def __init__(self, store: Store, registry: Registry, config: Config, clock: Clock) -> None:
        self.store = store
        self.registry = registry
        self.config = config
        self.clock = clock
        iid = config.instance_id
        self.executor = Executor(
            clock,
            iid,
            store,
            registry,
            concurrency=config.concurrency,
            lease_ttl=config.lease_ttl,
            poll_interval=config.poll_interval,
        )
        self.planner = Planner(
            clock,
            iid,
            store,
            registry,
            lookahead=config.lookahead,
            misfire_grace=config.misfire_grace,
            refresh=config.poll_interval * 5,
            on_planned=self.executor.wake,
        )
        self.heartbeater = Heartbeater(clock, iid, self.executor, config.heartbeat)
        self.reaper = Reaper(clock, iid, store, config.heartbeat, self.executor.wake)
        self.started = asyncio.Event()
        self._stopped = False

    async def start(self) -> None:
        await self.store.migrate()
        await self.register()
        for service in (self.reaper, self.heartbeater, self.executor, self.planner):
            await service.start()
        self.started.set()
        log.info(
            "instance %s started (mode %s, store %s, %d job(s), %d task(s))",
            self.config.instance_id,
            self.config.mode,
            self.store.url,
            len(self.registry.jobs),
            len(self.registry.tasks) - len(self.registry.jobs),
            extra={"action": "start", "instance_id": self.config.instance_id},
        )

    async def register(self) -> None:
        """Record the jobs defined in code (keeping their pause flags)."""
        await self.store.job_upsert(self.registry.job_records())

    async def stop(self) -> None:
        """Graceful stop; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        log.info(
            "instance %s stopping: no new claims, %d running, grace %.0fs",
            self.config.instance_id,
            len(self.executor.active),
            self.config.grace_period.total_seconds(),
            extra={"action": "stopping", "instance_id": self.config.instance_id},
        )
        await self.planner.stop()
        await self.executor.drain(self.config.grace_period.total_seconds())
        await self.heartbeater.stop()
        await self.reaper.stop()
        log.log(
            logging.INFO,
            "instance %s stopped",
            self.config.instance_id,
            extra={"action": "stop", "instance_id": self.config.instance_id},
        )

    def wake(self) -> None:
        """New work may be due now (enqueue, trigger, schedule change in this process)."""
        self.executor.wake()
        self.planner.wake()
