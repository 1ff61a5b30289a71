"""The public facade: define jobs and tasks, then run the workers or call operations.

:class:`Scheduler` is thin. Definitions go to a :class:`Registry`; short operations to
:class:`Operations` (async, each with a sync twin built by
:func:`soloist.bridge.sync_twin`); the store, and the way sync code reaches it, to a
:class:`soloist.bridge.StoreBridge`; what an operator reads and does to a
:class:`soloist.control.Control`; and the long-running services to a :class:`Runtime`
and, with an HTTP address, a :class:`soloist.endpoint.HttpEndpoint`, both started by
:meth:`Scheduler.start`. This module knows nothing of the web layer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import threading
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, TypeVar, overload

from soloist import logs, tracing
from soloist.bridge import StoreBridge, sync_twin
from soloist.clock import Clock, SystemClock
from soloist.config import Config
from soloist.control import Control, InstanceControl
from soloist.endpoint import HttpEndpoint
from soloist.errors import ConfigError, SoloistError
from soloist.metrics import Metrics
from soloist.models import (
    DEFAULT_MAX_CRASHES,
    Attempt,
    CancelResult,
    JobRecord,
    Occurrence,
    State,
)
from soloist.operations import Operations
from soloist.registry import (
    Handler,
    JobDef,
    JobPolicy,
    Registry,
    ScopeProvider,
    TaskDef,
    build_task,
)
from soloist.retry import ExceptionFilter
from soloist.runtime import Runtime
from soloist.runtime.elector import LeadershipCallback
from soloist.runtime.health import Health
from soloist.schedules import Schedule
from soloist.stores.base import Store
from soloist.stores.core import CheckedStore
from soloist.stores.urls import mask_url
from soloist.timeline import Backfill, Upcoming, backfill_job, upcoming_of_job

log = logging.getLogger("soloist")
F = TypeVar("F", bound=Handler)
L = TypeVar("L", bound=LeadershipCallback)


class Scheduler:
    """One app's jobs and tasks, bound to a store.

    ``Scheduler()`` uses ``SOLOIST_STORE_URL`` or ``sqlite:///soloist.db``. Every
    argument may also come from the environment (see :class:`soloist.config.Config`).
    ``migrate=False``: never create or upgrade the store's schema when opening it; a store
    without soloist's newest schema fails the first call with StoreUnavailableError
    naming it, and nothing is created (what the CLI's read-only commands use).
    ``metrics_jobs``: dynamic schedules that keep their own ``job`` label in the metrics
    (every other one counts under ``job="(dynamic)"``; docs/reference/http.md, Metrics).
    """

    def __init__(
        self,
        store: str | Store | None = None,
        *,
        mode: str | None = None,
        instance_id: str | None = None,
        lease_ttl: object = None,
        heartbeat: object = None,
        concurrency: int | None = None,
        poll_interval: object = None,
        grace_period: object = None,
        misfire_grace: object = None,
        clock: Clock | None = None,
        http: object = None,
        token: str | None = None,
        max_leaked_threads: int | None = None,
        partitions: int | None = None,
        migrate: bool | None = None,
        timezone: str | None = None,
        metrics_jobs: str | Iterable[str] | None = None,
    ) -> None:
        url = store.url if isinstance(store, Store) else store
        if url is not None and not isinstance(url, str):
            raise ConfigError(f"invalid store {store!r}: expected a URL or a Store")
        self.config = Config.resolve(
            url,
            instance_id=instance_id,
            mode=mode,
            lease_ttl=lease_ttl,
            heartbeat=heartbeat,
            concurrency=concurrency,
            poll_interval=poll_interval,
            grace_period=grace_period,
            misfire_grace=misfire_grace,
            http=http,
            token=token,
            max_leaked_threads=max_leaked_threads,
            partitions=partitions,
            migrate=migrate,
            timezone=timezone,
            metrics_jobs=metrics_jobs,
        )
        self.clock: Clock = clock or SystemClock()
        self.registry = Registry()
        #: This instance's Prometheus metrics (served by ``GET /metrics``).
        self.metrics = self._new_metrics(self.config)
        self._http: HttpEndpoint | None = None
        self._control = InstanceControl(self)
        self._bridge = StoreBridge(
            lambda: self.config,
            given=store if isinstance(store, Store) else None,
            given_url=url,
            migrate=self.config.migrate,
        )
        self.ops = Operations(self._bridge.store, self.registry, self._wake, self._wake_work)
        self.schedules = Schedules(self)
        self._runtime: Runtime | None = None
        self._on_elected: list[LeadershipCallback] = []
        self._on_demoted: list[LeadershipCallback] = []
        self._stop_requested: asyncio.Event | None = None
        self._handler_wrappers: list[Callable[[Handler], Handler]] = []
        #: Whether to make OpenTelemetry spans: decided once, at the first enqueue or start.
        self._traced: bool | None = None

    # -- definitions --------------------------------------------------------------------------
    def job(
        self,
        schedule: Schedule,
        *,
        name: str | None = None,
        retries: int = 0,
        backoff: str = "exponential",
        backoff_base: object = "1s",
        backoff_cap: object = "10m",
        timeout: object = None,
        catch_up: str = "latest",
        catch_up_window: object = None,
        overlap: str | None = None,
        scopes: ScopeProvider | None = None,
        max_crashes: int = DEFAULT_MAX_CRASHES,
        retry_on: ExceptionFilter | None = None,
        no_retry_on: ExceptionFilter | None = None,
        misfire_grace: object = None,
    ) -> Callable[[F], F]:
        """Decorate ``fn(ctx)`` to run on ``schedule`` once per planned instant (and scope).

        ``overlap`` defaults to ``"skip"``, or to ``"queue"`` with ``catch_up="all"``.
        ``max_crashes``: how many lease expiries (the runner killed, frozen or cut off) an
        occurrence survives; each one runs it again without spending a retry.
        ``retry_on``: only these exception classes are retried; ``no_retry_on``: these
        never are (the run is ``dead`` at once). ``misfire_grace``: how late an instant
        may be planned and still count as on time, for this job (default: the
        scheduler's). A cron schedule without its own ``tz`` runs in the scheduler's
        ``timezone``."""
        if not isinstance(schedule, Schedule):
            raise ConfigError(
                f"invalid schedule {schedule!r}: expected cron(...), every(...) or at(...)"
            )
        if schedule.relative:
            raise ConfigError(
                f"invalid schedule {schedule.describe()}: a delay in at() is resolved by each "
                "process at import, so every instance would plan its own run; give an "
                "absolute time, or use enqueue(..., delay=...)"
            )
        policy = JobPolicy.build(catch_up, catch_up_window, overlap, misfire_grace)
        schedule = schedule.in_default_zone(self.config.timezone)
        if scopes is not None and not callable(scopes):
            raise ConfigError(f"invalid scopes {scopes!r}: expected a function of now")

        def decorate(fn: F) -> F:
            task = build_task(
                fn,
                name,
                retries,
                backoff,
                backoff_base,
                backoff_cap,
                timeout,
                max_crashes,
                retry_on,
                no_retry_on,
            )
            job = JobDef(task.name, task.name, schedule, policy, {}, scopes)
            self.registry.add_job(job, self._wrapped(task))
            return fn

        return decorate

    @overload
    def task(self, fn: F, /) -> F: ...
    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        retries: int = 0,
        backoff: str = "exponential",
        backoff_base: object = "1s",
        backoff_cap: object = "10m",
        timeout: object = None,
        max_crashes: int = DEFAULT_MAX_CRASHES,
        retry_on: ExceptionFilter | None = None,
        no_retry_on: ExceptionFilter | None = None,
    ) -> Callable[[F], F]: ...

    def task(
        self,
        fn: F | None = None,
        /,
        *,
        name: str | None = None,
        retries: int = 0,
        backoff: str = "exponential",
        backoff_base: object = "1s",
        backoff_cap: object = "10m",
        timeout: object = None,
        max_crashes: int = DEFAULT_MAX_CRASHES,
        retry_on: ExceptionFilter | None = None,
        no_retry_on: ExceptionFilter | None = None,
    ) -> F | Callable[[F], F]:
        """Decorate ``fn(ctx, **payload)`` as a task that ``enqueue`` can queue.

        ``max_crashes``: how many lease expiries (the runner killed, frozen or cut off) a
        queued run survives; each one runs it again without spending a retry.
        ``retry_on``: only these exception classes are retried; ``no_retry_on``: these
        never are (the run is ``dead`` at once, its error recorded)."""

        def decorate(handler: F) -> F:
            self.registry.add_task(
                self._wrapped(
                    build_task(
                        handler,
                        name,
                        retries,
                        backoff,
                        backoff_base,
                        backoff_cap,
                        timeout,
                        max_crashes,
                        retry_on,
                        no_retry_on,
                    )
                )
            )
            return handler

        return decorate(fn) if fn is not None else decorate

    def wrap_handlers(self, wrapper: Callable[[Handler], Handler]) -> None:
        """Run every handler through ``wrapper(handler) -> handler``: those registered
        already and, at registration, those to come (e.g. what
        :func:`soloist.contrib.django.manage_db_connections` installs). Each handler is
        wrapped once, so a run costs only what the wrapper itself does. The wrapper keeps
        the handler's name, signature and kind (``async def`` or not) with
        :func:`functools.wraps`. Installing the same wrapper again does nothing."""
        if not callable(wrapper):
            raise ConfigError(f"invalid wrapper {wrapper!r}: expected a function of a handler")
        if wrapper in self._handler_wrappers:
            return
        self._handler_wrappers.append(wrapper)
        tasks = self.registry.tasks
        for name, task in list(tasks.items()):
            tasks[name] = dataclasses.replace(task, fn=wrapper(task.fn))

    def _wrapped(self, task: TaskDef) -> TaskDef:
        fn = task.fn
        for wrapper in self._handler_wrappers:
            fn = wrapper(fn)
        return task if fn is task.fn else dataclasses.replace(task, fn=fn)

    # -- operations (async; each sync twin is built from it by sync_twin) ----------------------
    async def aenqueue(
        self,
        task: str | Callable[..., Any],
        /,
        payload: dict[str, Any] | None = None,
        *,
        delay: object = None,
        at: object = None,
        key: str | None = None,
    ) -> str:
        """Queue ``task(ctx, **payload)``; returns the occurrence id (the existing one if
        ``key`` was used before). ``payload``: a dict of JSON values (none: ``{}``), the
        handler's keyword arguments; its keys never mix with ``delay``, ``at`` and ``key``.
        A payload that is not a dict of JSON values raises PayloadError naming it."""
        if not self._tracing():
            occ = await self.ops.enqueue(task, payload, delay=delay, at=at, key=key)
            return occ.id
        with tracing.enqueue_span(
            task if isinstance(task, str) else getattr(task, "__name__", "")
        ) as traced:
            span, context = traced
            occ = await self.ops.enqueue(task, payload, delay=delay, at=at, key=key, trace=context)
            span.update_name(f"send {occ.task}")
            span.set_attributes(
                {"messaging.destination.name": occ.task, "messaging.message.id": occ.id}
            )
        return occ.id

    enqueue = sync_twin(aenqueue, hop=False)

    async def aenqueue_many(
        self,
        task: str | Callable[..., Any],
        payloads: Iterable[dict[str, Any]],
        /,
        *,
        delay: object = None,
        batch: int = 1000,
    ) -> int:
        """Queue ``task`` once per payload, ``batch`` rows per store call; returns how
        many. All payloads are validated before any is written."""
        if not self._tracing():
            return await self.ops.enqueue_many(task, payloads, delay=delay, batch=batch)
        with tracing.enqueue_span(
            task if isinstance(task, str) else getattr(task, "__name__", "")
        ) as (span, context):
            count = await self.ops.enqueue_many(
                task, payloads, delay=delay, batch=batch, trace=context
            )
            span.set_attribute("messaging.batch.message_count", count)
        return count

    enqueue_many = sync_twin(aenqueue_many, hop=False)

    async def atrigger(self, job: str) -> str:
        """Run ``job`` once now; returns the occurrence id."""
        return (await self.ops.trigger(job)).id

    trigger = sync_twin(atrigger)

    async def abackfill(
        self, job: str, start: object, end: object, *, scopes: Iterable[str] | None = None
    ) -> Backfill:
        """Plan ``job``'s instants in the past range ``[start, end]`` (aware datetimes, RFC
        3339 strings or dates), idempotently: with the planner's own occurrence keys, so an
        instant that already ran or is planned is not doubled. ``scopes``: which streams
        (default: the job's scope provider's, else the one without a scope). Returns how
        many occurrences the range has, and how many were added; at most 10,000."""
        store = await self._bridge.store()
        result = await backfill_job(
            store, self.registry, job, start, end, scopes, self.ops.unknown_job
        )
        if result.added:
            self._wake_work(timedelta(0))
        return result

    backfill = sync_twin(abackfill)

    async def aupcoming(self, job: str, count: int = 10) -> list[Upcoming]:
        """The next ``count`` fire times of ``job`` after the store's time, each in its
        schedule's zone with daylight-saving shifts marked (what ``soloist next`` shows).
        Writes nothing."""
        store = await self._bridge.store()
        return await upcoming_of_job(store, self.registry, job, count, self.ops.unknown_job)

    upcoming = sync_twin(aupcoming)

    async def apause(self, job: str) -> None:
        """Stop planning ``job`` on every instance (instants while paused are skipped)."""
        await self.ops.set_paused(job, True)

    pause = sync_twin(apause)

    async def aresume(self, job: str) -> None:
        """Plan ``job`` again on every instance, from now on."""
        await self.ops.set_paused(job, False)

    resume = sync_twin(aresume)

    async def ahistory(
        self, job: str | None = None, state: str | State | None = None, limit: int = 100
    ) -> list[Occurrence]:
        """The audit history, newest plan time first."""
        return await self.ops.history(job, state, limit)

    history = sync_twin(ahistory)

    async def aattempts(self, occurrence_id: str) -> tuple[Occurrence, list[Attempt]]:
        """An occurrence and the audit log of each of its attempts (who, when, why)."""
        return await self.ops.attempts(occurrence_id)

    attempts = sync_twin(aattempts)

    async def aretry(self, occurrence_id: str) -> str:
        """Run a ``dead`` occurrence again: a new occurrence due now, with the same job,
        scope and payload; returns its id (the same one if retried before)."""
        return (await self.ops.retry(occurrence_id)).id

    retry = sync_twin(aretry)

    async def acancel(self, occurrence_id: str) -> CancelResult:
        """Cancel an occurrence. A ``scheduled`` one (or a ``failed`` one waiting for its
        retry) ends ``dead`` with error code ``cancelled`` at once and never runs
        (``outcome`` ``cancelled``). A ``running`` one is asked to stop (``requested``;
        ``already_requested`` the second time): its runner learns it at its next lease
        renewal, cancels an async handler and sets ``ctx.cancelled`` for a sync one, and
        records it ``dead`` (``cancelled``), not retried. A cron job's next instants are
        not affected. Raises StateConflictError for a finished occurrence and
        UnknownOccurrenceError for an unknown id."""
        return await self.ops.cancel(occurrence_id)

    cancel = sync_twin(acancel)

    async def astatus(self) -> dict[str, Any]:
        """This instance, the leader and its epoch, the live instances, the jobs' counts
        and the first page of jobs with their next plan time and last outcome (what ``GET
        /status`` and ``soloist status`` show; ``GET /api/jobs`` pages on)."""
        return await self._control.status()

    status = sync_twin(astatus)

    def health(self) -> Health:
        """What makes this instance not ready besides an unreachable store (problems:
        ``GET /readyz`` answers 503), and what an operator should know (warnings): sync
        handler threads leaked by timeouts at their bound, a store that lost its data."""
        return self._control.health()

    @property
    def control(self) -> Control:
        """What an operator's surface reads and does on this instance (what the HTTP
        endpoint serves: :func:`soloist.http.create_app`)."""
        return self._control

    # -- leadership -----------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        """Whether this instance leads right now (it holds the lease and still trusts it)."""
        return self._runtime is not None and self._runtime.elector.is_leader

    @property
    def leader_id(self) -> str | None:
        """The instance id of the current leader as last seen, or None."""
        return self._runtime.elector.leader_id if self._runtime is not None else None

    @property
    def leader_epoch(self) -> int | None:
        """The epoch of the current leadership as last seen: a fencing token that rises at
        every change of leader. None before the first election is seen."""
        return self._runtime.elector.epoch if self._runtime is not None else None

    def on_elected(self, fn: L) -> L:
        """Decorate ``fn(epoch)`` (sync or async) to be called when this instance becomes
        leader."""
        self._on_elected.append(fn)
        return fn

    def on_demoted(self, fn: L) -> L:
        """Decorate ``fn(epoch)`` to be called when this instance stops being leader."""
        self._on_demoted.append(fn)
        return fn

    # -- running ------------------------------------------------------------------------------
    @property
    def instance_id(self) -> str:
        return self.config.instance_id

    @property
    def runtime(self) -> Runtime | None:
        return self._runtime

    def reconfigure(
        self,
        *,
        store: str | None = None,
        instance_id: str | None = None,
        mode: str | None = None,
        http: object = None,
        token: str | None = None,
    ) -> None:
        """Replace the store URL, instance id, mode, HTTP address or action token given to
        ``Scheduler(...)``, before it starts (what explicit ``soloist run`` options do to an
        app that was imported first); None keeps a setting. The values are checked as the
        constructor checks them (:meth:`soloist.config.Config.override`). The metrics
        follow the new identity. A new store is refused once a call has opened the old
        one."""
        if self._runtime is not None or self._bridge.loop is not None:
            raise SoloistError(
                f"scheduler {self.instance_id!r} has started: reconfigure it before start()"
            )
        config = self.config.override(
            store_url=store, instance_id=instance_id, mode=mode, http=http, token=token
        )
        if config.store_url != self.config.store_url:
            self._bridge.move(config.store_url, self.instance_id)
        if (config.instance_id, config.mode) != (self.config.instance_id, self.config.mode):
            self.metrics = self._new_metrics(config)
        self.config = config

    def _new_metrics(self, config: Config) -> Metrics:
        """Metrics that label the jobs and tasks defined in code here (the registry's,
        as it grows) and ``metrics_jobs``; other jobs count under ``job="(dynamic)"``."""
        return Metrics(
            config.instance_id, config.mode, defined=self.registry.tasks, keep=config.metrics_jobs
        )

    async def start(self, *, workers: bool = True) -> None:
        """Start planning and executing in the running event loop (e.g. an ASGI lifespan).

        With ``workers=False`` only open the store: nothing is planned or run here,
        because other processes run the workers. :meth:`stop` closes the store either
        way (what sync calls opened on the portal is closed by :meth:`close`)."""
        if self._runtime is not None:
            return
        store = await self._bridge.store()
        self._bridge.loop = asyncio.get_running_loop()
        if not workers:
            return
        if self._tracing():
            self.wrap_handlers(tracing.traced_handler)  # each run in a span (soloist[otel])
        if self.config.http is not None and self._http is None:
            # Bound before any work is claimed: a taken port fails the start at once.
            endpoint = HttpEndpoint(self._control, *self.config.http)
            await endpoint.start()
            self._http = endpoint  # only once it serves: a failed start can be tried again
        self._runtime = Runtime(
            store,
            self.registry,
            self.config,
            self.clock,
            on_elected=self._on_elected,
            on_demoted=self._on_demoted,
            metrics=self.metrics,
        )
        await self._runtime.start()
        if store.capabilities.reach == "host" and self.config.mode != "local":
            log.info(
                "store %s is a SQLite file: it coordinates the processes of this host only; "
                "instances on other hosts (other pods or containers, each with its own "
                "file) would each run every job: give them one PostgreSQL or Redis store "
                "(SOLOIST_STORE_URL)",
                mask_url(self.config.store_url),
                extra={"action": "store_scope", "mode": self.config.mode},
            )

    @property
    def http_address(self) -> tuple[str, int] | None:
        """Where the HTTP endpoint listens (the bound port if 0 was asked), or None."""
        return self._http.address if self._http is not None else None

    async def stop(self) -> None:
        """Stop gracefully (see :class:`Runtime`) and close the store. Safe twice."""
        http, self._http = self._http, None
        if http is not None:
            await http.stop()
        runtime, self._runtime = self._runtime, None
        if runtime is not None:
            await runtime.stop()
        self._bridge.loop = None
        await self.aclose()

    async def aclose(self) -> None:
        """Close the store opened in the running loop (not a store given to
        ``Scheduler(...)``, which stays the caller's). Safe twice; :meth:`stop` calls it."""
        await self._bridge.aclose()

    async def serve(self, *, handle_signals: bool = False) -> None:
        """Run until cancelled or :meth:`request_stop`; then stop gracefully."""
        self._stop_requested = asyncio.Event()
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
                installed.append(sig)
        try:
            await self.start()
            await self._stop_requested.wait()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            await asyncio.shield(self.stop())

    def request_stop(self) -> None:
        """Ask :meth:`serve` to stop gracefully (what SIGTERM does)."""
        if self._stop_requested is not None:
            self._stop_requested.set()

    def run(self) -> None:
        """Blocking: run the workers until SIGTERM or Ctrl-C, then stop gracefully.

        If the program has not configured logging, soloist's INFO lines go to stderr
        (see :func:`soloist.logs.configure`), so that a plain script shows what runs."""
        if not logging.getLogger().handlers:
            logs.configure("INFO", "text")
        asyncio.run(self.serve(handle_signals=True))

    async def astore(self) -> CheckedStore:
        """The store, opened (and migrated) on first use, in the running event loop."""
        return await self._bridge.store()

    def close(self) -> None:
        """Close what sync calls opened (the portal's store and loop). Safe twice; called
        at interpreter exit. A running scheduler is stopped by :meth:`stop`, not this."""
        self._bridge.close()

    # -- plumbing -----------------------------------------------------------------------------
    def _tracing(self) -> bool:
        """Whether to make OpenTelemetry spans (soloist[otel] installed and a tracer
        provider set), checked once: a Scheduler without them pays nothing more."""
        if self._traced is None:
            self._traced = tracing.enabled()
        return self._traced

    def _wake(self) -> None:
        runtime = self._runtime
        if runtime is not None:
            self._bridge.on_scheduler_loop(runtime.wake)

    def _wake_work(self, due_in: timedelta) -> None:
        runtime = self._runtime
        if runtime is not None and runtime.wakes_for(due_in):
            self._bridge.on_scheduler_loop(runtime.wake_work)


class Schedules:
    """Dynamic schedules stored in the store, so that every instance sees them."""

    def __init__(self, app: Scheduler) -> None:
        self._app = app
        self._bridge = app._bridge

    async def aadd(
        self,
        name: str,
        *,
        task: str | Callable[..., Any],
        schedule: Schedule,
        payload: dict[str, Any] | None = None,
        end: object = None,
        max_runs: int | None = None,
        metadata: dict[str, Any] | None = None,
        overlap: str | None = None,
        catch_up: str = "latest",
        catch_up_window: object = None,
        misfire_grace: object = None,
    ) -> JobRecord:
        """Store a schedule that runs ``task`` with ``payload``; every instance plans it.
        A cron schedule without its own ``tz`` is stored in the scheduler's ``timezone``;
        ``misfire_grace`` (None: each planner's own) is stored with the policies."""
        if isinstance(schedule, Schedule):
            schedule = schedule.in_default_zone(self._app.config.timezone)
        return await self._app.ops.schedule_add(
            name,
            task=task,
            schedule=schedule,
            payload=payload,
            end=end,
            max_runs=max_runs,
            metadata=metadata,
            overlap=overlap,
            catch_up=catch_up,
            catch_up_window=catch_up_window,
            misfire_grace=misfire_grace,
        )

    add = sync_twin(aadd)

    async def aget(self, name: str) -> JobRecord | None:
        """The dynamic schedule ``name``, or None (a job defined in code is not one)."""
        return await self._app.ops.schedule_get(name)

    get = sync_twin(aget)

    async def adelete(self, name: str) -> bool:
        """Delete the dynamic schedule ``name``; False if there is none (a job defined in
        code is never deleted)."""
        return await self._app.ops.schedule_delete(name)

    delete = sync_twin(adelete)

    async def alist(self) -> list[JobRecord]:
        """Every dynamic schedule."""
        return await self._app.ops.schedule_list()

    list = sync_twin(alist)
