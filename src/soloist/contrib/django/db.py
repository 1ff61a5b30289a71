"""Django's database connections around soloist's handlers, as around a request.

Django keeps a connection per thread and closes the stale ones (older than
``CONN_MAX_AGE``, or broken by an error) only when a request starts and ends. A worker
process has no requests, so :func:`manage_db_connections` calls
``django.db.close_old_connections()`` before and after each run of every handler, as
Celery's Django fixup, django-rq and dramatiq's Django middleware do. Without it a
connection the database dropped, or one past its ``CONN_MAX_AGE``, breaks the next handler
that runs in that thread (with ``CONN_HEALTH_CHECKS = True`` the check then runs at the
first query of each run, as it does per request).

* A sync handler runs in one of soloist's worker threads: the connection closed is that
  thread's, in that thread.
* An async handler runs on the event loop, where Django refuses sync database calls. Its
  ORM calls (``aget``, ``asave``...) run in the thread that ``sync_to_async`` uses by
  default (``thread_sensitive=True``), so the closing runs there too, as Django's ASGI
  handler does around a request. That is two thread hops per run of an async handler.

The handlers are wrapped once, when the wrapper is installed or a handler registered
(:meth:`soloist.Scheduler.wrap_handlers`): a scheduler that is not used with Django pays
nothing.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from soloist.registry import Handler
from soloist.scheduler import Scheduler

__all__ = ["closing_old_connections", "manage_db_connections"]


def closing_old_connections(handler: Handler) -> Handler:
    """``handler`` with ``django.db.close_old_connections()`` called before and after each
    run (in the thread whose connections the handler uses)."""
    if inspect.iscoroutinefunction(handler):
        close = sync_to_async(close_old_connections, thread_sensitive=True)

        @functools.wraps(handler)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            await close()
            try:
                return await handler(*args, **kwargs)
            finally:
                await close()

        return run_async

    @functools.wraps(handler)
    def run(*args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        try:
            return handler(*args, **kwargs)
        finally:
            close_old_connections()

    return run


def manage_db_connections(scheduler: Scheduler) -> Scheduler:
    """Close Django's stale database connections around every run of ``scheduler``'s
    handlers (registered now or later); returns ``scheduler``. Safe to call twice.

    ``manage.py soloist run`` does it for ``settings.SOLOIST_APP``; call it yourself when
    you run a scheduler another way in a Django process (``app.run()`` in a command of your
    own, or the ASGI lifespan)."""
    if not isinstance(scheduler, Scheduler):
        raise TypeError(f"invalid scheduler {scheduler!r}: expected a soloist.Scheduler")
    scheduler.wrap_handlers(closing_old_connections)
    return scheduler
