"""The read/act interface of one instance, and its adapter over the scheduler's pieces.

An operator's surface (the HTTP endpoint, :func:`soloist.http.create_app`) depends on
:class:`Control` only: what it reads (status, jobs, history, attempts, health, metrics, a
ping of the store) and what it does (trigger, pause, resume, retry). It never reaches into
the :class:`soloist.Scheduler`, and this module imports nothing from it: dependencies
point down, from the web layer to this interface, and from the scheduler to both.

:class:`InstanceControl` implements it for one scheduler, reading its pieces at each call
(the :class:`Instance` protocol): ``reconfigure`` replaces the configuration and the
metrics, and ``start`` creates the runtime.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, runtime_checkable

from soloist.config import Config
from soloist.errors import StoreError
from soloist.metrics import Metrics
from soloist.models import Attempt, CancelResult, JSONDict, Occurrence, State
from soloist.operations import Operations
from soloist.reports import cluster_report, job_page
from soloist.runtime import Runtime
from soloist.runtime.health import Health
from soloist.stores.core import CheckedStore
from soloist.stores.pages import JobQuery
from soloist.stores.urls import mask_url

__all__ = ["NOT_RUNNING", "Control", "Instance", "InstanceControl", "SupportsControl"]

#: The ``/status`` fields about the runtime's own state, before it runs.
NOT_RUNNING: JSONDict = {"workers": None, "store_data_lost": None}


class Control(Protocol):
    """What an operator's surface reads and does on one instance. The coroutines run in
    the event loop that serves the surface; errors are soloist's own
    (:class:`soloist.errors.NotFoundError` for an unknown job or occurrence,
    :class:`soloist.errors.StoreError` for a store that fails, ...)."""

    @property
    def instance_id(self) -> str:
        """This instance's id."""
        ...

    @property
    def token(self) -> str | None:
        """The bearer token configured to enable actions; None: read-only."""
        ...

    # -- reads ----------------------------------------------------------------------------------
    async def status(self) -> JSONDict:
        """This instance, the leader and its epoch, the live instances, the jobs' counts
        and their first page (the body of ``GET /status``), in a bounded number of store
        round trips whatever the number of jobs."""
        ...

    async def jobs(self, query: JobQuery | None = None) -> JSONDict:
        """One page of the jobs the store knows (default: the first 50 by name), each with
        its next plan time and last outcome, and ``next_cursor`` (the body of ``GET
        /api/jobs``; see :mod:`soloist.stores.pages`)."""
        ...

    async def history(
        self, job: str | None = None, state: str | State | None = None, limit: int = 100
    ) -> list[Occurrence]:
        """The audit history, newest plan time first."""
        ...

    async def attempts(self, occurrence_id: str) -> tuple[Occurrence, list[Attempt]]:
        """An occurrence and the audit log of its attempts."""
        ...

    async def ping(self) -> None:
        """Return once the store answers (raises if it cannot be reached)."""
        ...

    def health(self) -> Health:
        """What makes this instance not ready besides its store, and warnings."""
        ...

    async def metrics(self, timeout: float) -> bytes:
        """The Prometheus exposition, the occurrence counts refreshed from the store if it
        answers within ``timeout`` seconds (else served as last read, and the failure
        counted)."""
        ...

    # -- actions --------------------------------------------------------------------------------
    async def trigger(self, job: str) -> str:
        """Run ``job`` once now; returns the occurrence id."""
        ...

    async def pause(self, job: str) -> None:
        """Stop planning ``job`` on every instance."""
        ...

    async def resume(self, job: str) -> None:
        """Plan ``job`` again."""
        ...

    async def retry(self, occurrence_id: str) -> str:
        """Run a dead occurrence again; returns the new occurrence's id."""
        ...

    async def cancel(self, occurrence_id: str) -> CancelResult:
        """Cancel a scheduled occurrence, or ask a running one to stop (see
        ``Scheduler.acancel``)."""
        ...


@runtime_checkable
class SupportsControl(Protocol):
    """What offers a :class:`Control` (a :class:`soloist.Scheduler`)."""

    @property
    def control(self) -> Control: ...


class Instance(Protocol):
    """The pieces of one instance that :class:`InstanceControl` reads at each call (what
    a :class:`soloist.Scheduler` has)."""

    @property
    def config(self) -> Config: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def ops(self) -> Operations: ...

    @property
    def runtime(self) -> Runtime | None: ...

    async def astore(self) -> CheckedStore: ...


class InstanceControl:
    """The :class:`Control` of one instance: an adapter over its operations, runtime,
    metrics and configuration."""

    def __init__(self, instance: Instance) -> None:
        self._instance = instance

    @property
    def instance_id(self) -> str:
        return self._instance.config.instance_id

    @property
    def token(self) -> str | None:
        return self._instance.config.token

    async def status(self) -> JSONDict:
        instance = self._instance
        config, runtime = instance.config, instance.runtime
        cluster = await cluster_report(await instance.astore(), config.election)
        return {
            "instance_id": config.instance_id,
            "mode": config.mode,
            "running": runtime is not None,
            "is_leader": runtime is not None and runtime.elector.is_leader,
            "will_execute_jobs": runtime is not None and runtime.plans(),
            "actions_enabled": config.token is not None,
            "store": mask_url(config.store_url),
            **cluster,
            **(runtime.report() if runtime is not None else NOT_RUNNING),
        }

    async def jobs(self, query: JobQuery | None = None) -> JSONDict:
        return await job_page(await self._instance.astore(), query)

    async def history(
        self, job: str | None = None, state: str | State | None = None, limit: int = 100
    ) -> list[Occurrence]:
        return await self._instance.ops.history(job, state, limit)

    async def attempts(self, occurrence_id: str) -> tuple[Occurrence, list[Attempt]]:
        return await self._instance.ops.attempts(occurrence_id)

    async def ping(self) -> None:
        store = await self._instance.astore()
        await store.now()

    def health(self) -> Health:
        runtime = self._instance.runtime
        return runtime.health() if runtime is not None else Health()

    async def metrics(self, timeout: float) -> bytes:
        metrics = self._instance.metrics

        async def refresh() -> None:
            await metrics.refresh_counts(await self._instance.astore())

        try:
            await asyncio.wait_for(refresh(), timeout)
        except (StoreError, asyncio.TimeoutError):
            metrics.store_error("occurrence_counts")  # the rest is still worth serving
        return metrics.exposition()

    async def trigger(self, job: str) -> str:
        return (await self._instance.ops.trigger(job)).id

    async def pause(self, job: str) -> None:
        await self._instance.ops.set_paused(job, True)

    async def resume(self, job: str) -> None:
        await self._instance.ops.set_paused(job, False)

    async def retry(self, occurrence_id: str) -> str:
        return (await self._instance.ops.retry(occurrence_id)).id

    async def cancel(self, occurrence_id: str) -> CancelResult:
        return await self._instance.ops.cancel(occurrence_id)
