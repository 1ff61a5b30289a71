"""The bridge from the facade's calls to the store, and the sync twins built over it.

A :class:`soloist.Scheduler` opens its store lazily, on the first call that needs it, in
the event loop that makes that call. :class:`StoreBridge` owns that store and every path
to it:

* in the scheduler's own loop (``await app.aenqueue(...)``, the runtime), the store opened
  there;
* from sync code while no scheduler loop runs (a Django view, a script), the portal: a
  private loop that the calling threads run themselves (:mod:`soloist._portal`), with a
  store of its own that stays open between calls. A forked child gets a portal and store
  of its own; the parent's connections are not its to close;
* from another thread while that loop runs (a sync route of an ASGI app, a sync
  handler): ``enqueue`` and ``enqueue_many`` on the portal too, their wake-up of the
  executor sent to that loop (:meth:`StoreBridge.on_scheduler_loop`); the other calls (they
  may touch the running scheduler) hop onto that loop. Stores that are their own data (a
  given store object, ``memory://``, an in-memory SQLite database) are never opened twice:
  every call hops.

:func:`sync_twin` builds each sync method from its async source of truth with the same
parameters (a ``ParamSpec``), so that the two cannot drift apart.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import inspect
import logging
import os
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from soloist._portal import Portal
from soloist.config import Config
from soloist.errors import SoloistError
from soloist.stores import open_store
from soloist.stores.base import Store
from soloist.stores.core import CheckedStore, checked
from soloist.stores.existing import require_schema
from soloist.stores.urls import mask_url

__all__ = ["StoreBridge", "sync_twin"]

log = logging.getLogger("soloist")
T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


class StoreBridge:
    """The store of one scheduler, opened (and migrated) on first use, and the way sync
    code reaches it.

    ``config`` is read at each use (``Scheduler.reconfigure`` replaces it). ``given``: a
    store passed to ``Scheduler(...)``, used as it is and never closed here.
    ``given_url``: the store URL given to the constructor (None: it came from the
    environment). ``migrate=False``: never create or upgrade the schema; a store without
    soloist's newest one fails the first call, naming it."""

    def __init__(
        self,
        config: Callable[[], Config],
        *,
        given: Store | None,
        given_url: str | None,
        migrate: bool,
    ) -> None:
        self._config = config
        # A store given here gets the core's checks like one opened from a URL.
        self._given = checked(given) if given is not None else None
        #: SOLOIST_STORE_URL when it differs from the store given here (which wins): logged
        #: as a WARNING when the store is first opened (see :meth:`_store_warnings`).
        self._env_store = _other_env_store(given_url)
        self._store_warned = False
        self._migrate = migrate
        self._store: CheckedStore | None = None
        self._store_ready = False
        #: The scheduler's running loop, once started (sync calls from other threads hop
        #: onto it).
        self.loop: asyncio.AbstractEventLoop | None = None
        # Sync calls made while no scheduler loop runs go to a portal: a private loop, run
        # by the calling threads, with a store of its own that stays open between calls.
        self.portal: Portal | None = None
        self._portal_store: CheckedStore | None = None
        self._portal_store_lock = asyncio.Lock()
        self._portal_lock = threading.Lock()
        self._portal_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        self._at_exit = False  # close() registered to run at interpreter exit

    # -- the store ------------------------------------------------------------------------------
    async def store(self) -> CheckedStore:
        """The store, opened (and migrated) on first use, in the running event loop."""
        portal = self.portal
        running = asyncio.get_running_loop()
        if portal is not None and running is portal.loop and self._own_portal_store:
            return await self._ready_portal_store()
        if running in self._portal_loops and (portal is None or running is not portal.loop):
            # A call that was on a portal when close() closed it: opening a store here
            # would leave it open for good on a loop about to close.
            raise SoloistError("the store of sync calls was closed (close()) during this call")
        if self._store is None:
            self._store = self._given or self._open_store()
        if not self._store_ready:
            await self._prepare(self._store)
            self._store_ready = True
        return self._store

    @property
    def is_open(self) -> bool:
        """Whether a store was opened already (by a call in some loop or on the portal)."""
        return self._store is not None or self._portal_store is not None

    def move(self, store_url: str, instance_id: str) -> None:
        """Use ``store_url`` from now on instead of the store given or resolved before
        (``Scheduler.reconfigure``); refused once a store is open."""
        if self.is_open:
            raise SoloistError(
                f"cannot move scheduler {instance_id!r} to store {mask_url(store_url)}: "
                f"{mask_url(self._config().store_url)} is open already (a call was made "
                "before)"
            )
        self._given = None
        self._env_store = _other_env_store(store_url)

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
        used = mask_url(self._config().store_url)
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
        config = self._config()
        return open_store(config.store_url, clock=None, lease_ttl=config.lease_ttl)

    @property
    def _own_portal_store(self) -> bool:
        # A memory store *is* the data (so is each in-memory SQLite store: another store
        # object would be another, empty database) and a given store is the caller's: all
        # are shared.
        url = self._config().store_url
        in_memory = url.startswith("memory:") or url.partition("?")[0] == "sqlite:///:memory:"
        return self._given is None and not in_memory

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

    # -- sync calls -----------------------------------------------------------------------------
    def call(self, coro: Coroutine[Any, Any, T], *, hop: bool = True) -> T:
        """Run a short operation from sync code: on the scheduler's loop if it runs in
        another thread, else on the portal (a private loop that the calling thread runs).
        ``hop=False``: an operation that needs nothing of the running scheduler but its
        store and a thread-safe wake-up (enqueue) runs on the portal even then, with the
        portal's own store, when the bridge opened it from a URL: no hand-off to the
        scheduler's loop and back (two thread wake-ups, and a wait for that loop's turn
        while it runs the workers)."""
        loop = self.loop
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
        if loop is not None and loop.is_running() and (hop or not self._own_portal_store):
            return asyncio.run_coroutine_threadsafe(coro, loop).result()
        return self._ready_portal().call(coro)

    def on_scheduler_loop(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` on the scheduler's loop: now if this is that loop (or none runs),
        else soon, from any thread (a sync call that ran on the portal)."""
        loop = self.loop
        if loop is None or not loop.is_running():
            fn()
            return
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is loop:
            fn()
            return
        with contextlib.suppress(RuntimeError):  # closed meanwhile: nothing left to wake
            loop.call_soon_threadsafe(fn)

    def _ready_portal(self) -> Portal:
        with self._portal_lock:
            portal = self.portal
            if portal is None or not portal.usable:
                if not self._at_exit:
                    atexit.register(self.close)
                    self._at_exit = True
                # After a fork the parent's store connections are not ours to close.
                self._portal_store = None
                self._portal_store_lock = asyncio.Lock()
                portal = self.portal = Portal()
                self._portal_loops.add(portal.loop)
            return portal

    # -- closing --------------------------------------------------------------------------------
    def close(self) -> None:
        """Close what sync calls opened (the portal's store and loop). Safe twice; called
        at interpreter exit."""
        with self._portal_lock:
            portal, self.portal = self.portal, None
            store, self._portal_store = self._portal_store, None
        if portal is None or not portal.usable:
            return
        if _loop_runs_here():
            # (A sync shutdown hook of an async app.) The portal's loop cannot run in a
            # thread that runs another: close it from a thread of its own.
            closer = threading.Thread(
                target=_close_portal, args=(portal, store), name="soloist-portal-close"
            )
            closer.start()
            closer.join()
            return
        _close_portal(portal, store)

    async def aclose(self) -> None:
        """Close the store opened in the running loop (not a given one). Safe twice."""
        store, self._store = self._store, None
        self._store_ready = False
        if store is not None and store is not self._given:
            await store.close()


def _close_portal(portal: Portal, store: CheckedStore | None) -> None:
    if store is not None:
        with contextlib.suppress(Exception):
            portal.call(store.close())
    portal.close()


def _loop_runs_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _other_env_store(given: str | None) -> str | None:
    """SOLOIST_STORE_URL if it is set and differs from the store URL ``given`` to a
    Scheduler (None when no URL was given: the environment is used)."""
    env = os.environ.get("SOLOIST_STORE_URL")
    return env if given is not None and env and env != given else None


class Bridged(Protocol):
    """An object whose sync twins run through a :class:`StoreBridge`."""

    @property
    def _bridge(self) -> StoreBridge: ...


B = TypeVar("B", bound=Bridged)


def sync_twin(
    source: Callable[Concatenate[B, P], Coroutine[Any, Any, R]],
    *,
    hop: bool = True,
) -> Callable[Concatenate[B, P], R]:
    """The sync twin of the async method ``source`` (named ``a<name>``): a method
    ``<name>`` with exactly its parameters, that runs it through the owner's bridge (see
    :meth:`StoreBridge.call`) and returns its result. Its docstring is the source's, with
    a line naming the source. Use it in the class body::

        async def atrigger(self, job: str) -> str:
            \"\"\"Run ``job`` once now; returns the occurrence id.\"\"\"
            ...

        trigger = sync_twin(atrigger)

    ``hop``: as :meth:`StoreBridge.call`'s."""
    name = source.__name__
    if not name.startswith("a"):
        raise TypeError(f"{name}: the source of a sync twin is named a<name>")

    @functools.wraps(source)
    def twin(self: B, /, *args: P.args, **kwargs: P.kwargs) -> R:
        # Looked up on the instance, as a hand-written twin would: a subclass's override
        # (or a test's patch) of the async method applies to the sync one too.
        method: Callable[P, Coroutine[Any, Any, R]] = getattr(self, name)
        return self._bridge.call(method(*args, **kwargs), hop=hop)

    twin.__name__ = name[1:]
    twin.__qualname__ = source.__qualname__.removesuffix(name) + name[1:]
    # (No docstrings under python -OO; tests/unit/test_twins.py checks that each has one.)
    twin.__doc__ = twin_docstring(name, source.__doc__) if source.__doc__ else None
    return twin


def twin_docstring(source_name: str, doc: str) -> str:
    """The docstring of the sync twin of ``source_name`` whose docstring is ``doc``
    (also what the API reference shows: docs/_ext/sync_twins.py)."""
    return (
        f"{inspect.cleandoc(doc)}\n\n"
        f"Sync twin of :meth:`{source_name}`, for code that runs no event loop (a script, "
        "a Django view, a worker thread)."
    )
