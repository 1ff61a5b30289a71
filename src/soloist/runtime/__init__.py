"""The services one instance runs: planner, executor, heartbeater, reaper, pruner,
elector, registrar and, in distributed mode, partitions.

:class:`Runtime` wires them to one store and one registry, according to the mode:

* ``distributed``: the live instances share planning by partitions (each plans the
  streams of the partitions it holds, :mod:`soloist.runtime.partitions`) and every
  instance runs everything; the store's atomic claims make each occurrence run once.
* ``leader``: only the elected leader plans and runs recurring jobs; every instance still
  runs queued tasks.
* ``local``: no coordination: each instance plans and runs its own copy of every job
  (under instance-local task names), and warns when it sees other live instances.

Leader election runs in every mode (it is also a user-facing primitive). On stop,
planning ends first, the leader resigns so a follower takes over at once, running handlers
get the grace period while their leases are still renewed, the leftovers are released to
other instances, and only then do the lease services stop.

Every service gets the same :class:`~soloist.runtime.service.ServiceBundle`: the one
clock, the instance id, the logger and the metrics.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from soloist.clock import Clock
from soloist.config import Config
from soloist.metrics import Metrics
from soloist.registry import Registry, local_name
from soloist.runtime.elector import Elector, LeadershipCallback
from soloist.runtime.executor import Executor
from soloist.runtime.health import Health, pool_report, pool_state
from soloist.runtime.leases import Heartbeater, Reaper
from soloist.runtime.partitions import Partitions
from soloist.runtime.planner import Planner
from soloist.runtime.pruner import Pruner
from soloist.runtime.recovery import StoreRecovery
from soloist.runtime.registrar import Registrar
from soloist.runtime.service import Service, ServiceBundle, log
from soloist.stores.base import Store

__all__ = ["Runtime"]

#: Seconds added to the executor's poll interval when telling whether new work is due
#: before its next look (see :meth:`Runtime.wakes_for`).
LOOK_MARGIN = 1.0


class Runtime:
    def __init__(
        self,
        store: Store,
        registry: Registry,
        config: Config,
        clock: Clock,
        *,
        on_elected: list[LeadershipCallback] | None = None,
        on_demoted: list[LeadershipCallback] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.config = config
        self.clock = clock
        iid = config.instance_id
        self.metrics = metrics or Metrics(
            iid, config.mode, defined=registry.tasks, keep=config.metrics_jobs
        )
        self.bundle = bundle = ServiceBundle(clock, iid, log, self.metrics)
        self.elector = Elector(
            bundle,
            store,
            election=config.election,
            ttl=config.lease_ttl,
            on_elected=[self._on_elected, *(on_elected or [])],
            on_demoted=list(on_demoted or []),
        )
        self.executor = Executor(
            bundle,
            store,
            registry,
            concurrency=config.concurrency,
            lease_ttl=config.lease_ttl,
            poll_interval=config.poll_interval,
            claimable=self.claimable_tasks,
            on_notified=lambda: self.planner.wake(),
            call_timeout=config.heartbeat,
            on_short_lease=lambda: self.heartbeater.wake(),
        )
        self.partitions: Partitions | None = None
        if config.mode == "distributed":
            self.partitions = Partitions(
                bundle,
                store,
                count=config.partitions,
                ttl=config.lease_ttl,
                on_gained=lambda: self.planner.wake(),
                on_agreed=lambda: self.planner.rediscover(),
            )
        self.planner = Planner(
            bundle,
            store,
            registry,
            lookahead=config.lookahead,
            misfire_grace=config.misfire_grace,
            refresh=config.poll_interval * 5,
            on_planned=self.executor.wake,
            active=self.plans,
            local_owner=iid if config.mode == "local" else None,
            ownership=self.partitions,
        )
        self.heartbeater = Heartbeater(bundle, self.executor, config.heartbeat)
        self.reaper = Reaper(bundle, store, config.heartbeat, self.executor.wake)
        # History retention: the leader prunes (one instance at a time, in every mode).
        self.pruner = Pruner(bundle, store, lambda: self.elector.is_leader)
        self.registrar = Registrar(
            bundle,
            store,
            mode=config.mode,
            interval=config.heartbeat,
            ttl=config.lease_ttl,
            metadata=self._announced(),
        )
        # The executor makes its pool; how many leaked threads it replaces is set here.
        pool = self.executor.pool
        leaks = config.max_leaked_threads
        pool.max_leaked = config.concurrency if leaks is None else leaks
        self.metrics.pool = pool
        self.recovery = StoreRecovery(bundle, self._set_up_again)
        for service in self.services():
            service.on_data_lost = self.recovery.recover
        self.started = asyncio.Event()
        self._stopped = False

    def _announced(self) -> dict[str, object]:
        """What this instance announces with its heartbeats (``soloist status``), and the
        partition count the instances of distributed mode must agree on."""
        registry = self.registry
        metadata: dict[str, object] = {
            "jobs": sorted(registry.jobs),
            "tasks": registry.queue_tasks(),
            # What this instance can plan, compared between instances (partitions).
            "task_names": sorted(registry.tasks),
        }
        if self.partitions is not None:
            metadata["partitions"] = self.partitions.count
        return metadata

    def services(self) -> list[Service]:
        """Every service of this instance."""
        partitions = [self.partitions] if self.partitions is not None else []
        return [
            self.registrar,
            self.elector,
            self.reaper,
            self.pruner,
            self.heartbeater,
            self.executor,
            *partitions,
            self.planner,
        ]

    # -- what this instance does, by mode ----------------------------------------------------
    def plans(self) -> bool:
        """Whether this instance plans recurring jobs right now."""
        return self.config.mode != "leader" or self.elector.is_leader

    def claimable_tasks(self) -> list[str]:
        """The task names this instance claims right now."""
        mode, iid = self.config.mode, self.config.instance_id
        if mode == "leader" and not self.elector.is_leader:
            return self.registry.queue_tasks()
        names = list(self.registry.tasks)
        if mode == "local":
            names += [local_name(job.task, iid) for job in self.registry.jobs.values()]
        return names

    async def _on_elected(self, epoch: int) -> None:
        if self.config.mode == "leader":
            # A new leader enters every stream again: what an older leader wrote (without
            # the planning index) is planned too.
            self.planner.rediscover()
        if self.partitions is not None:
            self.partitions.resync()
        self.wake()

    # -- life cycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self.store.migrate()
        await self.register()
        for service in self.services():  # in this order: the planner starts last
            await service.start()
        self.started.set()
        log.info(
            "instance %s started (mode %s, store %s, %d job(s), %d task(s))",
            self.config.instance_id,
            self.config.mode,
            self.store.url,
            len(self.registry.jobs),
            len(self.registry.queue_tasks()),
            extra={"action": "start", "instance_id": self.config.instance_id},
        )

    async def register(self) -> None:
        """Record the jobs defined in code (keeping their pause flags)."""
        await self.store.job_upsert(self.registry.job_records())

    async def _set_up_again(self) -> None:
        """After the store lost its data: its schema and the jobs defined in code again;
        a leader's lease went with the data."""
        await self.elector.demote("the store lost its data")
        await self.store.migrate()
        await self.register()
        self.planner.rediscover()
        if self.partitions is not None:
            self.partitions.resync()
        self.wake()

    # -- what this instance says about itself -----------------------------------------------
    def health(self) -> Health:
        """Problems that make this instance not ready, and warnings (``GET /readyz``)."""
        pool_problem, pool_warning = pool_state(self.executor.pool)
        problems = [p for p in (pool_problem, self.recovery.problem()) if p]
        warnings = [w for w in (pool_warning, self.recovery.warning()) if w]
        return Health(tuple(problems), tuple(warnings))

    def report(self) -> dict[str, object]:
        """The fields of ``GET /status`` about this instance's own state."""
        report: dict[str, object] = {
            "workers": pool_report(self.executor.pool),
            "store_data_lost": self.recovery.report(),
            "planner": self.planner.report(),
        }
        if self.partitions is not None:
            report["partitions"] = self.partitions.report()
        return report

    async def stop(self) -> None:
        """Graceful stop; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        log.info(
            "instance %s stopping: no new claims, %d running, %d claimed ahead (handed back "
            "now), grace %.0fs",
            self.config.instance_id,
            len(self.executor.active) - len(self.executor.waiting),
            len(self.executor.waiting),
            self.config.grace_period.total_seconds(),
            extra={"action": "stopping", "instance_id": self.config.instance_id},
        )
        await self.stop_planning()
        await self.pruner.stop()
        await self.elector.resign()
        await self.executor.drain(self.config.grace_period.total_seconds())
        await self.heartbeater.stop()
        await self.reaper.stop()
        await self.registrar.deregister()
        log.log(
            logging.INFO,
            "instance %s stopped",
            self.config.instance_id,
            extra={"action": "stop", "instance_id": self.config.instance_id},
        )

    async def stop_planning(self) -> None:
        """The first step of a stop: no more planning here, and in distributed mode the
        partitions handed over at once, while handlers may still drain for a while."""
        await self.planner.stop()
        if self.partitions is not None:
            # Say first that this instance no longer plans, so that the others count it
            # out and take its partitions as soon as they are released.
            self.registrar.metadata["plans"] = False
            await self.registrar.announce()
            await self.partitions.release()

    def wake(self) -> None:
        """Schedules changed in this process (added, resumed): the planner looks again,
        and the executor, for what it may plan at once."""
        self.executor.wake()
        self.planner.wake()

    def wakes_for(self, due_in: timedelta) -> bool:
        """Whether new occurrences due ``due_in`` from now, written in this process
        (enqueue, trigger, retry, backfill), call for :meth:`wake_work`: only when they
        are due before the executor's next look anyway (an idle executor looks every
        ``poll_interval`` at most, counted from the end of its last look, and then waits
        just until the earliest due work; :data:`LOOK_MARGIN` covers the look's own
        time). Each look costs store calls, which one enqueue at a time in a process that
        runs the workers paid for every call."""
        return due_in.total_seconds() < self.executor.poll_interval + LOOK_MARGIN

    def wake_work(self) -> None:
        """New occurrences are due now or soon: the executor looks. Not the planner: no
        schedule changed."""
        self.executor.wake()
