"""pgqueuer drain: ``--tasks`` no-op jobs enqueued in one batch, then drained by worker processes.

Usage: python bench/peers/pgqueuer_drain.py [--concurrency 10] [--processes 2] [--runs 3]
       [--tasks 10000] [--url postgresql://root@127.0.0.1:5432/test]

Each run installs pgqueuer in a fresh schema ``pgq_drain_<hex>`` (``Queries.install`` with
``db_schema``; its own NOTIFY channel, as channels are database-global), enqueues every job
with one ``Queries.enqueue`` call (lists: one INSERT ... UNNEST statement), and only then
starts ``--processes`` worker processes. Each runs a ``QueueManager`` with
``max_concurrent_tasks=concurrency`` (the per-worker cap on picked jobs; pgqueuer requires
``batch_size <= max_concurrent_tasks / 2``, so ``batch_size = concurrency // 2``) and an
``async def`` no-op entrypoint that records ``time.time()`` when it starts. When the queue
table is empty the workers get SIGTERM, stop their QueueManager and write their timestamps
to a temporary file. Rate = tasks / (last handler start - first handler start), so process
start-up does not count. The schema is dropped after each run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
import uuid
from importlib.metadata import version
from pathlib import Path

import asyncpg
from common import drain_main, run_workers
from pgqueuer.adapters.persistence import qb
from pgqueuer.db import AsyncpgDriver
from pgqueuer.domain.settings import DBSettings
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
from pgqueuer.types import Channel

URL = "postgresql://root@127.0.0.1:5432/test"


def make_queries(conn: asyncpg.Connection, schema: str) -> Queries:
    """pgqueuer's queries for ``schema`` and its channel, on one asyncpg connection."""
    settings = DBSettings(db_schema=schema, channel=f"{schema}_ch")
    return Queries(
        AsyncpgDriver(conn),
        qbe=qb.QueryBuilderEnvironment(settings=settings),
        qbq=qb.QueryQueueBuilder(settings=settings),
        qbs=qb.QuerySchedulerBuilder(settings=settings),
    )


async def work(url: str, schema: str, concurrency: int) -> list[float]:
    """One worker: a QueueManager until SIGTERM; its handler start times."""
    stamps: list[float] = []
    conn = await asyncpg.connect(url, server_settings={"search_path": schema})
    try:
        qm = QueueManager(make_queries(conn, schema), channel=Channel(f"{schema}_ch"))

        @qm.entrypoint("noop")
        async def noop(job: Job) -> None:
            stamps.append(time.time())

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, qm.shutdown.set)
        await qm.run(batch_size=max(1, concurrency // 2), max_concurrent_tasks=concurrency)
    finally:
        await conn.close()
    return stamps


def worker_main(url: str, schema: str, concurrency: int, out: str) -> None:
    """Entry point of a worker process: run it, write its handler start times to ``out``."""
    Path(out).write_text(json.dumps(asyncio.run(work(url, schema, concurrency))))


async def drain(args: argparse.Namespace, outs: list[str]) -> float:
    """Enqueue, start one worker process per path of ``outs``, wait until the queue table
    is empty, stop them; drop the schema. The enqueue's duration."""
    schema = f"pgq_drain_{uuid.uuid4().hex[:8]}"
    n = args.tasks
    conn = await asyncpg.connect(args.url, server_settings={"search_path": schema})
    try:
        queries = make_queries(conn, schema)
        await queries.install()
        t0 = time.perf_counter()
        await queries.enqueue(["noop"] * n, [None] * n, [0] * n)
        enqueue_s = time.perf_counter() - t0

        # The queue table is empty once every job ran and its status was logged.
        count = f"SELECT count(*) FROM {schema}.pgqueuer"  # noqa: S608 (our own name)
        await run_workers(
            worker_main,
            [(args.url, schema, args.concurrency, o) for o in outs],
            lambda: conn.fetchval(count),
        )
    finally:
        try:
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        finally:
            await conn.close()
    return enqueue_s


def main() -> None:
    drain_main(
        __doc__.splitlines()[0],
        URL,
        drain,
        lambda args: {"batch_size": max(1, args.concurrency // 2), "version": version("pgqueuer")},
    )


if __name__ == "__main__":
    main()
