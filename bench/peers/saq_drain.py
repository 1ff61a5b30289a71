"""saq (Redis) drain: ``--tasks`` no-op jobs enqueued at once, then drained by worker processes.

Usage: python bench/peers/saq_drain.py [--concurrency 10] [--processes 2] [--runs 3]
       [--tasks 10000] [--url redis://127.0.0.1:6379/0]

Each run uses a fresh queue ``saqdrain_<hex>``. saq 0.26.4 has no ``enqueue_many``;
its own multi-job path (``Queue.map``) is ``asyncio.gather`` over ``Queue.enqueue`` (one
Lua script call each, at most ``max_concurrent_ops`` = 20 in flight), so the jobs are
enqueued that way, all before any worker starts. Then ``--processes`` worker processes
each run ``Worker(queue, [("noop", noop)], concurrency=concurrency).start()``, the handler an
``async def`` no-op that records ``time.time()`` when it starts. When no job is left
incomplete the workers get SIGTERM (saq's own signal handling stops them) and write their
timestamps to a temporary file. Rate = tasks / (last handler start - first handler start),
so process start-up does not count. Every key naming the queue is deleted after each run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
import uuid
from importlib.metadata import version
from pathlib import Path

import redis.asyncio as aioredis
from common import drain_main, run_workers
from saq import Queue, Worker

URL = "redis://127.0.0.1:6379/0"


async def work(url: str, name: str, concurrency: int) -> list[float]:
    """One worker: a saq Worker until SIGTERM; its handler start times."""
    stamps: list[float] = []

    async def noop(ctx: dict) -> None:
        stamps.append(time.time())

    # Hides only the warning each stop logs about cancelling the process tasks blocked in
    # BLMOVE (shutdown grace period 0); saq's INFO lines are off either way (no logging set).
    logging.getLogger("saq").setLevel(logging.ERROR)
    queue = Queue.from_url(url, name=name)
    try:
        await queue.connect()
        # Named explicitly: saq registers a bare function by __qualname__ ("work.<locals>.noop").
        await Worker(queue, [("noop", noop)], concurrency=concurrency).start()
    finally:
        await queue.disconnect()
    return stamps


def worker_main(url: str, name: str, concurrency: int, out: str) -> None:
    """Entry point of a worker process: run it, write its handler start times to ``out``."""
    Path(out).write_text(json.dumps(asyncio.run(work(url, name, concurrency))))


async def cleanup(r: aioredis.Redis, name: str) -> int:
    """Delete every key naming queue ``name``; how many."""
    keys = [k async for k in r.scan_iter(match=f"*{name}*", count=1000)]
    for i in range(0, len(keys), 500):
        await r.delete(*keys[i : i + 500])
    return len(keys)


async def drain(args: argparse.Namespace, outs: list[str]) -> float:
    """Enqueue, start one worker process per path of ``outs``, wait until no job is
    incomplete, stop them; delete the queue's keys. The enqueue's duration."""
    name = f"saqdrain_{uuid.uuid4().hex[:8]}"
    queue = Queue.from_url(args.url, name=name)
    plain = aioredis.from_url(args.url)
    try:
        await queue.connect()
        t0 = time.perf_counter()
        jobs = await asyncio.gather(*(queue.enqueue("noop") for _ in range(args.tasks)))
        enqueue_s = time.perf_counter() - t0
        if sum(j is not None for j in jobs) != args.tasks:
            raise RuntimeError("some jobs were not enqueued")

        # A job leaves the "incomplete" sorted set when it finishes.
        await run_workers(
            worker_main,
            [(args.url, name, args.concurrency, o) for o in outs],
            lambda: queue.count("incomplete"),
        )
    finally:
        try:
            await cleanup(plain, name)
        finally:
            await plain.aclose()
            await queue.disconnect()
    return enqueue_s


def main() -> None:
    drain_main(
        __doc__.splitlines()[0],
        URL,
        drain,
        lambda args: {"version": version("saq")},
    )


if __name__ == "__main__":
    main()
