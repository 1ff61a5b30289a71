"""Tasks that report the state of Django's database connection of the thread they use.

The scheduler is built with explicit arguments (``FW_APP_STORE``, else
``SOLOIST_STORE_URL``): ``soloist run --store/--instance-id/--mode`` must still win.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from soloist import JobContext, Scheduler

app = Scheduler(
    os.environ.get("FW_APP_STORE") or os.environ["SOLOIST_STORE_URL"],
    instance_id="from-app",
    mode="leader",
    concurrency=1,
    poll_interval="100ms",
)


def connection_state() -> dict[str, Any]:
    """Whether this thread's connection was closed when the run began, and which
    connection (its PostgreSQL backend pid) the run's query used."""
    from django.db import connection  # Django is set up by then, not at import

    fresh = connection.connection is None
    with connection.cursor() as cursor:
        is_pg = connection.vendor == "postgresql"
        cursor.execute("SELECT pg_backend_pid()" if is_pg else "SELECT 1")
        (value,) = cursor.fetchone()
    return {"fresh": fresh, "thread": threading.get_ident(), "pid": value if is_pg else None}


@app.task
def probe(ctx: JobContext) -> dict[str, Any]:
    return connection_state()


@app.task
async def aprobe(ctx: JobContext) -> dict[str, Any]:
    from asgiref.sync import sync_to_async

    # Where Django's async ORM (aget, asave...) runs its queries.
    return await sync_to_async(connection_state, thread_sensitive=True)()
