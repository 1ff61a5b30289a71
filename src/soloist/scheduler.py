"""The public facade: define jobs and tasks, then run the workers or call operations.

:class:`Scheduler` is thin. Definitions go to a :class:`Registry`, short operations to
:class:`Operations` (async, with sync twins here), and the long-running services to a
:class:`Runtime` that :meth:`Scheduler.serve` starts.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import logging
import os
import signal
import threading
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from soloist import logs
from soloist._portal import Portal
from soloist.clock import Clock, SystemClock
from soloist.config import MODES, Config
from soloist.errors import ConfigError, SoloistError
from soloist.metrics import Metrics
from soloist.models import DEFAULT_MAX_CRASHES, Attempt, JobRecord, Occurrence, State
from soloist.operations import Operations
from soloist.registry import (
    Handler,
    JobDef,
    JobPolicy,
    Registry,
    ScopeProvider,
    TaskDef,
    build_task,
    check_name,
)
from soloist.runtime import Runtime
from soloist.runtime.elector import LeadershipCallback
from soloist.runtime.health import Health
from soloist.schedules import Schedule
from soloist.stores import check_store_url, open_store
from soloist.stores.base import Store
from soloist.stores.core import CheckedStore, checked
from soloist.stores.existing import require_schema
from soloist.stores.urls import mask_url

if TYPE_CHECKING:
    from soloist.http.server import HttpServer

log = logging.getLogger("soloist")
T = TypeVar("T")
F = TypeVar("F", bound=Handler)
L = TypeVar("L", bound=LeadershipCallback)
#: The ``/status`` fields about the runtime's own state, before it runs.
NOT_RUNNING: dict[str, Any] = {"workers": None, "store_data_lost": None}


class Scheduler:
    """One app's jobs and tasks, bound to a store.

    ``Scheduler()`` uses ``SOLOIST_STORE_URL`` or ``sqlite:///soloist.db``. Every
    argument may also come from the environment (see :class:`soloist.config.Config`).
    ``migrate=False``: never create or upgrade the store's schema when opening it; a store
    without soloist's newest schema fails the first call with StoreUnavailableError
    naming it, and nothing is created (what the CLI's read-only commands use).
    """

    def __init__(
        self,
        store: str | Store | None = None,
        *,
        mode: str | None = None,
        instance_id: str | None = None,
        lease_ttl: object = None,
        heartbeat: object = None,
        concurrency: int = 10,
        poll_interval: object = "1s",
        grace_period: object = "30s",
        misfire_grace: object = "10s",
        clock: Clock | None = None,
        http: object = None,
        token: str | None = None,
        max_leaked_threads: int | None = None,
        migrate: bool = True,
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
        )
        self.clock: Clock = clock or SystemClock()
        #: This instance's Prometheus metrics (served by ``GET /metrics``).
        self.metrics = Metrics(self.config.instance_id, self.config.mode)
        self._http: HttpServer | None = None
        # A store given here gets the core's checks like one opened from a URL.
        self._given_store = checked(store) if isinstance(store, Store) else None
        #: SOLOIST_STORE_URL when it differs from the store given here (which wins): logged
        #: as a WARNING when the store is first opened (see :meth:`_store_warnings`).
        self._env_store = _other_env_store(url)
        self._store_warned = False
        self._migrate = migrate
        self._store: CheckedStore | None = None
        self._store_ready = False
        self.registry = Registry()
        self.ops = Operations(self._ready_store, self.registry, self._wake)
        self.schedules = Schedules(self)
        self._runtime: Runtime | None = None
        self._on_elected: list[LeadershipCallback] = []
        self._on_demoted: list[LeadershipCallback] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        # Sync calls made while no scheduler loop runs go to a portal: a private loop in a
        # daemon thread with a store of its own that stays open between calls.
        self._portal: Portal | None = None
        self._portal_store: CheckedStore | None = None
        self._portal_store_lock = asyncio.Lock()
        self._portal_lock = threading.Lock()
        self._handler_wrappers: list[Callable[[Handler], Handler]] = []

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
    ) -> Callable[[F], F]:
        """Decorate ``fn(ctx)`` to run on ``schedule`` once per planned instant (and scope).

        ``overlap`` defaults to ``"skip"``, or to ``"queue"`` with ``catch_up="all"``.
        ``max_crashes``: how many lease expiries (the runner killed, frozen or cut off) an
        occurrence survives; each one runs it again without spending a retry."""
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
        policy = JobPolicy.build(catch_up, catch_up_window, overlap)
        if scopes is not None and not callable(scopes):
            raise ConfigError(f"invalid scopes {scopes!r}: expected a function of now")

        def decorate(fn: F) -> F:
            task = build_task(
                fn, name, retries, backoff, backoff_base, backoff_cap, timeout, max_crashes
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
    ) -> F | Callable[[F], F]:
        """Decorate ``fn(ctx, **payload)`` as a task that ``enqueue`` can queue.

        ``max_crashes``: how many lease expiries (the runner killed, frozen or cut off) a
        queued run survives; each one runs it again without spending a retry."""

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

    # -- operations (async, then sync twins) ---------------------------------------------------
    async def aenqueue(
        self,
        task: str | Callable[..., Any],
        /,
        *,
        delay: object = None,
        at: object = None,
        key: str | None = None,
        **payload: Any,
    ) -> str:
        """Queue ``task(ctx, **payload)``; returns the occurrence id (the existing one if
        ``key`` was used before)."""
        occ = await self.ops.enqueue(task, payload, delay=delay, at=at, key=key)
        return occ.id

    def enqueue(
        self,
        task: str | Callable[..., Any],
        /,
        *,
        delay: object = None,
        at: object = None,
        key: str | None = None,
        **payload: Any,
    ) -> str:
        """Sync twin of :meth:`aenqueue` (e.g. from a Django view)."""
        return self._call(self.aenqueue(task, delay=delay, at=at, key=key, **payload))

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
        return await self.ops.enqueue_many(task, payloads, delay=delay, batch=batch)

    def enqueue_many(
        self,
        task: str | Callable[..., Any],
        payloads: Iterable[dict[str, Any]],
        /,
        *,
        delay: object = None,
        batch: int = 1000,
    ) -> int:
        """Sync twin of :meth:`aenqueue_many`."""
        return self._call(self.aenqueue_many(task, payloads, delay=delay, batch=batch))

    async def atrigger(self, job: str) -> str:
        return (await self.ops.trigger(job)).id

    def trigger(self, job: str) -> str:
        """Run ``job`` once now; returns the occurrence id."""
        return self._call(self.atrigger(job))

    async def apause(self, job: str) -> None:
        await self.ops.set_paused(job, True)

    def pause(self, job: str) -> None:
        """Stop planning ``job`` on every instance (instants while paused are skipped)."""
        self._call(self.apause(job))

    async def aresume(self, job: str) -> None:
        await self.ops.set_paused(job, False)

    def resume(self, job: str) -> None:
        self._call(self.aresume(job))

    async def ahistory(
        self, job: str | None = None, state: str | State | None = None, limit: int = 100
    ) -> list[Occurrence]:
        return await self.ops.history(job, state, limit)

    def history(
        self, job: str | None = None, state: str | State | None = None, limit: int = 100
    ) -> list[Occurrence]:
        """The audit history, newest plan time first."""
        return self._call(self.ahistory(job, state, limit))

    async def aattempts(self, occurrence_id: str) -> tuple[Occurrence, list[Attempt]]:
        return await self.ops.attempts(occurrence_id)

    def attempts(self, occurrence_id: str) -> tuple[Occurrence, list[Attempt]]:
        """An occurrence and the audit log of each of its attempts (who, when, why)."""
        return self._call(self.aattempts(occurrence_id))

    async def aretry(self, occurrence_id: str) -> str:
        return (await self.ops.retry(occurrence_id)).id

    def retry(self, occurrence_id: str) -> str:
        """Run a ``dead`` occurrence again: a new occurrence due now, with the same job,
        scope and payload; returns its id (the same one if retried before)."""
        return self._call(self.aretry(occurrence_id))

    async def astatus(self) -> dict[str, Any]:
        runtime = self._runtime
        cluster = await self.ops.cluster(self.config.election)
        return {
            "instance_id": self.instance_id,
            "mode": self.config.mode,
            "running": runtime is not None,
            "is_leader": self.is_leader,
            "will_execute_jobs": runtime is not None and runtime.plans(),
            "actions_enabled": self.config.token is not None,
            "store": mask_url(self.config.store_url),
            **cluster,
            **(runtime.report() if runtime is not None else NOT_RUNNING),
        }

    def health(self) -> Health:
        """What makes this instance not ready besides an unreachable store (problems:
        ``GET /readyz`` answers 503), and what an operator should know (warnings): sync
        handler threads leaked by timeouts at their bound, a store that lost its data."""
        return self._runtime.health() if self._runtime is not None else Health()

    def status(self) -> dict[str, Any]:
        """This instance, the leader and its epoch, the live instances and every job with
        its next plan time and last outcome (what ``GET /status`` and ``soloist status``
        show)."""
        return self._call(self.astatus())

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
    ) -> None:
        """Replace the store URL, instance id or mode given to ``Scheduler(...)``, before
        it starts (what explicit ``soloist run --store/--instance-id/--mode`` options do
        to an app that was imported first). The metrics follow the new identity."""
        if self._runtime is not None or self._loop is not None:
            raise SoloistError(
                f"scheduler {self.instance_id!r} has started: reconfigure it before start()"
            )
        if instance_id is not None and (not isinstance(instance_id, str) or not instance_id):
            raise ConfigError(f"invalid instance id {instance_id!r}: expected a non-empty string")
        if mode is not None and mode not in MODES:
            raise ConfigError(f"invalid mode {mode!r}: expected 'distributed', 'leader' or 'local'")
        config = self.config
        if store is not None and store != config.store_url:
            check_store_url(store)
            if self._store is not None or self._portal_store is not None:
                raise SoloistError(
                    f"cannot move scheduler {self.instance_id!r} to store {mask_url(store)}: "
                    f"{mask_url(config.store_url)} is open already (a call was made before)"
                )
            self._given_store = None
            self._env_store = _other_env_store(store)
            config = dataclasses.replace(config, store_url=store)
        config = dataclasses.replace(
            config, instance_id=instance_id or config.instance_id, mode=mode or config.mode
        )
        if (config.instance_id, config.mode) != (self.config.instance_id, self.config.mode):
            self.metrics = Metrics(config.instance_id, config.mode)
        self.config = config

    async def start(self, *, workers: bool = True) -> None:
        """Start planning and executing in the running event loop (e.g. an ASGI lifespan).

        With ``workers=False`` only open the store and bind the sync calls (``enqueue``
        from a worker thread) to this loop: nothing is planned or run here, because other
        processes run the workers. :meth:`stop` closes the store either way."""
        if self._runtime is not None:
            return
        store = await self._ready_store()
        self._loop = asyncio.get_running_loop()
        if not workers:
            return
        if self.config.http is not None and self._http is None:
            # Bound before any work is claimed: a taken port fails the start at once.
            from soloist.http.server import HttpServer  # the optional extra soloist[http]

            host, port = self.config.http
            self._http = HttpServer(self, host, port)
            await self._http.start()
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
        self._loop = None
        await self.aclose()

    async def aclose(self) -> None:
        store, self._store = self._store, None
        self._store_ready = False
        if store is not None and store is not self._given_store:
            await store.close()

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
        return await self._ready_store()

    # -- plumbing -----------------------------------------------------------------------------
    async def _ready_store(self) -> CheckedStore:
        portal = self._portal
        if (
            portal is not None
            and asyncio.get_running_loop() is portal.loop
            and self._own_portal_store
        ):
            return await self._ready_portal_store()
        if self._store is None:
            self._store = self._given_store or self._open_store()
        if not self._store_ready:
            await self._prepare(self._store)
            self._store_ready = True
        return self._store

    async def _prepare(self, store: Store) -> None:
        """Migrate ``store``, or with ``migrate=False`` check its schema, creating nothing."""
        self._store_warnings()
        if self._migrate:
            await store.migrate()
        else:
            await require_schema(store)

    def _store_warnings(self) -> None:
        """Once, when the store is first opened: a WARNING when the store given to the
        constructor (or by ``soloist run --store``) is not SOLOIST_STORE_URL. An argument
        wins over the environment, so a pod whose app names a store of its own ignores the
        store its deployment gives it: every pod would run every job on a file of its own."""
        if self._store_warned or self._env_store is None:
            return
        self._store_warned = True
        used = mask_url(self.config.store_url)
        log.warning(
            "store %s given to Scheduler() differs from SOLOIST_STORE_URL=%s: using %s (an "
            "argument wins over the environment); build Scheduler() without a store to use "
            "the environment, or give soloist run --store",
            used,
            mask_url(self._env_store),
            used,
            extra={"action": "store_conflict"},
        )

    def _open_store(self) -> CheckedStore:
        # The drivers derive their timeouts from the lease TTL (soloist.stores.deadlines).
        return open_store(self.config.store_url, clock=None, lease_ttl=self.config.lease_ttl)

    @property
    def _own_portal_store(self) -> bool:
        # A memory store *is* the data and a given store is the caller's: both are shared.
        return self._given_store is None and not self.config.store_url.startswith("memory:")

    async def _ready_portal_store(self) -> CheckedStore:
        async with self._portal_store_lock:
            if self._portal_store is None:
                store = self._open_store()
                try:
                    await self._prepare(store)
                except BaseException:
                    await store.close()
                    raise
                self._portal_store = store
            return self._portal_store

    def _wake(self) -> None:
        if self._runtime is not None:
            self._runtime.wake()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a short operation from sync code: on the scheduler's loop if it runs in
        another thread, else on the portal (a private loop in a daemon thread)."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:
            coro.close()
            raise SoloistError(
                "this sync call was made inside a running event loop; use its async twin "
                "(aenqueue, atrigger, apause, aresume, aretry, ahistory, astatus, ...)"
            )
        if loop is not None and loop.is_running():
            return asyncio.run_coroutine_threadsafe(coro, loop).result()
        return self._ready_portal().call(coro)

    def _ready_portal(self) -> Portal:
        with self._portal_lock:
            portal = self._portal
            if portal is None or not portal.usable:
                if portal is None:
                    atexit.register(self.close)
                # After a fork the parent's store connections are not ours to close.
                self._portal_store = None
                self._portal_store_lock = asyncio.Lock()
                portal = self._portal = Portal()
            return portal

    def close(self) -> None:
        """Close what sync calls opened (the portal's store and thread). Safe twice; called
        at interpreter exit. A running scheduler is stopped by :meth:`stop`, not this."""
        with self._portal_lock:
            portal, self._portal = self._portal, None
            store, self._portal_store = self._portal_store, None
        if portal is None or not portal.usable:
            return
        if store is not None:
            with contextlib.suppress(Exception):
                portal.call(store.close())
        portal.close()


def _other_env_store(given: str | None) -> str | None:
    """SOLOIST_STORE_URL if it is set and differs from the store URL ``given`` to a
    Scheduler (None when no URL was given: the environment is used)."""
    env = os.environ.get("SOLOIST_STORE_URL")
    return env if given is not None and env and env != given else None


class Schedules:
    """Dynamic schedules stored in the store, so that every instance sees them."""

    def __init__(self, app: Scheduler) -> None:
        self._app = app

    async def aadd(self, name: str, **options: Any) -> JobRecord:
        return await self._app.ops.schedule_add(name, **options)

    def add(
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
    ) -> JobRecord:
        """Store a schedule that runs ``task`` with ``payload``; every instance plans it."""
        check_name(name, "schedule name")
        return self._app._call(
            self.aadd(
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
            )
        )

    async def aget(self, name: str) -> JobRecord | None:
        return await self._app.ops.schedule_get(name)

    def get(self, name: str) -> JobRecord | None:
        return self._app._call(self.aget(name))

    async def adelete(self, name: str) -> bool:
        return await self._app.ops.schedule_delete(name)

    def delete(self, name: str) -> bool:
        return self._app._call(self.adelete(name))

    async def alist(self) -> list[JobRecord]:
        return await self._app.ops.schedule_list()

    def list(self) -> list[JobRecord]:
        return self._app._call(self.alist())
