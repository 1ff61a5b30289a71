"""Run a :class:`~soloist.Scheduler` inside an ASGI app (FastAPI, Starlette, Quart...).

ASGI servers send a *lifespan* startup event before serving and a shutdown event when
they stop (uvicorn does so on SIGTERM or Ctrl-C). :func:`lifespan` starts the scheduler's
runtime on the server's event loop at startup and stops it gracefully at shutdown: no new
claims, running handlers finish within the grace period, leases are released and the
leader resigns. The server owns the signals: soloist installs no handler of its own.

    api = FastAPI(lifespan=lifespan(app))                  # workers run in the web process
    api = FastAPI(lifespan=lifespan(app, workers=False))   # only enqueue; workers elsewhere
    api = FastAPI(lifespan=lifespan(app, around=my_lifespan))   # keep your own lifespan

This module imports no framework: a lifespan is a plain async context manager factory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

from soloist.scheduler import Scheduler

__all__ = ["lifespan", "running"]

log = logging.getLogger("soloist.contrib.asgi")

AppT = TypeVar("AppT")
#: What FastAPI and Starlette accept as ``lifespan=``: ``app -> async context manager``,
#: which may yield a state mapping (``request.state``).
Lifespan = Callable[[AppT], contextlib.AbstractAsyncContextManager[Any]]


@contextlib.asynccontextmanager
async def running(scheduler: Scheduler, *, workers: bool = True) -> AsyncIterator[Scheduler]:
    """Start ``scheduler`` in the running event loop; stop it gracefully on exit.

    With ``workers=False`` nothing is planned or run in this process: the store is opened
    (and migrated) at once, so a wrong URL fails the startup. Other processes (``soloist
    run``) do the work. Sync ``enqueue`` calls from worker threads (sync routes) run in
    their own thread on soloist's private loop, with a store of its own; it is closed on
    exit too.
    """
    if not isinstance(scheduler, Scheduler):
        raise TypeError(f"invalid scheduler {scheduler!r}: expected a soloist.Scheduler")
    try:
        await scheduler.start(workers=workers)
    except BaseException:
        await scheduler.stop()  # close what was opened: the app will not start
        raise
    if not workers:
        log.info(
            "soloist store %s open for enqueue only: workers run elsewhere",
            scheduler.config.store_url,
            extra={"action": "start", "instance_id": scheduler.instance_id},
        )
    try:
        yield scheduler
    finally:
        await scheduler.stop()
        await asyncio.to_thread(scheduler.close)  # what sync calls opened


def lifespan(
    scheduler: Scheduler,
    *,
    workers: bool = True,
    around: Lifespan[AppT] | None = None,
) -> Lifespan[AppT]:
    """A ``lifespan=`` for FastAPI / Starlette that runs ``scheduler`` with the app.

    ``around`` is your own lifespan: it runs inside the scheduler's (started after it,
    stopped before it, so it may enqueue at startup), and the state it yields is passed on.
    """
    if not isinstance(scheduler, Scheduler):
        raise TypeError(f"invalid scheduler {scheduler!r}: expected a soloist.Scheduler")
    if around is not None and not callable(around):
        raise TypeError(f"invalid around {around!r}: expected a lifespan function of the app")

    @contextlib.asynccontextmanager
    async def scheduler_lifespan(app: AppT) -> AsyncIterator[Mapping[str, Any] | None]:
        async with running(scheduler, workers=workers):
            if around is None:
                yield None
                return
            async with around(app) as state:
                yield state

    return scheduler_lifespan
